"""Figures fit for a paper: the notebook's circuit and feature-graph figures keep their node labels apart at
their default size, name target and foil and what they aggregate, and every figure saves as PNG, SVG, PDF,
HTML (plotly.js beside it, not inlined) and JSON.

Label boxes are estimated in pixel space from the figure's own width, height, margins and axis ranges: a
label is as wide as its characters (0.6 em each, 0.75 a capital, up to 1 em the widest glyphs: upper bounds for
Arial, checked against Chromium's own boxes) and ``1.25 em`` a line tall, placed where its ``textposition`` puts
it next to its marker.
"""

from __future__ import annotations

import html
import shutil

import pytest
import torch

PROMPT = "When Mary and John went to the store, John gave a drink to"
TOKENS = ["When", " Mary", " and", " John", " went", " to", " the", " store", ",", " John", " gave", " a",
          " drink", " to"]


def width_em(text: str) -> float:
    """An upper estimate of a line's width in em in Arial (measured in Chromium: digits and lower case 0.5-0.56,
    capitals up to 0.72, 'm' 0.83, 'W' 0.94, the ellipsis 1.0)."""
    wide = {"…": 1.0, "M": 0.85, "W": 0.95, "m": 0.85, "w": 0.75, "@": 1.0, "%": 0.9}
    return sum(wide.get(c, 0.75 if c.isupper() else 0.6) for c in text)


def label_boxes(fig) -> list[tuple[str, float, float, float, float]]:
    """(label, x0, y0, x1, y1) in px of every non-empty label of the figure's node trace (its last trace)."""
    lay = fig.layout
    m = lay.margin
    width, height = float(lay.width), float(lay.height)
    pw, ph = width - m.l - m.r, height - m.t - m.b
    (xa, xb), (ya, yb) = lay.xaxis.range, lay.yaxis.range
    nodes = fig.data[-1]
    font = float(nodes.textfont.size)
    sizes = nodes.marker.size if isinstance(nodes.marker.size, list | tuple) else [nodes.marker.size] * len(nodes.x)
    where = nodes.textposition
    boxes = []
    for i, text in enumerate(nodes.text):
        if not text:
            continue
        lines = [html.unescape(line) for line in text.split("<br>")]
        w, h = max(width_em(line) for line in lines) * font, len(lines) * 1.25 * font
        cx = m.l + (nodes.x[i] - xa) / (xb - xa) * pw
        cy = m.t + (yb - nodes.y[i]) / (yb - ya) * ph
        r = float(sizes[i]) / 2
        pos = where[i] if isinstance(where, list | tuple) else where
        if pos == "top center":
            boxes.append((text, cx - w / 2, cy - r - h, cx + w / 2, cy - r))
        elif pos == "bottom center":
            boxes.append((text, cx - w / 2, cy + r, cx + w / 2, cy + r + h))
        elif pos == "middle right":
            boxes.append((text, cx + r, cy - h / 2, cx + r + w, cy + h / 2))
        else:
            raise AssertionError(f"unexpected textposition {pos!r}")
    return boxes


def overlapping(boxes) -> list[tuple[str, str]]:
    return [(a[0], b[0]) for i, a in enumerate(boxes) for b in boxes[i + 1:]
            if a[1] < b[3] and b[1] < a[3] and a[2] < b[4] and b[2] < a[4]]


def assert_readable(fig) -> None:
    boxes = label_boxes(fig)
    assert len(boxes) >= 10
    assert not overlapping(boxes), overlapping(boxes)[:5]
    width = float(fig.layout.width)
    assert all(0 <= b[1] and b[3] <= width for b in boxes), "a label runs off the figure"


