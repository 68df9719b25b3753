"""`workbench sae build-clt`: a cross-layer transcoder for a whole model, into the user's cache (attribution/sae/clt.py,
clt_train.py); read back as ``--saes clt:NAME``."""

from __future__ import annotations

import typer

from attribution.sae.clt_train import CLTSpec
from core.options import nonempty, positive_float, positive_int
from workbench.commands.common import JSON_OPTION, corpus_model, emit, result_console

MODEL_OPTION = typer.Option(..., "--model", help="A language model (trained on the English corpus).")


def build_clt(
    model: str = MODEL_OPTION,
    width: int = typer.Option(CLTSpec.width, "--width", help="Features per layer (each writes to its own and every "
                              "later MLP).", callback=positive_int),
    k: int = typer.Option(CLTSpec.k, "--k", help="Active features per token per layer (BatchTopK).",
                          callback=positive_int),
    tokens: int = typer.Option(CLTSpec.tokens, "--tokens", help="Training tokens (cached once, all layers).",
                               callback=positive_int),
    epochs: int = typer.Option(CLTSpec.epochs, "--epochs", help="Passes over the cached tokens.",
                               callback=positive_int),
    lr: float = typer.Option(CLTSpec.lr, "--lr", help="Learning rate (Adam).", callback=positive_float),
    name: str = typer.Option(None, "--name", help="The CLT's name (default MODEL-clt-wWIDTH-tTOKENS), under "
                             "~/.cache/workbench/clts/.", callback=nonempty),
    threads: int = typer.Option(1, "--threads", help="torch CPU threads.", callback=positive_int),
    as_json: bool = JSON_OPTION,
) -> None:
    """Train a cross-layer transcoder (circuit-tracer's CLT: every layer's features write to that MLP's output and
    every later one's), with progress; an interrupted build resumes from its cache and checkpoint when run again
    with the same settings. Use it as `--saes clt:NAME` (feature-graph --method gradient)."""
    import sys
    import time

    from attribution.sae.clt import clts_root
    from attribution.sae.clt_train import build_clt as run

    spec = CLTSpec(model=model, width=width, k=k, tokens=tokens, epochs=epochs, lr=lr)
    spec.check()  # before the model loads
    m = corpus_model(model, name, "a cross-layer transcoder", threads)
    spec.model = m.name
    root = clts_root() / (name or f"{m.name.split('/')[-1]}-clt-w{width}-t{tokens // 1000}k")
    started = time.time()
    last = {"t": 0.0, "stage": ""}

    def progress(stage: str, done: int, total: int) -> None:
        now, head = time.time(), stage.split(" (")[0]  # one line every 15 s or on a new stage
        if head != last["stage"] or now - last["t"] > 15 or done >= total:
            last.update(t=now, stage=head)
            print(f"[{now - started:7.0f} s] {stage} {done:,}/{total:,}", file=sys.stderr, flush=True)

    out = run(m, spec, root, on_progress=progress)

    def human(o):
        c = result_console()
        c.print(f"CLT {o['name']} ({o['model']}): {len(o['quality'])} layers x {o['width']} features, "
                f"{o['train_tokens']:,} tokens, mean EV {o['mean_explained_variance']:.3f}, in {o['path']}")
        for r in o["quality"]:
            c.print(f"  L{r['layer']:<3} EV {r['explained_variance']:.3f}  L0 {r['l0']:5.1f}  "
                    f"dead {r['dead_fraction']:.1%}")

    emit(out, as_json, human)
