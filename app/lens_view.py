"""The Lens page's pieces: the layers x positions map, which cell a click picked, whether a tuned lens exists."""

from __future__ import annotations

from typing import Any

from app import views as V
from core.errors import WorkbenchError


def tuned_available(model: Any) -> str | None:
    """None when the model has a shipped tuned lens, else why not (one line)."""
    from attribution.lens.tuned import TunedLens

    try:
        TunedLens.for_model(model)
        return None
    except WorkbenchError as exc:
        return str(exc)


def selected_cell(event: Any, res: Any) -> tuple[int, int] | None:
    """(layer row, position) of the heat-map cell the user clicked, if any."""
    try:
        points = event.selection.points if event is not None else []
    except AttributeError:
        return None
    if not points:
        return None
    x, y = points[0].get("x"), points[0].get("y")
    labels = V.token_labels(res.tokens)
    if x in labels and y in res.layers:
        return res.layers.index(y), labels.index(x)
    return None


def shown_token(tok: str, width: int = 8) -> str:
    """A token as a cell's text: never blank (spaces as ␣, newlines as ↵, the empty string as ∅), at most
    ``width`` characters (a cut one ends in …)."""
    text = repr(tok)[1:-1].replace(" ", "␣") or "∅"
    return text if len(text) <= width else text[: width - 1] + "…"


def grid(res: Any, skip_first: bool):
    """The layers x positions map: colour = the top token's probability, text = the top token."""
    import plotly.graph_objects as go

    xs = V.token_labels(res.tokens)
    probs = res.topk_probs[..., 0].numpy()
    hover = [[f"{res.layers[l]} · {xs[p]}<br>" + "<br>".join(
        f"{t!r} {q:.3f}" for t, q in zip(res.topk_tokens[l][p], res.topk_probs[l, p].tolist(), strict=True))
        for p in range(len(xs))] for l in range(len(res.layers))]
    text = [[shown_token(t) for t in row] for row in res.top_tokens]
    fig = go.Figure(go.Heatmap(z=probs.tolist(), x=xs, y=res.layers, text=text, texttemplate="%{text}",
                               textfont={"size": 10}, colorscale="Blues",
                               zmin=0, zmax=V.scale_limit(probs, skip_first), colorbar={"title": "p(top)"}))
    V.clickable_cells(fig, xs, res.layers, hover)
    fig.update_xaxes(title="position (the prediction made there)", **V.all_ticks(xs))
    fig.update_yaxes(title="layer (embed, then after each block)", **V.all_ticks(res.layers))
    fig.update_layout(height=max(320, 20 * len(res.layers) + 140), margin={"t": 30},
                      title=f"{res.kind} lens: top token and its probability")
    return fig
