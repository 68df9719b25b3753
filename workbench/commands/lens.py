"""``workbench lens``: the logit or tuned lens on one prompt; ``workbench lens-train``: build a tuned lens."""

from __future__ import annotations

from typing import Any

import typer

from core.figures import png_option
from core.options import allow_long_option, any_int, float_range, positive_int, token_text
from workbench.commands.common import (
    DEVICE_OPTION,
    DTYPE_OPTION,
    JSON_OPTION,
    MODEL_ARGUMENT,
    PROMPT_ARGUMENT,
    SAVE_OPTION,
    SEED_OPTION,
    check_prompt,
    console,
    emit,
    finish,
    result_console,
)


def register(app: typer.Typer) -> None:
    app.command("lens", help="Read the residual stream at every layer and position as next-token predictions "
                "(logit lens, or the tuned lens where one is trained).")(lens)
    app.command("lens-train", help="Train a tuned lens on the English corpus and write it under "
                "data/lenses/MODEL (with its per-layer held-out KL).")(lens_train)


def lens(
    model: str = MODEL_ARGUMENT,
    prompt: str = PROMPT_ARGUMENT,
    kind: str = typer.Option("logit", "--kind", help="logit or tuned."),
    target: str = typer.Option(None, "--target", help="A token (leading space included) whose rank and "
                               "probability are reported per layer.", callback=token_text),
    position: int = typer.Option(None, "--position", help="Position of the target's rank (default the last; "
                                 "negative counts from the end).", callback=any_int),
    top_k: int = typer.Option(5, "--top-k", help="Tokens kept per layer and position.", callback=positive_int),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    save: bool = SAVE_OPTION,
    png: str = png_option(),
    as_json: bool = JSON_OPTION,
) -> None:
    """Each layer's top tokens at every position through the logit or tuned lens."""
    from attribution.lens import check_kind
    from workbench.commands.common import check_device

    check_kind(kind)
    check_prompt(prompt, png)  # a bad --png or an empty prompt fails before any work
    import workbench as wb
    from attribution.lens import lens as run_lens
    from core.models.zoo import resolve

    if resolve(model).kind == "vit":  # the zoo entry says so before anything loads
        from core.errors import MethodError

        raise MethodError(f"{model} is a vision model: the logit and tuned lenses are not for vision models")
    m = wb.load(model, device=check_device(device), dtype=dtype)
    res = run_lens(m, prompt, kind=kind, target=target, top_k=top_k, position=position)

    def human(r: dict[str, Any]) -> None:
        c = result_console()
        c.print(f"{r['kind']} lens · {r['model']} · {len(r['tokens'])} tokens · {r['seconds']:.2f} s")
        width = max(len(x) for x in r["layers"])
        cols = [f"{i}:{t!r}"[:14] for i, t in enumerate(r["tokens"])]
        # each cell holds the layer's k tokens at that position, one a line (rank 1 on the layer's line)
        tops_k = r.get("topk_tokens") or [[[t] for t in row] for row in r["top_tokens"]]
        probs_k = r.get("topk_probs") or [[[p] for p in row] for row in r["probs"]]
        per = max(1, (c.width - width - 3) // 17)  # positions a block, so that a block fits the terminal
        for start in range(0, len(cols), per):
            shown = slice(start, start + per)
            if start:
                print()
            print(" " * width + " | " + " | ".join(f"{x:14}" for x in cols[shown]).rstrip())
            for name, tops, probs in zip(r["layers"], tops_k, probs_k, strict=True):
                for rank in range(max(len(t) for t in tops)):
                    cells = [f"{t[rank]!r:.9} {p[rank]:.2f}"[:14] if rank < len(t) else ""
                             for t, p in zip(tops[shown], probs[shown], strict=True)]
                    print((f"{name if rank == 0 else '':>{width}} | " + " | ".join(f"{x:14}" for x in cells)).rstrip())
        if "target_rank" in r:
            c.print(f"target {r['target']!r} at position {r['position']}: rank per layer {r['target_rank']}")

    finish(res.to_json(), as_json, human, res, save=save, png=png)


def lens_train(
    model: str = typer.Argument("smollm2-135m", help="An LLM from `workbench models`."),
    tokens: int = typer.Option(131072, "--tokens", help="At most this many training tokens for the "
                               "closed-form fit.", callback=positive_int),
    fit_seconds: float = typer.Option(600.0, "--fit-seconds", help="Time budget of the fit.",
                                      callback=float_range(0, lo_open=True)),
    kl_seconds: float = typer.Option(240.0, "--kl-seconds", help="Time budget of KL fine-tuning (0: none).",
                                     callback=float_range(0)),
    kl_tokens: int = typer.Option(2048, "--kl-tokens", help="Cached tokens for KL fine-tuning.",
                                  callback=positive_int),
    heldout: int = typer.Option(512, "--heldout-tokens", help="Held-out tokens for the KL table.",
                                callback=positive_int),
    kl_batch: int = typer.Option(64, "--kl-batch", help="Tokens per KL step.", callback=positive_int),
    batch_windows: int = typer.Option(8, "--batch-windows", help="128-token windows per forward.",
                                      callback=positive_int),
    seed: int = SEED_OPTION,
    out: str = typer.Option(None, "--out", help="Output directory (default data/lenses/MODEL)."),
    table: str = typer.Option(None, "--table", help="Also write the markdown KL table here."),
    dtype: str = DTYPE_OPTION,
    allow_long: bool = allow_long_option(),
    as_json: bool = JSON_OPTION,
) -> None:
    """Train a tuned lens (closed-form fit, then KL fine-tuning) and report each layer's held-out KL."""
    from pathlib import Path

    import workbench as wb
    from core.options import check_long, check_memory, check_output

    check_output("--out", out, kind="dir")  # both outputs before the model loads
    check_output("--table", table)
    check_long(f"--fit-seconds {fit_seconds:g} plus --kl-seconds {kl_seconds:g}", fit_seconds + kl_seconds,
               allow_long)
    from core.errors import MethodError
    from core.models.zoo import resolve

    def why(kind: str) -> str:
        return "lenses are not for vision models" if kind == "vit" else \
            "tuned lenses are trained on the English corpus for LLMs"

    entry_kind = resolve(model).kind  # a vision or toy model is refused before it loads (as after, below)
    if entry_kind != "llm":
        raise MethodError(f"{model} is a {entry_kind} model: {why(entry_kind)}")
    from attribution.lens.train import TrainConfig, build, results_table

    m = wb.load(model, dtype=dtype)
    kind = getattr(m, "kind", None) or ("vit" if type(m).__name__ == "HookedViT" else "unknown")
    if kind != "llm":
        raise MethodError(f"{getattr(m, 'name', model)} is a {kind} model: {why(kind)}")
    a = m.arch  # the cached residual stacks [layer + 1, tokens, d_model] in float32 must fit
    check_memory(f"--kl-tokens {kl_tokens} and --heldout-tokens {heldout} of residual stacks",
                 4 * (a.n_layers + 1) * a.d_model * (kl_tokens + heldout) * 2)
    cfg = TrainConfig(train_tokens=tokens, fit_seconds=fit_seconds, kl_seconds=kl_seconds, kl_tokens=kl_tokens,
                      heldout_tokens=heldout, seed=seed, kl_batch=kl_batch, batch_windows=batch_windows)
    c = console()
    import time

    from core.progress import clock

    started = time.monotonic()

    def log(line: str) -> None:  # each batch or step as it ends, on a terminal or a log file; the budgets bound it
        elapsed = time.monotonic() - started
        left = max(0.0, fit_seconds + kl_seconds - elapsed)
        c.print(f"[{clock(elapsed):>8}] {line} · at most {clock(left)} left (and the held-out KL)",
                highlight=False, markup=False)

    summary = build(m, cfg, out_dir=out, log=log)
    if table:
        Path(table).write_text(results_table(summary))
    emit(summary, as_json, lambda s: print(results_table(s)))