def busy_circuit(layers: int = 30, heads: int = 9):
    """A CircuitResult over smollm2-135m's graph shape (30 layers, 9 heads, MLPs) with random scores: its top
    200 edges fill many rows with all nine heads and the MLP."""
    from circuits.discover import CircuitResult
    from circuits.graph import CircuitGraph

    graph = CircuitGraph(layers, heads, True)
    scores = torch.randn(graph.n_edges, generator=torch.Generator().manual_seed(0))
    return CircuitResult(model="smollm2-135m", method="dpa", graph=graph, scores=scores,
                         rows=[{"prompt": PROMPT, "target": " Mary", "foil": " John"}], ablation="mean",
                         metric="logit_diff", edges=200)


def test_estimated_label_boxes_see_an_overlap():
    import plotly.graph_objects as go

    fig = go.Figure(go.Scatter(x=[0.5, 0.52], y=[0, 0], text=["L28.H1", "L27.H2"], textposition="top center",
                               textfont={"size": 11}, marker={"size": 11}))
    fig.update_layout(width=900, height=400, margin={"l": 50, "r": 50, "t": 50, "b": 50},
                      xaxis={"range": [0, 1]}, yaxis={"range": [-1, 1]})
    assert overlapping(label_boxes(fig)) == [("L28.H1", "L27.H2")]


def test_a_row_of_forty_heads_staggers_its_labels():
    fig = busy_circuit(layers=3, heads=40).plot(k=400)
    assert "bottom center" in fig.data[-1].textposition  # every other label below its node
    assert_readable(fig)


def test_circuit_figure_keeps_labels_apart_and_names_what_it_shows():
    res = busy_circuit()
    fig = res.plot()
    assert_readable(fig)
    nodes = fig.data[-1]
    assert {"embed", "logits"} <= set(nodes.customdata)
    title = fig.layout.title
    assert "' Mary'" in title.text and "' John'" in title.text
    assert "summed over positions" in title.subtitle.text and "averaged over 1 prompt" in title.subtitle.text
    # layers by evenly spaced rows: one tick per drawn row, no empty bands between layers
    ticks = list(fig.layout.yaxis.tickvals)
    assert ticks == list(range(len(ticks))) and fig.layout.yaxis.ticktext[0] == "input"
    assert fig.layout.yaxis.ticktext[-1] == "output"
    assert len({y for y in nodes.y}) == len(ticks)
    # heads stand in their head's column in every row
    xs = {name.split(".")[1]: x for name, x in zip(nodes.customdata, nodes.x, strict=True) if ".H" in name}
    for name, x in zip(nodes.customdata, nodes.x, strict=True):
        if ".H" in name:
            assert x == xs[name.split(".")[1]]
    legend = [t.name for t in fig.data if t.showlegend is not False and t.name]
    assert "supports the target" in legend and "opposes the target" in legend


def feature_graph(per_cell: int = 6):
    """A feature graph like the README prompt's on smollm2: four residual dictionaries, crowded cells (more
    nodes per (layer, position) than the figure draws), error nodes, embeddings and the logits."""
    from circuits.subgraph import feature_subgraph

    g = torch.Generator().manual_seed(1)
    nodes = [{"id": "logits", "kind": "logits", "row": 30, "position": None, "token": None, "dictionary": None,
              "feature": None, "activation": None, "score": None, "influence": 1.0, "label": "logits"}]
    for p, tok in enumerate(TOKENS):
        nodes.append({"id": f"emb@p{p}", "kind": "token", "row": -1, "position": p, "token": tok,
                      "dictionary": None, "feature": None, "activation": None, "score": 0.1,
                      "influence": float(torch.rand(1, generator=g)), "label": f"{tok!r}@{p}"})
    for layer in (6, 12, 18, 24):
        name = f"smollm2-135m-L{layer}-resid-topk2304"
        for p in (0, 1, 3, 9, 12, 13):
            nodes.append({"id": f"L{layer}.err@p{p}", "kind": "error", "row": layer, "position": p,
                          "token": TOKENS[p], "dictionary": name, "feature": None, "activation": None,
                          "score": 0.2, "influence": float(torch.rand(1, generator=g)), "label": ""})
            for k in range(per_cell):
                f = 1000 + 37 * k + p
                nodes.append({"id": f"L{layer}.f{f}@p{p}", "kind": "feature", "row": layer, "position": p,
                              "token": TOKENS[p], "dictionary": name, "feature": f, "activation": 1.5,
                              "score": 0.3, "influence": float(torch.rand(1, generator=g)), "label": ""})
    ids = [n["id"] for n in nodes]
    rows = {n["id"]: n["row"] for n in nodes}
    order = sorted(set(rows.values()))
    edges = [{"src": a, "dst": b, "score": float(torch.randn(1, generator=g))}  # every node feeds the next row
             for a in ids for b in ids if order.index(rows[b]) == order.index(rows[a]) + 1]
    dicts = [{"name": f"smollm2-135m-L{layer}-resid-topk2304", "path": f"/nowhere/L{layer}"}
             for layer in (6, 12, 18, 24)]
    return feature_subgraph(model="smollm2-135m", prompt=PROMPT, tokens=TOKENS, target=" Mary", foil=" John",
                            target_logit=2.0, dictionaries=dicts, nodes=nodes, edges=edges, seconds=0.1, n_passes=4)


