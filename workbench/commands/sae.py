"""`workbench sae train|eval|features|corpus`: sparse autoencoders trained with SAELens, offline."""

from __future__ import annotations

from pathlib import Path

import typer

from attribution.sae.config import TRAIN
from attribution.sae.sets import SetSpec
from core.options import (
    allow_long_option,
    check_output,
    nonempty,
    nonneg_float,
    nonneg_int,
    positive_float,
    positive_int,
)
from workbench.commands.common import (
    DEVICE_OPTION,
    DTYPE_OPTION,
    JSON_OPTION,
    MODEL_PATH_OPTION,
    THREADS_OPTION,
    console,
    corpus_model,
    dtype_spec,
    emit,
    result_console,
)
from workbench.commands.jobs import RAY_ADDRESS_OPTION, workers_option

sae_app = typer.Typer(
    help="Sparse autoencoders: train (SAELens), evaluate, dashboards, corpus.", no_args_is_help=True
)

CORPUS_MODEL_OPTION = typer.Option(..., "--model", help="Model name or local path (an LLM: the English corpus).")


def register(app: typer.Typer) -> None:
    sae_app.command("train")(train)
    sae_app.command("cache")(cache)
    sae_app.command("eval")(evaluate)
    sae_app.command("corpus")(corpus)
    sae_app.command("build-set")(build_set)
    sae_app.command("pull")(pull)
    from workbench.commands.sae_clt import build_clt

    sae_app.command("build-clt")(build_clt)
    app.add_typer(sae_app, name="sae")


def _cache(m, hook: str, tokens: int, ctx: int, corpus: str | None, seed: int = 0, held_out: bool = False,
           skip_first: int = 1):
    from attribution.sae.cache import cache_activations, model_texts

    ctx = min(ctx, m.arch.n_ctx)
    texts = model_texts(m, Path(corpus) if corpus else None, tokens, ctx, seed, held_out)
    return cache_activations(m, hook, texts, tokens, ctx=ctx, skip_first=skip_first)


def _threads() -> None:
    import torch

    torch.set_num_threads(min(2, torch.get_num_threads()))


