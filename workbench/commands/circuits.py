"""``workbench ablate`` and ``workbench patch``: circuit tools from circuits/tools on any model."""

from __future__ import annotations

import typer

from core.figures import check_figure_path, png_option
from core.options import token_text
from workbench.commands.common import DEVICE_OPTION, DTYPE_OPTION, JSON_OPTION, emit, finish, result_console


def register(app: typer.Typer) -> None:
    app.command("ablate")(ablate)
    app.command("patch")(patch)


def ablate(
    model: str = typer.Argument(
        ..., help="A toy model from the zoo (task metrics) or an LLM (with --prompt)."
    ),
    component: list[str] = typer.Option(
        None,
        "--component",
        "-c",
        help="head:L.H, attn:L, mlp:L, expert:L.E, neuron:L.N (repeatable); default: every head.",
    ),
    method: str = typer.Option("mean", "--method", help="zero, mean or resample."),
    prompt: str = typer.Option(None, "--prompt", help="LLMs: the prompt (scored: logit diff target - foil)."),
    target: str = typer.Option(None, "--target", help="LLMs: target token.", callback=token_text),
    foil: str = typer.Option(None, "--foil", help="LLMs: foil token.", callback=token_text),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Ablate components one at a time and report the task metrics (toy) or logit difference."""
    import workbench as wb
    from circuits.tools import ablation
    from core.errors import MethodError
    from core.models.zoo import check_text_model
    from workbench.commands.common import check_device

    for spec in component or []:  # the syntax of -c and the method need no model: refused before it loads
        ablation.parse(spec)
    if method not in ablation.METHODS:
        raise MethodError(f"unknown ablation method {method!r}: {', '.join(ablation.METHODS)}")
    on_task = check_text_model(model, "ablate").kind == "toy" and prompt is None  # the zoo entry: nothing loaded
    if not on_task:  # a prompt's logit difference: what it needs is known before the model loads
        if prompt is None or target is None:
            raise MethodError("give --prompt and --target (and --foil) to ablate on an LLM")
        if method != "zero":
            raise MethodError(
                f"{method} ablation on a single prompt needs a reference set: use --method zero"
            )
    m = wb.load(model, device=check_device(device), dtype=dtype)
    heads = [f"head:{la}.{h}" for la in range(m.arch.n_layers) for h in range(m.arch.n_heads)]
    comps = list(component or heads)
    if on_task:
        from circuits.toy.analysis import ablate_task
        from core.models.toy_tasks import get_task

        info = m.info["task"]
        t = get_task(info["task"], **info["params"])
        batch = t.batch("test", None if info["task"] in ("ioi", "modadd") else 1000, seed=0)
        ref = t.batch("train", None if info["task"] in ("ioi", "modadd") else 1000, seed=1).tokens
        res = ablate_task(m, batch, t, comps, method, reference=ref)
    else:
        res = ablation.ablate_prompts(m, prompt, target, foil, comps, method)

    def human(r):
        c = result_console()
        c.print(f"{r['method']} ablation on {model}; intact: {r['base']}")
        for comp, s in zip(r["components"], r["scores"], strict=False):
            c.print(f"  {comp:14s} " + ", ".join(f"{k} {v:.4f}" for k, v in s.items()))

    emit(res.to_json(), as_json, human)


def patch(
    model: str = typer.Argument(..., help="Model name or path."),
    clean: str = typer.Argument(..., help="Clean prompt."),
    corrupted: str = typer.Argument(None, help="Corrupted prompt (same number of tokens); or --swap-names."),
    target: str = typer.Option(..., "--target", help="Target token (the clean answer).", callback=token_text),
    foil: str = typer.Option(None, "--foil", help="Foil token (e.g. the corrupted answer).", callback=token_text),
    site: str = typer.Option(
        "resid", "--site", "--kind",
        help="resid, attn or mlp (layer x position), heads (layer x head) or mlps (layer).",
    ),
    swap: bool = typer.Option(False, "--swap-names", help="Corrupted prompt = clean with target and foil "
                              "names exchanged (IOI style)."),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    png: str = png_option(),
    as_json: bool = JSON_OPTION,
) -> None:
    """Activation patching from a corrupted prompt into the clean run (effect 1 = the patch alone flips
    the logit difference to the corrupted run's)."""
    import workbench as wb
    from circuits.tools import patching
    from core.errors import MethodError
    from workbench.commands.common import check_device

    if site not in patching.SITES:
        raise MethodError(f"unknown site {site!r}: {', '.join(patching.SITES)}")
    check_figure_path(png)  # a bad --png fails before any work
    if swap == (corrupted is not None):
        raise MethodError("give a corrupted prompt or --swap-names (one of the two)")
    if swap:
        if foil is None:
            raise MethodError("--swap-names needs --foil (the name exchanged with the target)")
        corrupted = patching.swap_names(clean, target, foil)
    if corrupted == clean:  # nothing to patch, and no model is needed to see it
        raise MethodError("the corrupted prompt is the same text as the clean one: patching it changes nothing "
                          "(give a prompt that differs, or --swap-names)")
    from core.models.zoo import check_text_model

    check_text_model(model, "patch")
    m = wb.load(model, device=check_device(device), dtype=dtype)
    res = wb.patch(m, clean, corrupted, target, foil, site=site)

    def human(r):
        print(f"logit diff: clean {r['clean']:.3f}, corrupted {r['corrupted']:.3f}")
        print("effect of patching each site (1 = it alone gives the corrupted run's):")
        print("\n".join(effect_table(r)))

    finish({**res.to_json(), "corrupted_prompt": corrupted}, as_json, human, res, png=png, say=print)


def effect_table(r: dict, width: int | None = None) -> list[str]:
    """A patching result as text lines with a header: the first axis (layers) as rows, the second (positions
    labelled by their tokens, or heads) as columns, in blocks of columns that fit ``width`` (the terminal's);
    labels are cut to the cell, numbers never."""
    import shutil

    width = width or shutil.get_terminal_size((80, 24)).columns
    axes, labels, effect = r["axes"], r.get("labels") or {}, r["effect"]
    if not isinstance(effect[0], list):  # one axis (mlps: a layer each): one row
        effect, rows, cols, corner = [effect], ["effect"], labels.get(axes[0]), axes[0]
    else:
        rows, cols, corner = labels.get(axes[0]), labels.get(axes[1]), f"{axes[0]}\\{axes[1]}"
    rows = rows or [str(i) for i in range(len(effect))]
    cols = [" ".join(c.split()) or "␣" for c in (cols or [str(j) for j in range(len(effect[0]))])]
    cell = max(7, *(len(f"{v:.2f}") for row in effect for v in row))
    first = max(len(corner), *(len(x) for x in rows))
    per_block = max(1, (width - first) // (cell + 1))
    lines: list[str] = []
    for start in range(0, len(cols), per_block):
        block = range(start, min(len(cols), start + per_block))
        if start:
            lines.append("")
        lines.append(f"{corner:<{first}}" + "".join(
            f" {cols[j] if len(cols[j]) <= cell else cols[j][:cell - 1] + '…':>{cell}}" for j in block))
        lines += [f"{name:<{first}}" + "".join(f" {effect[i][j]:>{cell}.2f}" for j in block)
                  for i, name in enumerate(rows)]
    return lines