def test_feature_graph_figure_keeps_labels_apart_and_names_what_it_shows():
    from circuits.plot import PER_CELL, feature_graph_plot

    graph = feature_graph()
    long = {d["name"]: [f"“Mary”/“She” and other names of people <{i}>" for i in range(3000)]
            for d in graph.dictionaries}  # explanations far longer than a column, with a tag to escape
    fig = feature_graph_plot(graph, labels=long)
    assert_readable(fig)
    nodes = fig.data[-1]
    drawn = set(nodes.customdata)
    assert "logits" in drawn and any(n.startswith("emb@") for n in drawn)
    assert not any("<1" in t for t in nodes.text)  # escaped: plotly would read "<1...>" as a tag
    cells: dict[tuple[int, int], int] = {}
    for name in drawn - {"logits"}:
        n = graph.node(name)
        cells[(n.layer, n.position)] = cells.get((n.layer, n.position), 0) + 1
    assert max(cells.values()) <= PER_CELL
    rows = list(fig.layout.yaxis.ticktext)
    assert rows[0] == "embeddings" and rows[-1] == "logits" and "L18" in rows
    assert list(fig.layout.xaxis.ticktext)[1] == "1:' Mary'"  # token positions by column
    title = fig.layout.title
    assert "' Mary'" in title.text and "' John'" in title.text
    assert f"of {len(graph.nodes)} nodes" in title.subtitle.text and "at most 3 per position" in title.subtitle.text
    # the notebook's own call (dictionaries without dashboards: labels are the feature ids)
    assert_readable(graph.plot())


def test_attribution_heatmaps_name_their_sums_and_centre_signed_scores():
    from attribution.result import AttributionResult

    tokens = TOKENS[:5]
    head = AttributionResult("m", "dpa", "head", ("layer", "head", "query"), torch.randn(3, 4, 5), tokens,
                             target=" Mary", foil=" John")
    hm = head.plot().data[0]
    assert "summed over query positions" in hm.colorbar.title.text and hm.zmid == 0
    neuron = AttributionResult("m", "dpa", "neuron", ("layer", "position", "neuron"), torch.randn(3, 5, 8), tokens,
                               target=" Mary", foil=" John")
    nm = neuron.plot().data[0]
    assert "summed over neurons" in nm.colorbar.title.text and nm.zmid == 0 and nm.colorscale[0][1] != "#440154"
    assert torch.allclose(torch.tensor(nm.z), neuron.scores.sum(-1))  # signed, not max |score|
    assert "' John'" in neuron.plot().layout.title.text