def train(
    model: str = MODEL_PATH_OPTION,
    hook: str = typer.Option(..., "--hook", help="Hook to train on, e.g. blocks.15.hook_resid_post."),
    tokens: int = typer.Option(TRAIN.tokens, "--tokens", help="Activations to cache (one per token).",
                               callback=positive_int),
    kind: str = typer.Option(TRAIN.kind, "--kind", help="topk | transcoder | batchtopk | jumprelu | l1."),
    width: int = typer.Option(TRAIN.width, "--width", help="Number of features (default 8 x the hook's width).",
                              callback=positive_int),
    k: int = typer.Option(TRAIN.k, "--k", help="Active features per token (topk, batchtopk).", callback=positive_int),
    epochs: float = typer.Option(4.0, "--epochs", help="Passes over the cached activations.", callback=positive_float),
    lr: float = typer.Option(TRAIN.lr, "--lr", callback=positive_float),
    batch_size: int = typer.Option(TRAIN.batch_size, "--batch-size", help="Activations per training step.",
                                   callback=positive_int),
    l1: float = typer.Option(0.5, "--l1", help="L1 coefficient (l1 kind).", callback=nonneg_float),
    l0: float = typer.Option(1.0, "--l0", help="L0 coefficient (jumprelu kind).", callback=nonneg_float),
    ctx: int = typer.Option(128, "--ctx", help="Context window for caching.", callback=positive_int),
    corpus: str = typer.Option(None, "--corpus", help="Corpus directory (default data/corpus).", callback=nonempty),
    out: str = typer.Option(None, "--out", help="Where to save the SAE (default: under the run store)."),
    seed: int = typer.Option(TRAIN.seed, "--seed", callback=nonneg_int),
    keep_first: bool = typer.Option(False, "--keep-first", help="Also train on position 0 (the "
                                    "attention sink, whose norm dwarfs the rest; left out by default)."),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    ray_address: str = RAY_ADDRESS_OPTION,
    allow_long: bool = allow_long_option(),
    as_json: bool = JSON_OPTION,
) -> None:
    """Cache activations at HOOK, train an SAE (SAELens) or a skip transcoder (--kind transcoder:
    MLP input -> MLP output of HOOK's layer), report explained variance (also without the top two
    residual dimensions), L0, dead fraction and the next-token loss change with it spliced in.

    LLMs train on the English corpus from activation shards on disk (resumable: run the same
    command again after an interruption); toy models and --corpus train in memory. With
    --ray-address it runs as a job on Ray (progress: training steps)."""
    from attribution.sae.train import KINDS
    from core.errors import RangeError
    from workbench.commands.common import check_device
    from workbench.scheduler import resolve_address
    from workbench.scheduler.kind_sae import check_out, from_shards, is_toy, train_dictionary
    from workbench.scheduler.specs import SaeTrainSpec

    spec = SaeTrainSpec(model=model, device=check_device(device), **dtype_spec(dtype), hook=hook, tokens=tokens,
                        sae_kind=kind, width=width, k=k, epochs=epochs, lr=lr, batch_size=batch_size, l1=l1, l0=l0,
                        ctx=ctx, corpus=corpus, out=str(Path(out).resolve()) if out else None, seed=seed,
                        keep_first=keep_first).to_dict()
    check_output("--out", out, kind="dir")  # before anything loads
    check_out(out)
    from attribution.sae.cache import check_token_hook

    check_token_hook(hook)
    from core.models.zoo import check_text_model

    check_text_model(model, "sae train")
    shards = from_shards(spec)
    if shards and is_toy(model):
        raise RangeError(f"--kind {kind} from disk shards trains on the English corpus; {model} is not an "
                         "LLM of the zoo (toy models train in memory with --kind topk)")
    if not shards:
        if kind not in KINDS:
            raise RangeError(f"unknown SAE kind {kind!r}: {', '.join(KINDS)}")
        if tokens < 256:
            raise RangeError(f"--tokens {tokens} is too few: cache at least 256")
    if width is not None and kind in ("topk", "batchtopk", "transcoder") and not 0 < k <= width:
        raise RangeError(f"--k {k} must be between 1 and the SAE width {width}")
    if resolve_address(ray_address) is not None:
        from core.models import zoo
        from workbench.commands.jobs import run_job

        zoo.resolve(model)  # an unknown model fails here, not in a worker
        job, res = run_job(spec, 1, ray_address)
        result = {**res.result, "run": job.run_id, "job_id": job.id}
    else:
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        from core.store import RunStore

        with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                      TimeRemainingColumn(), console=console(), transient=True,
                      disable=as_json or not shards) as bar:
            task = bar.add_task("starting", total=1)

            def progress(stage: str, done: int, total: int) -> None:
                bar.update(task, description=stage, completed=done, total=max(total, 1))

            res = train_dictionary(spec, progress)
        result = {**res.result, "run": res.save(RunStore()).id}

    def human(o):
        if "explained_variance_no_top2" in o:
            result_console().print(
                f"{o['kind']} saved to {o['path']} (run {o['run']})\n"
                f"explained variance {o['explained_variance']:.3f} ({o['explained_variance_no_top2']:.3f} "
                f"without the top two dimensions)  L0 {o['l0']:.1f}  dead {o['dead_fraction']:.1%}  "
                f"next-token loss change {o['ce_loss_delta']:+.4f} nats")
            return
        result_console().print(
            f"SAE saved to {o['path']} (run {o['run']})\n"
            f"explained variance {o['explained_variance']:.3f}  L0 {o['l0']:.1f}  "
            f"dead {o['dead_fraction']:.1%}  MSE {o['mse']:.4g}  "
            f"next-token loss change {o['ce_loss_delta']:+.4f} nats"
        )

    emit(result, as_json, human)


