"""``workbench flow``: information flow by token on one prompt (circuits.flow, the LLM Transparency Tool's graph)."""

from __future__ import annotations

from typing import Any

import typer

from core.figures import png_option
from core.options import any_int, fraction, positive_int
from workbench.commands.common import (
    DEVICE_OPTION,
    DTYPE_OPTION,
    JSON_OPTION,
    MODEL_ARGUMENT,
    PROMPT_ARGUMENT,
    SAVE_OPTION,
    check_prompt,
    finish,
    result_console,
)


def register(app: typer.Typer) -> None:
    app.command("flow", help="Information flow routes by token: which positions the prediction's information came "
                "from, through attention (between positions) and the residual and MLPs (within one), pruned "
                "by a share threshold.")(flow)


def flow(
    model: str = MODEL_ARGUMENT,
    prompt: str = PROMPT_ARGUMENT,
    threshold: float = typer.Option(0.04, "--threshold", help="Keep edges whose share of the sum they enter is "
                                    "above this (0..1).", callback=fraction),
    position: int = typer.Option(None, "--position", help="The prediction the routes lead to (default the last "
                                 "position; negative counts from the end).", callback=any_int),
    top: int = typer.Option(12, "--top", help="Attention edges listed, strongest first.", callback=positive_int),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    save: bool = SAVE_OPTION,
    png: str = png_option(),
    as_json: bool = JSON_OPTION,
) -> None:
    """The routes to one position's prediction, laid out by token and layer."""
    from workbench.commands.common import check_device

    check_prompt(prompt, png)  # a bad --png or an empty prompt fails before any work
    from core.models.zoo import check_text_model

    check_text_model(model, "information flow")  # the zoo entry says so before anything loads
    import workbench as wb
    from circuits.flow import flow as run_flow

    m = wb.load(model, device=check_device(device), dtype=dtype)
    res = run_flow(m, prompt).at(threshold, position)
    out = res.to_json()
    heads = {(e["source"], e["target"]): e for e in out["edges"] if e["role"] == "attn"}
    strongest = sorted(heads.values(), key=lambda e: -e["score"])[:top]
    out["attention"] = [_attention_row(res, e) for e in strongest]

    def human(r: dict[str, Any]) -> None:
        c = result_console()
        c.print(f"information flow · {r['model']} · {len(r['tokens'])} tokens · into position {r['position']} "
                f"({r['tokens'][r['position']]!r}) · predicts {r['prediction']!r} · threshold {r['threshold']:g} · "
                f"{r['n_nodes']} nodes, {r['n_edges']} edges · {r['seconds']:.2f} s", soft_wrap=True)
        print("strongest attention edges (layer: from -> to, share; top heads):")
        for a in r["attention"]:
            heads_ = ", ".join(f"{h['head']} {h['share']:.2f}" for h in a["heads"])
            print(f"  L{a['layer']}: {a['from']} {a['from_token']!r} -> {a['to']} {a['to_token']!r}, "
                  f"{a['share']:.3f}; {heads_}")

    finish(out, as_json, human, res, save=save, png=png)


def _attention_row(res: Any, e: dict[str, Any]) -> dict[str, Any]:
    from circuits.flow import parse_node

    _, _, k = parse_node(e["source"])
    _, layer, q = parse_node(e["target"])
    heads = [h for h in res.heads_into(layer, q, k) if h["share"] > 0.005][:3]
    return {"layer": layer, "from": k, "to": q, "from_token": res.tokens[k], "to_token": res.tokens[q],
            "share": e["score"], "heads": [{"head": h["head"], "share": h["share"]} for h in heads]}
