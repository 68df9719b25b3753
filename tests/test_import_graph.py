"""Importing a graph made elsewhere (issue 36 item 3): a circuit-tracer graph JSON written by circuit-tracer
0.5.0's own code (tests/data/circuit_tracer_gemma2_graph.json, gemma-2-2b: a model the workbench cannot load)
becomes a feature-graph run that opens on the Runs page with pruning and the node inspector, exports again with
the same node ids, and carries the replacement / completeness scores; a damaged or foreign file (wrong schema,
dangling link, non-finite weight, absurd sizes) is one line, exit 2, and stores nothing."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

import pytest
from cli_helpers import assert_bad
from cli_helpers import run_cli as cli

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from core.store import RunStore  # noqa: E402

FIXTURE = Path(__file__).parent / "data" / "circuit_tracer_gemma2_graph.json"


def fixture_doc() -> dict:
    return json.loads(FIXTURE.read_text())


def test_the_fixture_is_circuit_tracers_own_layout():
    from test_export import validate_graph_json

    doc = fixture_doc()
    validate_graph_json(doc)
    assert doc["metadata"]["scan"] == "gemma-2-2b" and FIXTURE.stat().st_size < 100_000


def test_import_stores_a_feature_graph_that_exports_again(monkeypatch, capsys, tmp_path):
    from circuits.runs import load_run

    doc = fixture_doc()
    code, out, err = cli(monkeypatch, capsys, "import", "graph-json", str(FIXTURE), "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["kind"] == "feature-graph" and got["model"] == "gemma-2-2b"
    assert got["nodes"] == len(doc["nodes"]) and got["links"] == len(doc["links"])
    assert 0 < got["scores"]["replacement"] < 1 and 0 < got["scores"]["completeness"] < 1
    graph = load_run(RunStore().get(got["run"]))
    kinds = {n.kind for n in graph.nodes}
    assert kinds == {"feature", "error", "token", "logits"} and graph.target == " Austin"
    assert [n.id for n in graph.nodes if n.kind == "logits"][0] == "logits"
    shares = [n.metadata["influence"] for n in graph.nodes if n.kind != "logits"]  # from circuit-tracer's cumulative
    assert all(v >= 0 for v in shares) and 0.5 < sum(shares) <= 1.0 + 1e-9  # shares (pruned nodes held the rest)
    code, _, err = cli(monkeypatch, capsys, "export", got["run"], "--format", "graph-json", "--out",
                       str(tmp_path / "again.json"))
    assert code == 0, err
    again = json.loads((tmp_path / "again.json").read_text())
    assert {n["node_id"] for n in again["nodes"]} == {n["node_id"] for n in doc["nodes"]}
    pairs = lambda d: sorted((e["source"], e["target"], round(e["weight"], 6)) for e in d["links"])  # noqa: E731
    assert pairs(again) == pairs(doc) and again["metadata"]["slug"] == doc["metadata"]["slug"]
    assert again["metadata"]["replacement_score"] == got["scores"]["replacement"]


def test_an_imported_graph_opens_on_the_runs_page_pruned_with_the_inspector(monkeypatch):
    from app import feature_view
    from app.testing import chart, open_page, problems
    from circuits.importer import import_graph_json

    monkeypatch.setattr(feature_view, "BIG_NODES", 30)  # Neuronpedia's graphs are hundreds of nodes; this one 59

    run = import_graph_json(FIXTURE, RunStore())
    at = open_page("runs")
    at.selectbox(key="runs_pick").set_value(run.id).run()
    assert not problems(at)
    drawn = chart(at, "runs_open_fg")["data"][-1]["customdata"]
    assert "logits" in drawn and 2 < len(drawn) < len(fixture_doc()["nodes"])  # pruned to read (59 stored)
    assert any("Replacement score" in str(c.value) for c in at.caption)
    at.session_state["runs_open_fg"] = {"selection": {"points": [{"customdata": "logits"}]}}
    at.run()
    assert not problems(at)
    assert any("direction" in d.value.columns for d in at.dataframe)  # the clicked node's edges
    at.button(key="runs_open_export_go").click().run()  # graph-json, the first format offered
    assert not problems(at)
    assert any(b.key == "runs_open_export_dl" for b in at.get("download_button"))


def test_an_imported_graph_opens_on_the_feature_graph_page(tiny_llama_dir, tmp_path):
    """The Feature graph page's "Open a saved feature graph": drawn; a feature shows its maker's explanation
    (Neuronpedia's files carry them; circuit-tracer's leave them empty), as text, and no SAE-page link (its
    dictionary is not here)."""
    from app.testing import chart, open_page, problems
    from circuits.importer import import_graph_json

    doc = fixture_doc()
    for n in doc["nodes"]:
        if n["feature_type"] == "cross layer transcoder":
            n["clerp"] = f"**state capitals** {n['node_id']}"
    (tmp_path / "explained.json").write_text(json.dumps(doc))
    run = import_graph_json(tmp_path / "explained.json", RunStore())
    at = open_page("feature_graph", {"fg_model": str(tiny_llama_dir)})
    at.selectbox(key="fg_open").set_value(run.id).run()
    assert not problems(at)
    drawn = list(chart(at, "fg_saved_graph")["data"][-1]["customdata"])
    assert "logits" in drawn and any(".f" in n for n in drawn)
    feature = next(n for n in drawn if ".f" in n)
    at.selectbox(key="fg_saved_graph_node").set_value(feature).run()
    assert not problems(at)
    layer, index, pos = feature[1:].split("T.f")[0], feature.split(".f")[1].split("@")[0], feature.split("@p")[1]
    assert any(f"**state capitals** {layer}_{index}_{pos}" in str(t.value) for t in at.text)  # not markdown
    assert not any(e.proto.page == "sae" for e in at.get("page_link"))


def test_a_feature_graph_server_serves_the_export(tmp_path):
    """circuit-tracer's local graph server (stdlib only, installed without dependencies) serves our file where
    its frontend reads it."""
    ct = pytest.importorskip("circuit_tracer.frontend.local_server")
    from circuits.export import export
    from circuits.importer import read, to_feature_graph

    graph = to_feature_graph(read(FIXTURE), FIXTURE.name)
    slug = fixture_doc()["metadata"]["slug"]
    export(graph, "graph-json", tmp_path / f"{slug}.json")  # where create_graph_files writes it
    from circuit_tracer.frontend.utils import add_graph_metadata

    add_graph_metadata(json.loads((tmp_path / f"{slug}.json").read_text())["metadata"], str(tmp_path))
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ct.serve(data_dir=str(tmp_path), port=port)
    try:
        base = f"http://127.0.0.1:{port}"
        listing = json.loads(urllib.request.urlopen(f"{base}/data/graph-metadata.json", timeout=10).read())
        assert listing["graphs"][0]["slug"] == slug
        served = json.loads(urllib.request.urlopen(f"{base}/graph_data/{slug}.json", timeout=10).read())
        assert len(served["nodes"]) == len(graph.nodes) and served["metadata"]["scan"] == "gemma-2-2b"
        assert b"attribution graph" in urllib.request.urlopen(f"{base}/index.html", timeout=10).read().lower()
    finally:
        server.stop()


def _bad(tmp_path: Path, doc, name: str = "bad.json") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def test_damaged_or_foreign_files_are_refused_and_store_nothing(monkeypatch, capsys, tmp_path):
    doc = fixture_doc()
    dangling = json.loads(json.dumps(doc))
    dangling["links"][3]["target"] = "27_999_99"
    infinite = json.dumps(doc).replace(f'"weight": {json.dumps(doc["links"][0]["weight"])}', '"weight": 1e999', 1)
    nan = json.dumps(doc).replace(f'"weight": {json.dumps(doc["links"][0]["weight"])}', '"weight": NaN', 1)
    dup = json.loads(json.dumps(doc))
    dup["nodes"].append(dict(dup["nodes"][0]))
    outside = json.loads(json.dumps(doc))
    outside["nodes"][5]["ctx_idx"] = 400
    no_logit = json.loads(json.dumps(doc))
    no_logit["nodes"] = [n for n in no_logit["nodes"] if n["feature_type"] != "logit"]
    no_logit["links"] = []
    mib = {"cfg": {"n_layers": 1}, "nodes": {"input": {"in_graph": True}}, "edges": {}}
    cases = [
        (_bad(tmp_path, mib, "mib.json"), ("not a circuit-tracer graph JSON", "'metadata'")),
        (_bad(tmp_path, [1, 2], "list.json"), ("not a circuit-tracer graph JSON",)),
        (_bad(tmp_path, "{\"metadata\": ", "cut.json"), ("not valid JSON",)),
        (_bad(tmp_path, dangling, "dangling.json"), ("link 3", "does not have")),
        (_bad(tmp_path, infinite, "inf.json"), ("weight", "not a finite number")),
        (_bad(tmp_path, nan, "nan.json"), ("non-finite",)),
        (_bad(tmp_path, dup, "dup.json"), ("appears twice",)),
        (_bad(tmp_path, outside, "outside.json"), ("position 400",)),
        (_bad(tmp_path, no_logit, "nologit.json"), ("no logit node",)),
        (tmp_path / "missing.json", ("does not exist",)),
    ]
    for path, words in cases:
        code, _, err = cli(monkeypatch, capsys, "import", "graph-json", str(path))
        assert_bad(code, err, *words)
    assert RunStore().list() == []


def test_absurd_sizes_are_refused_before_anything_is_built(monkeypatch, capsys, tmp_path):
    """A file over the size bound is refused before it is read; a graph over the node bound (10^7 nodes would
    be ~1 GB of JSON: the bound is lowered here to test it) before anything is built from it."""
    from circuits import importer

    big = tmp_path / "huge.json"
    with open(big, "wb") as fh:
        fh.truncate(importer.MAX_BYTES + 1)  # sparse: no disk, no time
    with monkeypatch.context() as m:
        m.setattr("core.checks.read_json", lambda *a, **k: pytest.fail("read a file over the bound"))
        code, _, err = cli(monkeypatch, capsys, "import", "graph-json", str(big))
    assert_bad(code, err, "bytes, more than")
    monkeypatch.setattr(importer, "MAX_NODES", 20)
    monkeypatch.setattr(importer, "to_feature_graph", lambda *a, **k: pytest.fail("built an absurd graph"))
    with monkeypatch.context() as m:  # counted in chunks before the file is parsed (issue 52)
        m.setattr("core.checks.read_json", lambda *a, **k: pytest.fail("parsed a file of too many nodes"))
        code, _, err = cli(monkeypatch, capsys, "import", "graph-json", str(FIXTURE))
    assert_bad(code, err, "more than the 20 nodes", "before parsing it")
    # the count after parsing still holds, for a file whose keys the scan cannot see
    monkeypatch.setattr(importer, "_count_bounded", lambda path: None)
    code, _, err = cli(monkeypatch, capsys, "import", "graph-json", str(FIXTURE))
    assert_bad(code, err, "59 nodes", "more than")
    assert RunStore().list() == []


def test_node_count_scan_reads_a_fraction_of_an_oversized_file(tmp_path, monkeypatch):
    """Issue 52: a graph of too many nodes is refused after reading the chunks that hold MAX_NODES + 1 node keys,
    not the whole file; keys split across a chunk boundary are counted once; and quoted text that merely
    mentions "node_id" (escaped inside a string) is not a node."""
    from circuits import importer
    from core.errors import ExportError

    monkeypatch.setattr(importer, "MAX_NODES", 1000)
    node = '{"node_id": "1_2_3", "clerp": "a \\"node_id\\": x"}'
    big = tmp_path / "big.json"
    big.write_text('{"metadata": {}, "nodes": [' + ", ".join([node] * 5000) + '], "links": []}')
    with pytest.raises(ExportError, match="more than the 1,000 nodes") as info:
        importer._count_bounded(big, chunk=997)  # an odd chunk: keys straddle the boundaries
    read = int(info.value.args[0].split("first ")[1].split(" bytes")[0].replace(",", ""))
    assert read < big.stat().st_size / 4
    ok = tmp_path / "ok.json"
    ok.write_text('{"metadata": {}, "nodes": [' + ", ".join([node] * 1000) + '], "links": []}')
    importer._count_bounded(ok, chunk=997)  # exactly the bound: passes