def cache(
    model: str = CORPUS_MODEL_OPTION,
    hooks: str = typer.Option(..., "--hooks", help="Comma-separated hooks, cached in one pass, e.g. "
                              "blocks.6.hook_resid_post,blocks.6.ln2.hook_normalized."),
    tokens: int = typer.Option(200_000, "--tokens", help="Activations to cache per hook.", callback=positive_int),
    split: str = typer.Option("train", "--split", help="Corpus split: train or heldout."),
    corpus: str = typer.Option(None, "--corpus", help="English corpus file (default data/corpus/english.jsonl.gz).",
                               callback=nonempty),
    out: str = typer.Option(None, "--out", help="Shard directory (default: the one `sae train` reads, under "
                            "~/.cache/workbench/acts/)."),
    ctx: int = typer.Option(128, "--ctx", help="Context window.", callback=positive_int),
    batch_size: int = typer.Option(16, "--batch-size", help="Windows per forward.", callback=positive_int),
    shard_tokens: int = typer.Option(65_536, "--shard-tokens", help="Tokens per shard file (the unit the "
                                     "workers share).", callback=positive_int),
    keep_first: bool = typer.Option(False, "--keep-first", help="Also cache position 0 (the attention sink)."),
    threads: int = THREADS_OPTION,
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    workers: int = workers_option("the shard files"),
    ray_address: str = RAY_ADDRESS_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Cache activations at HOOKS over the English corpus into resumable float16 shards on disk (what
    `sae train` and scripts/build_dictionaries.py train from). --workers N splits the shards over N Ray
    workers, each holding the model once; the files are the ones a single process writes."""
    from attribution.sae.build import resumed_hooks, shard_dir
    from core.corpus import SPLITS, english_path
    from core.errors import DatasetError, RangeError
    from core.models import zoo
    from core.options import split_list
    from workbench.commands.common import check_device
    from workbench.commands.jobs import run_job

    names = split_list("--hooks", hooks)
    if split not in SPLITS:
        raise DatasetError(f"unknown corpus split {split!r}: {', '.join(SPLITS)}")
    skip_first = 0 if keep_first else 1
    if skip_first >= ctx:
        raise RangeError(f"--ctx {ctx} is too short: it must exceed the skipped first position")
    source = Path(corpus) if corpus else english_path()
    if not source.is_file():
        raise DatasetError(f"no English corpus at {source}")
    entry = zoo.resolve(model)
    if entry.kind != "llm":
        raise RangeError(f"{model} is not a language model: SAE caching reads the English corpus")
    from core.models.llm import describe

    n_ctx = ((describe(entry) or {}).get("arch") or {}).get("n_ctx")  # from config.json: nothing loads
    if n_ctx and ctx > n_ctx:
        raise RangeError(f"--ctx {ctx} is longer than {entry.name}'s context of {n_ctx} tokens")
    check_output("--out", out, kind="dir")
    target = Path(out) if out else shard_dir(entry.name, names, split, skip_first)
    if not out:  # resuming a default directory that holds more hooks: all of them
        names = resumed_hooks(target, names)
    from workbench.scheduler.specs import SaeCacheSpec

    spec = SaeCacheSpec(model=model, device=check_device(device), **dtype_spec(dtype), threads=threads, hooks=names,
                        split=split, corpus=str(source.resolve()), out=str(target.resolve()), tokens=tokens, ctx=ctx,
                        batch_size=batch_size, shard_tokens=shard_tokens, skip_first=skip_first, bf16=True)
    job, res = run_job(spec, workers, ray_address)
    result = {**res.to_json(), "run": job.run_id, "job_id": job.id}

    def human(o):
        result_console().print(f"{o['shards']} shard(s), {o['tokens']:,} tokens x {len(o['hooks'])} hook(s) in "
                               f"{o['out']} (run {o['run']})")

    emit(result, as_json, human)


def _load_for(sae_path: str, model: str | None, hook: str | None, device: str, dtype: str = "float32"):
    import workbench
    from attribution.sae.train import load_sae
    from core.errors import ModelFileError
    from workbench.commands.common import check_device

    sae = load_sae(sae_path)
    meta = sae.cfg.metadata
    model = model or meta.model_name
    hook = hook or meta.hook_name
    if not model or not hook:
        raise ModelFileError(f"SAE {sae_path!r} does not say its model and hook: give --model and --hook")
    from core.models.zoo import check_text_model

    check_text_model(model, "a dictionary")
    m = workbench.load(model, device=check_device(device), dtype=dtype)
    m.check_hook(hook)
    return sae, m, hook


def evaluate(
    sae: str = typer.Option(..., "--sae", help="SAE directory (SAELens format)."),
    model: str = typer.Option(None, "--model", help="Model (default: the SAE's own).", callback=nonempty),
    hook: str = typer.Option(None, "--hook", help="Hook (default: the SAE's own).", callback=nonempty),
    tokens: int = typer.Option(8192, "--tokens", help="Fresh tokens to evaluate on.", callback=positive_int),
    windows: int = typer.Option(8, "--windows", help="Windows for the spliced next-token loss.", callback=positive_int),
    corpus: str = typer.Option(None, "--corpus", callback=nonempty),
    seed: int = typer.Option(1, "--seed", help="Sampling seed for toy-model inputs.", callback=nonneg_int),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """MSE, explained variance, L0, dead fraction and next-token loss change of an SAE."""
    from attribution.sae.train import check_fits
    from attribution.sae.train import evaluate as run_eval

    _threads()
    s, m, hook = _load_for(sae, model, hook, device, dtype)
    probe = _cache(m, hook, 256, 32, corpus, seed, held_out=True)
    check_fits(s, probe.d_in, hook)  # fail fast, before the long cache
    # SAEs trained here read the corpus from its start: evaluate on text from its end
    cache = _cache(m, hook, tokens, 128, corpus, seed, held_out=True)
    metrics = run_eval(m, s, hook, cache.acts, cache.windows[-windows:], cache.skip_first)
    out = {**metrics.to_json(), "sae": sae, "model": m.name, "hook": hook}
    emit(out, as_json)


def corpus(
    out: str = typer.Option(None, "--out", help="Output directory (default data/corpus)."),
    chars: int = typer.Option(2_000_000, "--chars", help="Characters of text to collect.", callback=positive_int),
    samples: int = typer.Option(0, "--samples", help="Also sample this many texts from --model.", callback=nonneg_int),
    model: str = typer.Option("smollm2-135m", "--model", help="Model for --samples."),
    allow_long: bool = allow_long_option(),
    as_json: bool = JSON_OPTION,
) -> None:
    """Build the offline text corpus from documentation inside installed packages (and model samples)."""
    from attribution.sae.cache import default_corpus
    from attribution.sae.corpus import build_corpus, model_samples

    check_output("--out", out, kind="dir")  # before any sampling
    docs = []
    if samples:
        import workbench

        _threads()
        docs = model_samples(workbench.load(model), samples)
    summary = build_corpus(Path(out) if out else default_corpus(), max_chars=chars, samples=docs)
    emit(summary, as_json)


def build_set(
    model: str = CORPUS_MODEL_OPTION,
    kind: str = typer.Option(SetSpec.kind, "--kind", help="transcoder (one per layer: MLP input -> MLP output)."),
    layers: str = typer.Option("all", "--layers", help="all, a range 0-5, or layers 3,7,11."),
    width: int = typer.Option(SetSpec.width, "--width", help="Features per transcoder.", callback=positive_int),
    k: int = typer.Option(SetSpec.k, "--k", help="Active features per token while training (TopK).",
                          callback=positive_int),
    tokens: int = typer.Option(SetSpec.tokens, "--tokens", help="Training tokens per layer (cached once for all).",
                               callback=positive_int),
    name: str = typer.Option(None, "--name", help="The set's name (default MODEL-transcoders-wWIDTH), under "
                             "~/.cache/workbench/sets/.", callback=nonempty),
    epochs: int = typer.Option(SetSpec.epochs, "--epochs", help="Passes over the cached tokens (cheap steps: no "
                               "forward pass; 3 with --lr 0.002 paid most in results/sae/replacement.md).",
                               callback=positive_int),
    lr: float = typer.Option(SetSpec.lr, "--lr", help="Learning rate.", callback=positive_float),
    massive_above: float = typer.Option(None, "--massive-above", help="Leave out of training and of the quality "
                                        "figures the tokens whose MLP-output norm is over this multiple of the "
                                        "layer's median (massive activations; 0: keep every token). Default: the "
                                        "set's own when it resumes (none for sets built before), 100 for a new set. "
                                        "Graphs still run every token through the transcoders.",
                                        callback=nonneg_float),
    sparsity: str = typer.Option(None, "--sparsity", help="How training picks active features: batchtopk (k per "
                                 "token on average over a batch, as the saved JumpReLU form fires) or topk (k per "
                                 "token). Default: the set's own when it resumes (topk for sets built before), "
                                 "batchtopk for a new set."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the cost estimate and what is built; train nothing."),
    threads: int = typer.Option(1, "--threads", help="torch CPU threads.", callback=positive_int),
    as_json: bool = JSON_OPTION,
) -> None:
    """Train one transcoder per layer into a named dictionary set in the user's cache (never the repository):
    the cost estimate first, then progress; a layer already built is skipped, an interrupted one resumes from
    its checkpoint, each is saved atomically. Use it as `--saes set:NAME` (feature-graph, feature commands)."""
    import sys

    from attribution.sae.sets import (
        built_layers,
        check_massive,
        check_sparsity,
        default_name,
        estimate,
        parse_layers,
        sets_root,
    )
    from core.errors import RangeError

    check_massive(massive_above)  # before the model loads
    check_sparsity(sparsity)
    if kind != "transcoder":
        raise RangeError(f"--kind {kind!r}: a dictionary set is built of transcoders (--kind transcoder)")
    if not 0 < k <= width:
        raise RangeError(f"--k {k} must be between 1 and the width {width}")
    m = corpus_model(model, name, "a transcoder set", threads)
    spec = SetSpec(model=m.name, layers=parse_layers(layers, m.arch.n_layers), width=width, k=k, tokens=tokens,
                   epochs=epochs, lr=lr, massive_above=massive_above, sparsity=sparsity)
    spec.check()
    root = sets_root() / (name or default_name(m.name, width))
    todo = [x for x in spec.layers if x not in built_layers(root)]
    est = estimate(spec, m.n_params(), m.arch.d_model, m.arch.n_layers, todo)
    print(f"set {root.name}: {len(spec.layers)} layer(s), {len(spec.layers) - len(todo)} built, {len(todo)} to build; "
          f"estimate {est['total_s'] / 60:.0f} min on {threads} thread(s) (cache {est['cache_s'] / 60:.0f}, "
          f"train {est['train_s'] / 60:.0f}, eval {est['eval_s'] / 60:.0f}), {est['disk_gb']:.1f} GB of "
          f"activations at the peak", file=sys.stderr, flush=True)
    if dry_run:
        emit({"name": root.name, "path": str(root), "layers": spec.layers, "todo": todo, "estimate": est},
             as_json)
        return
    import time

    from attribution.sae.sets import build_set as run

    last = {"t": 0.0, "stage": ""}
    started = time.time()

    def progress(stage: str, done: int, total: int) -> None:
        now = time.time()  # one line every 15 s (or on a new stage): a log file stays readable
        if stage != last["stage"] or now - last["t"] > 15 or done >= total:
            last.update(t=now, stage=stage)
            print(f"[{now - started:7.0f} s] {stage} {done:,}/{total:,}", file=sys.stderr, flush=True)

    built = {"n": 0, "t": started}

    def layer_done(layer: int, info: dict) -> None:
        from core.progress import clock

        q = info.get("metrics") or {}
        now = time.time()
        built["n"] += 1  # what is left: the mean time a layer so far (its share of the cache included)
        left = (now - started) / built["n"] * max(0, len(todo) - built["n"])
        print(f"[{now - started:7.0f} s] layer {layer} built in {now - built['t']:.0f} s: EV "
              f"{q.get('explained_variance', 0):.3f} L0 {q.get('l0', 0):.1f} dead {q.get('dead_fraction', 0):.1%} "
              f"loss change {q.get('ce_loss_delta', 0):+.4f} · {built['n']}/{len(todo)} · about {clock(left)} left",
              file=sys.stderr, flush=True)
        built["t"] = now

    out = run(m, spec, root=root, on_progress=progress, on_layer=layer_done)

    def human(o):
        c = result_console()
        c.print(f"set {o['name']} ({o['model']}): {len(o['quality'])}/{len(o['layers'])} layers built in {o['path']}"
                + ("" if o["complete"] else f"; missing {o['missing']}"))
        for r in o["quality"]:
            if r.get("damaged"):
                c.print(f"  L{r['layer']:<3} damaged")
                continue
            gone = r.get("massive_left_out") or {}
            left = (f"  massive tokens left out {gone.get('train', 0)} train, {gone.get('heldout', 0)} held-out"
                    if gone.get("train") or gone.get("heldout") else "")
            c.print(f"  L{r['layer']:<3} EV {r['explained_variance']:.3f}  L0 {r['l0']:5.1f}  "
                    f"dead {r['dead_fraction']:.1%}  loss change {r['ce_loss_delta'] or 0:+.4f}  "
                    f"{r['seconds'] or 0:.0f} s{left}")

    emit(out, as_json, human)


def pull(
    ref: str = typer.Argument(..., help="RELEASE/SAE_ID from SAELens' registry (pretrained_saes.yaml); * in the id "
                              "takes several, e.g. gemma-scope-2-270m-pt-transcoders-all/"
                              "layer_*_width_16k_l0_small_affine."),
    model: str = typer.Option(None, "--model", help="The model they were trained on (needed to convert those that "
                              "read a norm's output: its weight is folded in).", callback=nonempty),
    as_json: bool = JSON_OPTION,
) -> None:
    """Fetch published dictionaries by name (the hub, or a local copy of the release under
    $WORKBENCH_SAE_RELEASES) and convert them once into ~/.cache/workbench/pretrained/; then `--saes
    pretrained:RELEASE/ID` reads them offline and `sae list` shows them."""
    from attribution.sae.pretrained import parse_ref, sae_ids

    ids = sae_ids(*parse_ref(ref))  # a bad name fails before anything loads
    m = None
    if model:
        import workbench as wb

        m = wb.load(model)
    from attribution.sae.pretrained import load_pretrained

    dicts = load_pretrained(ref if ref.startswith("pretrained:") else f"pretrained:{ref}", m)
    rows = [{"name": d.name, "path": str(d.path), "hook": d.hook, "hook_out": d.hook_out, "layer": d.layer,
             "kind": d.kind, "width": d.d_sae} for d in dicts]

    def human(rows):
        c = result_console()
        c.print(f"{len(rows)} of {len(ids)} dictionaries ready:")
        for r in rows:
            c.print(f"  L{r['layer']}  {r['kind']}  width {r['width']}  {r['path']}")

    emit(rows, as_json, human)
