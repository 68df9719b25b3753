"""`workbench sae train|eval|features|corpus`: sparse autoencoders trained with SAELens, offline."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from workbench.cli import DEVICE_OPTION, JSON_OPTION, console, emit
from workbench.options import nonneg_float, nonneg_int, positive_float, positive_int

sae_app = typer.Typer(
    help="Sparse autoencoders: train (SAELens), evaluate, dashboards, corpus.", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    sae_app.command("train")(train)
    sae_app.command("eval")(evaluate)
    sae_app.command("corpus")(corpus)
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
    model: str = typer.Option(..., "--model", help="Model name or local path."),
    hook: str = typer.Option(..., "--hook", help="Hook to train on, e.g. blocks.15.hook_resid_post."),
    tokens: int = typer.Option(200_000, "--tokens", help="Activations to cache (one per token).",
                               callback=positive_int),
    kind: str = typer.Option("topk", "--kind", help="topk | transcoder | batchtopk | jumprelu | l1."),
    width: int = typer.Option(None, "--width", help="Number of features (default 8 x the hook's width).",
                              callback=positive_int),
    k: int = typer.Option(32, "--k", help="Active features per token (topk, batchtopk).", callback=positive_int),
    epochs: float = typer.Option(4.0, "--epochs", help="Passes over the cached activations.", callback=positive_float),
    lr: float = typer.Option(4e-4, "--lr", callback=positive_float),
    batch_size: int = typer.Option(512, "--batch-size", help="Activations per training step.", callback=positive_int),
    l1: float = typer.Option(0.5, "--l1", help="L1 coefficient (l1 kind).", callback=nonneg_float),
    l0: float = typer.Option(1.0, "--l0", help="L0 coefficient (jumprelu kind).", callback=nonneg_float),
    ctx: int = typer.Option(128, "--ctx", help="Context window for caching.", callback=positive_int),
    corpus: str = typer.Option(None, "--corpus", help="Corpus directory (default data/corpus)."),
    out: str = typer.Option(None, "--out", help="Where to save the SAE (default: under the run store)."),
    seed: int = typer.Option(0, "--seed", callback=nonneg_int),
    keep_first: bool = typer.Option(False, "--keep-first", help="Also train on position 0 (the "
                                    "attention sink, whose norm dwarfs the rest; left out by default)."),
    device: str = DEVICE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Cache activations at HOOK, train an SAE (SAELens) or a skip transcoder (--kind transcoder:
    MLP input -> MLP output of HOOK's layer), report explained variance (also without the top two
    residual dimensions), L0, dead fraction and the next-token loss change with it spliced in.

    LLMs train on the English corpus from activation shards on disk (resumable: run the same
    command again after an interruption); toy models and --corpus train in memory."""
    from attribution.sae.train import KINDS
    from workbench.errors import RangeError

    if kind == "transcoder" or (kind == "topk" and corpus is None and not _is_toy(model)):
        _train_from_shards(model, hook, tokens, kind, width, k, lr, batch_size, out, seed,
                           keep_first, device, as_json)
        return
    if kind not in KINDS:
        raise RangeError(f"unknown SAE kind {kind!r}: {', '.join(KINDS)}")
    if tokens < 256:
        raise RangeError(f"--tokens {tokens} is too few: cache at least 256")
    if batch_size < 1 or epochs <= 0:
        raise RangeError("--batch-size must be at least 1 and --epochs positive")
    if width is not None and width < 1:
        raise RangeError(f"--width must be positive, got {width}")
    if width is not None and kind in ("topk", "batchtopk") and not 0 < k <= width:
        raise RangeError(f"--k {k} must be between 1 and the SAE width {width}")

    import workbench
    from attribution.sae.train import train_sae
    from workbench.cli import check_device
    from workbench.store import RunDraft, RunStore

    _threads()
    started = time.time()
    m = workbench.load(model, device=check_device(device))
    m.check_hook(hook)
    cache = _cache(m, hook, tokens, ctx, corpus, seed, skip_first=0 if keep_first else 1)
    # the SAE's metadata names the model as the user gave it, so `sae features/eval` can reload it
    # (a zoo name, or a local path for models outside the zoo)
    cache.model = model
    width = width or 8 * cache.d_in
    if kind in ("topk", "batchtopk") and not 0 < k <= width:
        raise RangeError(f"--k {k} must be between 1 and the SAE width {width}")
    t_cache = time.time() - started
    store = RunStore()
    safe_hook = hook.replace(".", "-")
    path = (
        Path(out)
        if out
        else store.root / "saes" / f"{Path(m.name).name}_{safe_hook}_{kind}{width}_{int(time.time())}"
    )
    sae, metrics, info = train_sae(
        m, cache, kind, width, k, epochs, batch_size=batch_size, lr=lr, out=path, seed=seed, l1=l1, l0=l0
    )
    result = {
        **metrics.to_json(),
        "path": str(path),
        "kind": kind,
        "width": width,
        "k": k,
        "hook": hook,
        "model": m.name,
        "train_tokens": info["train_tokens"],
    }
    run = store.save(
        RunDraft(
            kind="sae",
            model=m.name,
            method=f"sae-{kind}",
            args={
                "hook": hook,
                "tokens": tokens,
                "width": width,
                "k": k,
                "epochs": epochs,
                "lr": lr,
                "ctx": ctx,
            },
            timings={"cache_s": t_cache, "train_s": info["seconds"], "total_s": time.time() - started},
            result=result,
        )
    )
    result["run"] = run.id

    def human(o):
        console().print(
            f"SAE saved to {o['path']} (run {o['run']})\n"
            f"explained variance {o['explained_variance']:.3f}  L0 {o['l0']:.1f}  "
            f"dead {o['dead_fraction']:.1%}  MSE {o['mse']:.4g}  "
            f"next-token loss change {o['ce_loss_delta']:+.4f} nats"
        )

    emit(result, as_json, human)


