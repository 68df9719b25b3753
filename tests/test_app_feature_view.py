"""app.feature_view's readability (issue 50, finding 5): a feature's whole explanation on hover, wrapped; a
dashboard's contexts wrap inside its column instead of being cut."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

LONG = ("the token 'the' when it opens a noun phrase about a place or a building, mostly in travel writing and "
        "in encyclopedia articles about cities")


def _graph():
    from circuits.subgraph import feature_subgraph

    nodes = [{"id": "emb@p0", "kind": "token", "row": -1, "position": 0, "label": "", "token": "The",
              "influence": 0.2},
             {"id": "sae.3@p1", "kind": "feature", "row": 1, "position": 1, "label": "3", "dictionary": "sae",
              "feature": 3, "activation": 2.0, "influence": 0.5, "clerp": LONG},
             {"id": "logits", "kind": "logits", "row": 3, "position": None, "label": "logits", "influence": 1.0}]
    edges = [{"src": "emb@p0", "dst": "sae.3@p1", "score": 0.4}, {"src": "sae.3@p1", "dst": "logits", "score": 0.6}]
    return feature_subgraph("m", "The city", ["The", " city"], " is", None, 1.0,
                            [{"name": "sae", "path": "", "tag": "sae", "kind": "sae", "hooks": []}], nodes, edges,
                            0.1, 1)


def test_a_features_whole_explanation_is_on_its_hover_wrapped():
    from app.feature_view import figure

    fig = figure(_graph(), {"sae": []})
    nodes = fig.data[-1]
    hover = nodes.hovertext[list(nodes.customdata).index("sae.3@p1")]
    assert " ".join(hover.replace("<br>", " ").split()).count("travel writing and in encyclopedia") == 1
    assert all(len(line) <= 72 for line in hover.split("<br>"))  # wrapped: plotly never wraps a hover label
    label = nodes.text[list(nodes.customdata).index("sae.3@p1")]
    assert len(label) < len(LONG)  # the node itself shows the start, cut to its column


def test_contexts_wrap_inside_the_dashboard_column():
    from app.feature_view import wrapped_contexts
    from attribution.sae.render import contexts_html

    ctx = {"tokens": ["a"] * 60, "acts": [0.0] * 59 + [1.0], "center": 59, "activation": 1.0}
    raw = contexts_html([ctx], 1.0)
    assert "white-space:pre;" in raw  # one line, scrolled sideways, as the SAE page draws it
    out = wrapped_contexts(raw)
    assert "white-space:pre-wrap" in out and "overflow-x:auto" not in out and out.count("<span") == 60