def test_save_figure_rejects_unknown_suffix_and_missing_folder(tmp_path):
    import plotly.graph_objects as go

    from core.figures import FigureError, save_figure

    fig = go.Figure(go.Scatter(x=[0, 1], y=[1, 0]))
    with pytest.raises(FigureError, match="must end in .png"):
        save_figure(fig, tmp_path / "figure.gif")
    with pytest.raises(FigureError, match="does not exist"):
        save_figure(fig, tmp_path / "missing" / "figure.png")
    folder = tmp_path / "figure.png"
    folder.mkdir()
    with pytest.raises(FigureError, match="is a directory"):
        save_figure(fig, folder)
    with pytest.raises(FigureError, match="system folder"):
        save_figure(fig, "/proc/figure.png")
    assert [p.name for p in tmp_path.iterdir()] == ["figure.png"]  # nothing written


@pytest.mark.slow  # kaleido starts a browser: about 3 s on a quiet machine, 10 s on a loaded one
@pytest.mark.browser
@pytest.mark.skipif(not any(shutil.which(b) for b in ("chromium", "google-chrome")), reason="no Chromium/Chrome")
def test_save_figures_writes_png_svg_pdf_html_and_json(tmp_path):
    """One browser draws the three static formats (about 3 s); HTML loads plotly.js from beside it."""
    import plotly.io as pio

    from core.figures import save_figures

    fig = busy_circuit().plot(k=40)
    paths = save_figures(fig, [tmp_path / f"circuit.{ext}" for ext in ("png", "svg", "pdf", "html", "json")])
    data = {p.suffix: p.read_bytes() for p in paths}
    assert data[".png"].startswith(b"\x89PNG\r\n\x1a\n")
    assert data[".svg"].lstrip().startswith(b"<svg") and b"</svg>" in data[".svg"]
    assert data[".pdf"].startswith(b"%PDF-")
    assert len(data[".html"]) < 100_000 and b'src="plotly.min.js"' in data[".html"]
    assert (tmp_path / "plotly.min.js").stat().st_size > 1_000_000  # written once beside the pages
    assert pio.from_json(data[".json"].decode()).layout.title.text == fig.layout.title.text
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [p.name for p in paths] + ["plotly.min.js"])  # no temporary file left behind


BAD_PNG = [
    ("attribute", "m", "hi", "--target", " x"),
    ("circuit", "discover", "--model", "m", "--prompts", "task"),
    ("feature-graph", "--model", "m", "--prompt", "hi", "--saes", "s"),
    ("lens", "m", "hi"),
    ("dla", "m", "hi", "--target", " x"),
    ("patch", "m", "a", "b", "--target", " x"),
]


@pytest.mark.parametrize("args", BAD_PNG, ids=[a[0] if a[0] != "circuit" else "circuit-discover" for a in BAD_PNG])
def test_bad_png_path_is_one_line_before_any_work(args, tmp_path, monkeypatch, capsys):
    from cli_helpers import assert_bad
    from cli_helpers import run_cli as run_main

    code, _, err = run_main(monkeypatch, capsys, *args, "--png", str(tmp_path / "missing" / "fig.png"))
    assert_bad(code, err, "does not exist")
    code, _, err = run_main(monkeypatch, capsys, *args, "--png", str(tmp_path / "fig.gif"))
    assert_bad(code, err, "must end in .png")
    code, _, err = run_main(monkeypatch, capsys, *args, "--png", "/proc/fig.png")
    assert_bad(code, err, "--png", "system folder")
    assert list(tmp_path.iterdir()) == []


def test_png_option_writes_the_commands_figure(tiny_llama_dir, tmp_path, monkeypatch, capsys, one_thread):
    """--png takes the format from the suffix: .json checks the wiring without starting a browser."""
    import json

    import plotly.io as pio
    from cli_helpers import run_cli as run_main

    target = tmp_path / "dla.json"
    code, out, err = run_main(monkeypatch, capsys, "dla", str(tiny_llama_dir), "The capital of France is",
                              "--target", " Paris", "--foil", " London", "--no-save", "--png", str(target), "--json")
    assert code == 0, err
    assert json.loads(out)["png"] == str(target)
    fig = pio.from_json(target.read_text())
    assert "' Paris'" in fig.layout.title.text and "' London'" in fig.layout.title.text
