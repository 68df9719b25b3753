"""``workbench feature-graph``: features -> features -> logits by feature-level DPA (attribution/features)."""

from __future__ import annotations

from typing import Any

import typer

from core.figures import check_figure_path, png_option
from core.options import positive_int, token_text
from workbench.commands.common import (
    DEVICE_OPTION,
    DTYPE_OPTION,
    JSON_OPTION,
    MODEL_OPTION,
    console,
    finish,
    result_console,
)


def register(app: typer.Typer) -> None:
    app.command("feature-graph")(feature_graph)


def _human(r: dict[str, Any]) -> None:
    c = result_console()
    c.print(f"feature graph of {r['prompt']!r} -> {r['target']!r}"
            + (f" minus {r['foil']!r}" if r.get("foil") else "")
            + f" on {r['model']}: {len(r['nodes'])} nodes, {len(r['edges'])} edges, "
            f"{r['n_passes']} {'backward' if (r.get('params') or {}).get('method') == 'gradient' else 'DPA'} "
            f"passes, {r['seconds']:.2f} s")
    sc = r.get("scores") or {}
    if sc:  # circuit-tracer's two scores (circuits.feature_graph.graph_scores)
        fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
        print(f"replacement score {fmt(sc.get('replacement'))}, completeness score {fmt(sc.get('completeness'))} "
              f"(on the {sc.get('computed_on', 'pruned')} graph)")
    for n in sorted(r["nodes"], key=lambda n: -n["influence"])[:25]:
        score = "" if n["score"] is None else f" score {n['score']:+.3f}"
        print(f"  {n['id']:<22} {n['kind']:<8} {str(n['token']):<12} influence {n['influence']:.3f}{score}")
    for e in sorted(r["edges"], key=lambda e: -abs(e["score"]))[:20]:
        print(f"  {e['src']:>22} -> {e['dst']:<22} {e['score']:+.4f}")


def feature_graph(
    model: str = MODEL_OPTION,
    prompt: str = typer.Option(..., "--prompt", help="The prompt whose next token is explained."),
    target: str = typer.Option(None, "--target", help="Target token (default: the model's top prediction).",
                               callback=token_text),
    foil: str = typer.Option(None, "--foil", help="Foil token: explain target minus foil.", callback=token_text),
    saes: str = typer.Option(..., "--saes", help="Dictionary directories (or names under data/saes), comma-"
                             "separated: residual SAEs and/or transcoders of this model; set:NAME for every "
                             "layer of a transcoder set (workbench sae build-set); clt:NAME for a cross-layer "
                             "transcoder (workbench sae build-clt; gradient method only)."),
    method: str = typer.Option("auto", "--method", help="dpa (DPA passes), gradient (backward passes through "
                               "the replacement model of transcoders, as circuit-tracer), or auto: gradient when "
                               "every dictionary is a transcoder and no --param is given, else dpa."),
    node_threshold: float = typer.Option(None, "--node-threshold", help="Prune by cumulative node influence "
                                         "(circuit-tracer: 0.8), in (0, 1]."),
    edge_threshold: float = typer.Option(None, "--edge-threshold", help="Prune by cumulative edge influence "
                                         "(circuit-tracer: 0.98), in (0, 1]."),
    nodes: int = typer.Option(40, "--nodes", help="Keep at most this many nodes (by influence on the logits).",
                              callback=positive_int),
    edges: int = typer.Option(120, "--edges", help="Keep at most this many edges among them.",
                              callback=positive_int),
    per_layer: int = typer.Option(16, "--per-layer", help="Features per dictionary that get their own DPA pass.",
                                  callback=positive_int),
    keep_first: bool = typer.Option(False, "--keep-first/--skip-first", help="Score features at position 0 "
                                    "(the attention sink; off by default: it is all error there)."),
    param: list[str] = typer.Option(None, "--param", help="DPA parameter key=value: w_q, w_k, w_v, w_gate, w_up."),
    save: bool = typer.Option(True, "--save/--no-save", help="Save the graph to the run store."),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    png: str = png_option(),
    as_json: bool = JSON_OPTION,
) -> None:
    """Feature graph: dictionary features at each depth -> higher features -> logits, with error nodes,
    pruned to the strongest paths (prints model, prompt, nodes, edges, seconds, run)."""
    from workbench.commands.attribute import parse_params
    from workbench.commands.common import check_device

    params = parse_params(param)
    check_figure_path(png)  # a bad --png fails before any work
    from attribution.dpa.params import DPAParams

    DPAParams.from_kwargs(**params)  # bad parameters fail before anything loads
    from circuits.feature_graph import METHODS, check_thresholds
    from core.errors import RangeError

    check_thresholds(node_threshold, edge_threshold, names=("--node-threshold", "--edge-threshold"))
    if method not in (*METHODS, "auto"):
        raise RangeError(f"--method {method!r}: auto, {', '.join(METHODS)}")
    from attribution.features.placement import load_dictionaries
    from core.options import split_list

    specs = split_list("--saes", saes)
    if any(s.startswith("pretrained:") for s in specs):
        from attribution.sae.pretrained import parse_ref, sae_ids

        for s in specs:  # a malformed or unknown reference fails before the model loads
            if s.startswith("pretrained:"):
                sae_ids(*parse_ref(s))
    else:
        dicts = load_dictionaries(",".join(specs))
    import workbench as wb
    from circuits.feature_graph import choose_method
    from circuits.feature_graph import feature_graph as build
    from core.models.zoo import check_text_model

    check_text_model(model, "feature-graph")
    m = wb.load(model, device=check_device(device), dtype=dtype)
    if any(s.startswith("pretrained:") for s in specs):  # converting one the first time folds in model weights
        dicts = load_dictionaries(",".join(specs), model=m)
    method = choose_method(method, dicts, params)
    graph = build(m, prompt, dicts, target=target, foil=foil, per_layer=per_layer, max_nodes=nodes,
                  max_edges=edges, keep_first=keep_first, method=method, node_threshold=node_threshold,
                  edge_threshold=edge_threshold, **params)
    finish(graph.to_json(), as_json, _human, graph, save=save, png=png, say=console().print)
