"""The information-flow figure (circuits.flow): token positions across, layers up, as the LLM Transparency Tool
draws it. Attention edges run between positions (blue), residual edges up one position (grey), the MLP sits beside
its position (orange); an edge's width is its share of the sum it enters (0..1, the same scale in every figure),
a node's size its share of the prediction. Each node's id is its customdata, so a click reads back (Streamlit's
on_select); each attention edge has a hover point at its middle naming its heads."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

ROLE_COLOUR = {"attn": "#2166ac", "resid": "#9e9e9e", "mlp": "#e08214"}
ROLE_NAME = {"attn": "attention (between positions)", "resid": "residual (same position)", "mlp": "MLP"}
KIND_COLOUR = {"token": "#4d4d4d", "resid": "#92c5de", "mlp": "#fdb863"}
MLP_DX = 0.28  # an MLP node sits this far right of its position's column
SELF_BOW = 0.22  # attention from a position to itself bows left of the residual edge it would hide
ROW_PX = 15  # px per half layer
COL_PX = 92  # px per token column


def _xy(flow: Any, node: Any) -> tuple[float, float]:
    return float(node.position) + (MLP_DX if node.kind == "mlp" else 0.0), float(node.layer)


def _curve(x0: float, y0: float, x1: float, y1: float, bow: float, steps: int = 8) -> tuple[list, list]:
    cx, cy = (x0 + x1) / 2 + bow, (y0 + y1) / 2
    ts = [i / steps for i in range(steps + 1)]
    return ([(1 - t) ** 2 * x0 + 2 * (1 - t) * t * cx + t**2 * x1 for t in ts] + [None],
            [(1 - t) ** 2 * y0 + 2 * (1 - t) * t * cy + t**2 * y1 for t in ts] + [None])


def _token_tick(tok: str, pos: int) -> str:
    text = repr(tok)[1:-1].replace(" ", "␣") or "∅"
    return f"{text[:12]}{'…' if len(text) > 12 else ''}<br>{pos}"


def flow_figure(flow: Any, graph: Any, selected: str | None = None, title: str | None = None) -> go.Figure:
    """The pruned graph ``graph`` (a circuits.subgraph.Subgraph) of ``flow`` (a circuits.flow.Flow) laid out by
    (position, layer); both modules import this one, so it names neither."""
    pos = {n.id: _xy(flow, n) for n in graph.nodes}
    fig = go.Figure()
    groups: dict[tuple[str, int], tuple[list, list]] = {}
    mids: list[tuple[float, float, str, str]] = []
    for e in graph.edges:
        (x0, y0), (x1, y1) = pos[e.source], pos[e.target]
        role = e.role or "resid"
        bow = -SELF_BOW if role == "attn" and abs(x0 - x1) < 1e-9 else 0.0
        xs, ys = _curve(x0, y0, x1, y1, bow)
        bucket = groups.setdefault((role, min(9, int(e.score * 10))), ([], []))
        bucket[0].extend(xs)
        bucket[1].extend(ys)
        if role == "attn":
            layer, q, k = graph.node(e.target).metadata["block"], int(x1), int(x0)
            heads = [h for h in flow.heads_into(layer, q, k) if h["share"] > 0.005][:4] if flow.heads_into else []
            mids.append((xs[len(xs) // 2 - 1], ys[len(ys) // 2 - 1],
                         f"layer {layer} attention: {k} {flow.tokens[k]!r} → {q} {flow.tokens[q]!r}: {e.score:.3f}"
                         + "".join(f"<br>{h['head']} {h['share']:.3f}" for h in heads) + "<br>click: every head",
                         f"{e.source}->{e.target}"))
    for (role, b), (xs, ys) in sorted(groups.items()):
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                                 line={"color": ROLE_COLOUR[role], "width": 0.8 + 0.9 * (b + 0.5)},
                                 opacity=0.55 if role == "resid" else 0.8))
    if mids:
        fig.add_trace(go.Scatter(x=[m[0] for m in mids], y=[m[1] for m in mids], mode="markers", showlegend=False,
                                 marker={"size": 6, "color": ROLE_COLOUR["attn"], "opacity": 0.35},
                                 hovertext=[m[2] for m in mids], hoverinfo="text", name="attention edges",
                                 customdata=[m[3] for m in mids]))
    for role in ("attn", "resid", "mlp"):
        if any((e.role or "resid") == role for e in graph.edges):
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=ROLE_NAME[role], hoverinfo="skip",
                                     line={"color": ROLE_COLOUR[role], "width": 4}))
    nodes = graph.nodes
    hover = []
    for n in nodes:
        what = {"E": "embedding", "A": "after attention", "M": "after the MLP", "F": "MLP"}[n.metadata["state"]]
        hover.append(f"{n.id}: {what} · position {n.position} {n.metadata['token']!r}"
                     f"<br>share of the prediction {n.metadata['importance']:.3f}"
                     "<br>click for the logit lens and heads")
    fig.add_trace(go.Scatter(
        x=[pos[n.id][0] for n in nodes], y=[pos[n.id][1] for n in nodes], mode="markers", name="nodes",
        customdata=[n.id for n in nodes], hovertext=hover, hoverinfo="text", showlegend=False,
        marker={"size": [7 + 14 * min(1.0, n.metadata["importance"]) ** 0.5 for n in nodes],
                "symbol": ["square" if n.kind == "mlp" else "circle" for n in nodes],
                "color": [KIND_COLOUR.get(n.kind, "#92c5de") for n in nodes],
                "line": {"width": [3 if n.id == selected else 1 for n in nodes],
                         "color": ["#d7301f" if n.id == selected else "#333" for n in nodes]}}))
    top = max((n for n in nodes if n.metadata["state"] == "M"), key=lambda n: n.layer, default=None)
    if top is not None:  # the prediction the routes lead to, above its node
        fig.add_annotation(x=top.position, y=top.layer, yshift=16, showarrow=False,
                           text=f"→ {flow.predictions[int(top.position)]!r}", font={"size": 12, "color": "#d7301f"})
    s, n_layers = flow.n_tokens, flow.n_layers
    p = graph.provenance.params
    fig.update_xaxes(range=[-0.6, s - 0.4], tickvals=list(range(s)),
                     ticktext=[_token_tick(t, i) for i, t in enumerate(flow.tokens)], showgrid=False, zeroline=False,
                     title="token position")
    step = 1 if n_layers <= 12 else 2
    ticks = [-1] + list(range(0, n_layers, step)) + ([n_layers - 1] if (n_layers - 1) % step else [])  # the top too
    fig.update_yaxes(range=[-1.6, n_layers - 0.2], tickvals=ticks,
                     ticktext=["embed" if t < 0 else f"L{t}" for t in ticks], showgrid=True, gridcolor="#f0f0f0",
                     zeroline=False, title="layer (after attention half a row below)")
    fig.update_layout(
        title=title or f"Information flow on {flow.model}: {len(graph.nodes)} nodes, {len(graph.edges)} edges "
                       f"(share > {p['threshold']:g}) into position {p['position']}",
        width=max(720, COL_PX * s + 200), height=max(480, ROW_PX * 2 * (n_layers + 1) + 170),
        plot_bgcolor="white", margin={"l": 60, "r": 30, "t": 70, "b": 80},
        legend={"orientation": "h", "y": -0.08 - 40 / max(480, ROW_PX * 2 * (n_layers + 1) + 170)},
        hovermode="closest", dragmode="pan")
    return fig


def stored_flow_figure(graph: Any, title: str | None = None, selected: str | None = None) -> go.Figure:
    """A saved flow graph (a ``subgraph`` run whose source is ``flow``) drawn from the graph alone: its tokens and
    prediction from its metadata; no per-head hover (the shares stay in the run's tensors)."""
    from types import SimpleNamespace

    tokens = list(graph.metadata.get("flow_tokens") or [])
    layers = [int(n.metadata.get("block", -1)) for n in graph.nodes if n.kind in ("resid", "mlp")]
    position = int(graph.provenance.params.get("position", len(tokens) - 1))
    predictions = {position: str(graph.metadata.get("prediction", "?"))}
    view = SimpleNamespace(model=graph.model, tokens=tokens, n_tokens=len(tokens), n_layers=max(layers, default=0) + 1,
                           heads_into=None, predictions=predictions)
    return flow_figure(view, graph, selected=selected, title=title)