def _is_toy(model: str) -> bool:
    from workbench import zoo
    from workbench.errors import WorkbenchError

    try:
        return zoo.resolve(model).kind != "llm"
    except WorkbenchError:
        return True  # let the in-memory path report the bad model name as it always has


def _train_from_shards(model: str, hook: str, tokens: int, kind: str, width: int | None, k: int,
                       lr: float, batch_size: int, out: str | None, seed: int, keep_first: bool,
                       device: str, as_json: bool) -> None:
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    import workbench
    from attribution.sae.build import BuildSpec, build_dictionary, transcoder_input
    from workbench.cli import check_device
    from workbench.errors import RangeError
    from workbench.store import RunDraft, RunStore

    if _is_toy(model):
        raise RangeError(f"--kind {kind} from disk shards trains on the English corpus; {model} is not an "
                         "LLM of the zoo (toy models train in memory with --kind topk)")
    _threads()
    started = time.time()
    m = workbench.load(model, device=check_device(device))
    m.check_hook(hook)
    hook_in = transcoder_input(hook) if kind == "transcoder" else hook
    width = width or 4 * int(m.arch.d_model)
    if not 0 < k <= width:
        raise RangeError(f"--k {k} must be between 1 and the dictionary width {width}")
    spec = BuildSpec(hook=hook_in, kind=kind, width=width, k=k, tokens=tokens, batch_size=batch_size,
                     lr=lr, skip_first=0 if keep_first else 1, seed=seed)
    store = RunStore()
    name = f"{Path(m.name).name}_L{spec.layer}_{'transcoder' if kind == 'transcoder' else 'resid-topk'}{width}"
    path = Path(out) if out else store.root / "saes" / name
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                  TimeRemainingColumn(), console=console(), transient=True,
                  disable=as_json) as bar:
        task = bar.add_task("starting", total=1)

        def progress(stage: str, done: int, total: int) -> None:
            bar.update(task, description=stage, completed=done, total=max(total, 1))

        info = build_dictionary(m, spec, path, progress)
    result = {**info["metrics"], "path": str(path), "kind": kind, "width": width, "k": k,
              "hook": spec.hook, "hook_out": spec.hook_out, "model": m.name,
              "train_tokens": info["train_tokens"]}
    run = store.save(RunDraft(kind="sae", model=m.name, method=f"sae-{kind}",
                              args={"hook": spec.hook, "tokens": tokens, "width": width, "k": k, "lr": lr},
                              timings={**info["seconds"], "total_s": time.time() - started}, result=result))
    result["run"] = run.id

    def human(o):
        console().print(
            f"{kind} saved to {o['path']} (run {o['run']})\n"
            f"explained variance {o['explained_variance']:.3f} ({o['explained_variance_no_top2']:.3f} "
            f"without the top two dimensions)  L0 {o['l0']:.1f}  dead {o['dead_fraction']:.1%}  "
            f"next-token loss change {o['ce_loss_delta']:+.4f} nats"
        )

    emit(result, as_json, human)


def _load_for(sae_path: str, model: str | None, hook: str | None, device: str):
    import workbench
    from attribution.sae.train import load_sae
    from workbench.cli import check_device
    from workbench.errors import ModelFileError

    sae = load_sae(sae_path)
    meta = sae.cfg.metadata
    model = model or meta.model_name
    hook = hook or meta.hook_name
    if not model or not hook:
        raise ModelFileError(f"SAE {sae_path!r} does not say its model and hook: give --model and --hook")
    m = workbench.load(model, device=check_device(device))
    m.check_hook(hook)
    return sae, m, hook


def evaluate(
    sae: str = typer.Option(..., "--sae", help="SAE directory (SAELens format)."),
    model: str = typer.Option(None, "--model", help="Model (default: the SAE's own)."),
    hook: str = typer.Option(None, "--hook", help="Hook (default: the SAE's own)."),
    tokens: int = typer.Option(8192, "--tokens", help="Fresh tokens to evaluate on.", callback=positive_int),
    windows: int = typer.Option(8, "--windows", help="Windows for the spliced next-token loss.", callback=positive_int),
    corpus: str = typer.Option(None, "--corpus"),
    seed: int = typer.Option(1, "--seed", help="Sampling seed for toy-model inputs.", callback=nonneg_int),
    device: str = DEVICE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """MSE, explained variance, L0, dead fraction and next-token loss change of an SAE."""
    from attribution.sae.train import check_fits
    from attribution.sae.train import evaluate as run_eval

    _threads()
    s, m, hook = _load_for(sae, model, hook, device)
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
    as_json: bool = JSON_OPTION,
) -> None:
    """Build the offline text corpus from documentation inside installed packages (and model samples)."""
    from attribution.sae.cache import default_corpus
    from attribution.sae.corpus import build_corpus, model_samples

    docs = []
    if samples:
        import workbench

        _threads()
        docs = model_samples(workbench.load(model), samples)
    summary = build_corpus(Path(out) if out else default_corpus(), max_chars=chars, samples=docs)
    emit(summary, as_json)
