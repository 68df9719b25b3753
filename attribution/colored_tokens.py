"""Token scores as coloured text (CircuitsVis' ``colored_tokens``): an HTML view and a plotly figure.

Signed scores use the circuit figures' diverging scale: blue raises the target (minus the foil), red lowers it,
white is 0; the intensity is |score| over the largest |score| (over positions 1.. when ``skip_first``, since
position 0 is an attention sink whose score dwarfs the rest: it then saturates). The HTML escapes every token
and needs no script, so it shows offline, in a notebook, a saved file and the app alike.
"""

from __future__ import annotations

import html
import math
from typing import Any

BLUE = (33, 102, 172)  # #2166ac, as the bars of AttributionResult.plot
RED = (178, 24, 43)  # #b2182b


def scale(scores: list[float], skip_first: bool = False) -> float:
    """The largest |score| (over positions 1.. when skip_first and there are two or more); 1.0 when zero."""
    body = scores[1:] if skip_first and len(scores) > 1 else scores
    top = max((abs(s) for s in body), default=0.0)
    return top if top > 0 and math.isfinite(top) else 1.0


def color(score: float, top: float) -> str:
    """rgb() of one score: white at 0, BLUE (positive) or RED (negative) at |score| >= top."""
    t = min(abs(score) / top, 1.0) if top > 0 else 0.0
    end = BLUE if score >= 0 else RED
    r, g, b = (round(255 + (c - 255) * t) for c in end)
    return f"rgb({r},{g},{b})"


def _shown(token: str) -> str:
    # whitespace a reader can see: a leading space as a faint dot, newlines and tabs by name
    return token.replace("\n", "\\n").replace("\t", "\\t").replace(" ", "\u00b7") or "\u2205"


def html_view(tokens: list[str], scores: list[float], title: str = "", skip_first: bool = False) -> str:
    """A self-contained HTML fragment: each token on its score's colour, the score in its tooltip."""
    if len(tokens) != len(scores):
        raise ValueError(f"{len(tokens)} tokens but {len(scores)} scores")
    top = scale(scores, skip_first)
    spans = []
    for i, (tok, s) in enumerate(zip(tokens, scores, strict=True)):
        dark = abs(s) / top > 0.6
        spans.append(
            f'<span title="{html.escape(f"{i}: {tok!r} {s:+.4g}", quote=True)}" style="background:{color(s, top)};'
            f'color:{"#fff" if dark else "#111"};padding:1px 2px;margin:0 1px;border-radius:3px;'
            f'font-family:monospace;white-space:pre">{html.escape(_shown(tok))}</span>')
    head = f'<div style="font-size:90%;margin-bottom:4px">{html.escape(title)}</div>' if title else ""
    legend = (f'<div style="font-size:80%;color:#555;margin-top:4px">blue raises, red lowers; full colour at '
              f'|score| {top:.3g}{" (first token left out of the scale)" if skip_first else ""}</div>')
    return f'<div class="wb-colored-tokens" style="line-height:2">{head}{"".join(spans)}{legend}</div>'


def figure(tokens: list[str], scores: list[float], title: str = "", skip_first: bool = False,
           per_line: int = 12):
    """A plotly figure of the tokens as coloured boxes in reading order, ``per_line`` to a row; hover gives
    each token's position and score."""
    import plotly.graph_objects as go

    if len(tokens) != len(scores):
        raise ValueError(f"{len(tokens)} tokens but {len(scores)} scores")
    top = scale(scores, skip_first)
    rows = max(1, -(-len(tokens) // per_line))
    z = [[None] * per_line for _ in range(rows)]
    text = [[""] * per_line for _ in range(rows)]
    hover = [[""] * per_line for _ in range(rows)]
    for i, (tok, s) in enumerate(zip(tokens, scores, strict=True)):
        r, c = divmod(i, per_line)
        z[r][c] = max(-1.0, min(1.0, s / top))
        text[r][c] = _shown(tok)[:14]
        hover[r][c] = f"{i}: {tok!r}<br>score {s:+.4g}"
    fig = go.Figure(go.Heatmap(
        z=z, text=text, texttemplate="%{text}", customdata=hover, hovertemplate="%{customdata}<extra></extra>",
        colorscale="RdBu", zmid=0, zmin=-1, zmax=1, xgap=3, ygap=3,
        colorbar={"title": {"text": f"score / {top:.3g}", "side": "right"}}))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False, autorange="reversed")
    fig.update_layout(title=title, height=120 + 46 * rows, width=max(520, 80 * per_line + 120),
                      margin={"l": 10, "r": 10, "t": 50 if title else 10, "b": 10}, plot_bgcolor="white")
    return fig


class ColoredTokens:
    """The coloured text of one token attribution: shows itself as HTML in a notebook (``_repr_html_``);
    ``.html`` is the fragment, ``.figure()`` the plotly version."""

    def __init__(self, tokens: list[str], scores: list[float], title: str = "", skip_first: bool = False) -> None:
        self.tokens, self.scores, self.title, self.skip_first = list(tokens), [float(s) for s in scores], title, \
            skip_first
        self.html = html_view(self.tokens, self.scores, title, skip_first)

    def _repr_html_(self) -> str:
        return self.html

    def figure(self, per_line: int = 12) -> Any:
        return figure(self.tokens, self.scores, self.title, self.skip_first, per_line)

    def __repr__(self) -> str:
        return " ".join(f"{t!r}:{s:+.3g}" for t, s in zip(self.tokens, self.scores, strict=True))
