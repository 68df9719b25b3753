"""Exports (issue 36 items 1, 2, 4): a stored circuit and a stored feature graph leave as circuit-tracer /
Neuronpedia graph JSON (validated against circuit-tracer 0.5.0's schema), EAP-IG / MIB graph JSON (every
workbench edge is exactly one MIB edge) and CSV / parquet (every scored edge); saved circuits carry named edges;
circuit-tracer's replacement and completeness scores; bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import json
import os
import random

import pandas as pd
import pytest
import torch
from cli_helpers import assert_bad
from cli_helpers import run_cli as cli

from circuits.export import graph_json, mib
from circuits.graph import CircuitGraph
from core.store import RunStore

ROW = {"prompt": "When Mary and John went to the store, John gave a drink to", "target": " Mary", "foil": " John"}
PROMPT = "The capital of France is"


def validate_graph_json(doc: dict) -> None:
    """circuit-tracer 0.5.0's own pydantic model when it is installed (./dev installs it without its
    dependencies), and always the JSON Schema written from it."""
    import jsonschema

    jsonschema.validate(doc, graph_json.GRAPH_JSON_SCHEMA)
    try:
        from circuit_tracer.frontend.graph_models import Model
    except ImportError:
        return
    Model(**doc)
    ids = {n["node_id"] for n in doc["nodes"]}
    assert len(ids) == len(doc["nodes"]) and all(e["source"] in ids and e["target"] in ids for e in doc["links"])
    logits = [n for n in doc["nodes"] if n["feature_type"] == "logit"]
    assert logits and all("(p=" in n["clerp"] for n in logits)  # the frontend parses p from the clerp


@pytest.fixture(scope="module")
def circuit_result(tiny_llama, one_thread):
    from circuits.discover import circuit

    return circuit(tiny_llama, [ROW], method="eap", edges=12, ablation="zero", evaluate=False)


@pytest.fixture(scope="module")
def feature_graph(tmp_path_factory, one_thread):
    from test_feature_dpa import save_dictionary

    import workbench as wb
    from attribution.dpa.tiny import save_tiny_llama
    from attribution.features.placement import load_dictionaries
    from circuits.feature_graph import feature_graph

    root = tmp_path_factory.mktemp("fg-export")
    model = wb.load(str(save_tiny_llama(root / "tiny-llama", layers=3)))
    paths = [save_dictionary(root / "sae-L1", model.name, "blocks.1.hook_resid_post", seed=1),
             save_dictionary(root / "sae-L2", model.name, "blocks.2.hook_resid_post", seed=2),
             save_dictionary(root / "tc-L1", model.name, "blocks.1.ln2.hook_normalized", "blocks.1.hook_mlp_out", 3)]
    dicts = load_dictionaries([str(p) for p in paths])
    return feature_graph(model, PROMPT, dicts, target=" Paris", foil=" London", max_nodes=30, max_edges=60,
                         per_layer=4)


# -- MIB naming ------------------------------------------------------------------------------------------------
def test_mib_names_follow_eap_ig():
    assert mib.node_name("embed") == "input" and mib.node_name("logits") == "logits"
    assert mib.node_name("L23.H3") == "a23.h3" and mib.node_name("L4.mlp") == "m4"
    assert mib.edge_name("embed", "L0.H0.q") == "input->a0.h0<q>"
    assert mib.edge_name("L23.H3", "logits") == "a23.h3->logits"
    assert mib.edge_name("L1.mlp", "L3.H2.v") == "m1->a3.h2<v>" and mib.edge_name("L0.H1", "L0.mlp") == "a0.h1->m0"


@pytest.mark.parametrize("parallel", [False, True])
def test_every_workbench_edge_is_exactly_one_mib_edge(parallel):
    """With an MLP per layer the two graphs are the same: a bijection, counted as EAP-IG's Graph counts them."""
    n_layers, n_heads = 3, 4
    g = CircuitGraph(n_layers, n_heads, has_mlp=True, parallel=parallel)
    names = [mib.edge_name(*g.edge_name(e)) for e in range(g.n_edges)]
    theirs = mib.all_edges(n_layers, n_heads, parallel)
    assert len(set(names)) == len(names) == g.n_edges and set(names) == set(theirs) and len(set(theirs)) == len(theirs)
    # EAP-IG's real_edge_mask count: per layer, the residual stream into 3 inputs per head and into the MLP
    stream, count = 1, 0
    for _ in range(n_layers):
        count += stream * 3 * n_heads + (stream if parallel else stream + n_heads)
        stream += n_heads + 1
    assert len(theirs) == count + stream


def test_attention_only_graph_is_a_subset_and_the_rest_touch_the_mlps():
    """EAP-IG always has an MLP per layer: for an attention-only model its extra edges are exactly those of the
    m{L} nodes; the workbench has no edge MIB lacks."""
    g = CircuitGraph(2, 2, has_mlp=False)
    ours = {mib.edge_name(*g.edge_name(e)) for e in range(g.n_edges)}
    theirs = set(mib.all_edges(2, 2, False))
    assert ours < theirs
    assert all(any(p.startswith("m") for p in (e.split("->")[0], e.split("->")[1].split("<")[0]))
               for e in theirs - ours)


# -- circuits ---------------------------------------------------------------------------------------------------
def test_saved_circuit_has_named_edges_and_the_full_edge_table(circuit_result):
    from circuits.discover import CircuitResult

    run = circuit_result.save(RunStore())
    result = run.result()
    assert result["k"] == 12 and len(result["edges"]) == 12  # the named top edges, not the integer K
    assert set(result["edges"][0]) == {"src", "dst", "score"} and result["edges"] == circuit_result.top()
    table = pd.read_parquet(run.path / "edges.parquet")
    g = circuit_result.graph
    assert len(table) == g.n_edges and int(table["in_circuit"].sum()) == 12
    e = g.edge_id("embed", "L1.H2.k")
    row = table[(table["source"] == "embed") & (table["receiver"] == "L1.H2.k")].iloc[0]
    assert row["target"] == "L1.H2" and row["role"] == "k" and row["target_head"] == 2 and row["target_layer"] == 1
    assert row["score"] == pytest.approx(float(circuit_result.scores[e]))
    assert CircuitResult.from_run(run).d_model == 32  # and the run reopens, with the width MIB files record


def test_circuit_run_exports_in_every_format(circuit_result, monkeypatch, capsys, tmp_path):
    run = circuit_result.save(RunStore())
    g = circuit_result.graph
    paths = {}
    for fmt, name in (("graph-json", "c.json"), ("mib", "c.mib.json"), ("csv", "c.csv"), ("parquet", "c.parquet")):
        paths[fmt] = tmp_path / name
        code, out, err = cli(monkeypatch, capsys, "export", run.id[:-2], "--format", fmt, "--out",
                             str(paths[fmt]), "--json")  # a unique prefix of the id
        assert code == 0, err
        assert json.loads(out)["bytes"] == paths[fmt].stat().st_size > 0
    doc = json.loads(paths["graph-json"].read_text())
    validate_graph_json(doc)
    assert len(doc["links"]) == len({(e["src"], e["dst"].rsplit(".", 1)[0] if e["dst"][-2:] in (".q", ".k", ".v")
                                      else e["dst"]) for e in circuit_result.top()})
    m = json.loads(paths["mib"].read_text())
    assert m["cfg"] == {"n_layers": 2, "n_heads": 4, "parallel_attn_mlp": False, "d_model": 32}
    assert len(m["edges"]) == g.n_edges and sum(e["in_graph"] for e in m["edges"].values()) == 12
    top = circuit_result.top()[0]
    assert m["edges"][mib.edge_name(top["src"], top["dst"])] == {"score": pytest.approx(top["score"]),
                                                                  "in_graph": True}
    assert m["nodes"]["logits"] == {"in_graph": True} and set(m["nodes"]) >= {"input", "a1.h3", "m1"}
    csv, parquet = pd.read_csv(paths["csv"]), pd.read_parquet(paths["parquet"])
    assert len(csv) == len(parquet) == g.n_edges  # every edge, not only the top k
    assert list(csv.columns) == list(parquet.columns) and {"source", "target", "score", "role"} <= set(csv.columns)
    assert csv["score"].tolist() == pytest.approx(parquet["score"].tolist())


def test_eap_igs_own_reader_loads_the_mib_file(circuit_result, tmp_path):
    """EAP-IG's Graph.from_json, where EAP-IG is installed (it is not on PyPI: skipped here; checked by hand on
    smollm2-135m's 123,211 edges, every name known and every score equal)."""
    eap_graph = pytest.importorskip("eap.graph")
    circuit_result.export("mib", tmp_path / "m.json")
    g = eap_graph.Graph.from_json(str(tmp_path / "m.json"))
    assert g.count_included_edges() == 12
    for e in circuit_result.top():
        assert float(g.edges[mib.edge_name(e["src"], e["dst"])].score) == pytest.approx(e["score"], abs=1e-6)


def test_notebook_exports(circuit_result, tmp_path):
    """A stored run goes out through the facade (wb.export: circuits' export_run, as `workbench export`), by the
    run or by a prefix of its id; the store's Run has no export of its own (the store is the ground: it names
    nothing of circuits)."""
    import workbench as wb
    from core.store import Run

    run = circuit_result.save(RunStore())
    assert not hasattr(Run, "export")
    assert wb.export(run, "csv", tmp_path / "a.csv")["rows"] == circuit_result.graph.n_edges
    by_id = wb.export(run.id[:-2], "csv", tmp_path / "a2.csv")
    assert by_id["run"] == run.id and (tmp_path / "a2.csv").read_bytes() == (tmp_path / "a.csv").read_bytes()
    with pytest.raises(ValueError, match="already exists"):
        wb.export(run, "csv", tmp_path / "a.csv")
    assert wb.export(run, "csv", tmp_path / "a.csv", overwrite=True)["rows"] == circuit_result.graph.n_edges
    assert circuit_result.export("mib", tmp_path / "b.json")["in_graph"] == 12
    out = circuit_result.subgraph().export("parquet", tmp_path / "c.parquet", table="nodes")
    assert out["rows"] == len(circuit_result.subgraph().nodes)
    with pytest.raises(Exception, match="already exists"):
        circuit_result.export("csv", tmp_path / "a.csv")


def test_attribution_and_subgraph_runs_export_as_tables_and_graph_json(circuit_result, tiny_llama, tmp_path):
    import workbench as wb

    store = RunStore()
    res = wb.attribute(tiny_llama, PROMPT, target=" Paris", method="dpa", level="head")
    out = wb.export(res.save(store), "csv", tmp_path / "a.csv")
    table = pd.read_csv(tmp_path / "a.csv")
    assert out["rows"] == len(table) == res.scores.numel() and {"layer", "head", "query", "score"} <= set(table)
    row = table[(table["layer"] == 1) & (table["head"] == 2) & (table["query"] == 3)].iloc[0]
    assert row["score"] == pytest.approx(float(res.scores[1, 2, 3])) and row["query_str"] == res.tokens[3]
    sub = circuit_result.subgraph(6).save(store)
    assert wb.export(sub, "graph-json", tmp_path / "s.json")["links"] <= 6
    validate_graph_json(json.loads((tmp_path / "s.json").read_text()))
    assert wb.export(sub, "parquet", tmp_path / "s.parquet")["rows"] == 6


# -- feature graphs and the two scores -----------------------------------------------------------------------
def test_feature_graph_run_exports_with_its_scores(feature_graph, monkeypatch, capsys, tmp_path):
    fg = feature_graph
    scores = fg.graph_scores()
    assert scores["computed_on"] == "unpruned" and 0 < scores["replacement"] < 1 and 0 < scores["completeness"] < 1
    run = fg.save(RunStore())
    assert run.result()["scores"] == scores
    code, out, err = cli(monkeypatch, capsys, "export", run.id, "--format", "graph-json", "--out",
                         str(tmp_path / "g.json"))
    assert code == 0, err
    doc = json.loads((tmp_path / "g.json").read_text())
    validate_graph_json(doc)
    meta = doc["metadata"]
    assert meta["replacement_score"] == scores["replacement"] and meta["prompt_tokens"] == fg.tokens
    assert meta["target"] == " Paris" and meta["foil"] == " London"
    types = {n["feature_type"] for n in doc["nodes"]}
    assert {"embedding", "logit"} <= types and types & {"sae feature", "cross layer transcoder"}
    logit = next(n for n in doc["nodes"] if n["feature_type"] == "logit")
    assert logit["token_prob"] == pytest.approx(fg.target_prob) and logit["layer"] == "4"  # n_layers + 1
    assert sum(n["feature_type"] == "embedding" for n in doc["nodes"]) == len(fg.tokens)
    assert len(doc["links"]) == len(fg.edges)
    for fmt, table in (("csv", "edges"), ("parquet", "nodes")):
        path = tmp_path / f"g.{table}.{fmt}"
        code, _, err = cli(monkeypatch, capsys, "export", run.id, "--format", fmt, "--table", table, "--out",
                           str(path))
        assert code == 0, err
        frame = pd.read_csv(path) if fmt == "csv" else pd.read_parquet(path)
        assert len(frame) == (len(fg.edges) if table == "edges" else len(fg.nodes))


def test_feature_graph_cli_prints_the_scores(monkeypatch, capsys):
    """``workbench feature-graph`` prints both scores (and --json holds them); checked on its printer."""
    from workbench.commands.feature_graph import _human

    r = {"prompt": "p", "target": " a", "foil": None, "model": "m", "nodes": [], "edges": [], "n_passes": 1,
         "seconds": 0.1, "scores": {"replacement": 0.25, "completeness": 0.75, "computed_on": "unpruned"}}
    _human(r)
    out = capsys.readouterr()
    assert "replacement score 0.250" in out.err + out.out and "completeness score 0.750" in out.err + out.out


def circuit_tracer_scores(adj: torch.Tensor, n_features: int, n_errors: int, n_tokens: int, n_logits: int,
                          probs: torch.Tensor) -> tuple[float, float]:
    """circuit-tracer 0.5.0's compute_graph_scores (graph.py), on its node order [features, errors, tokens,
    logits], rows = targets; its own function when installed."""
    from types import SimpleNamespace

    try:
        from circuit_tracer.graph import compute_graph_scores
    except ImportError:
        compute_graph_scores = None
    if compute_graph_scores is not None:
        g = SimpleNamespace(logit_targets=[0] * n_logits, input_tokens=[0] * n_tokens,
                            selected_features=[0] * n_features, cfg=SimpleNamespace(n_layers=n_errors // n_tokens),
                            adjacency_matrix=adj, logit_probabilities=probs)
        return compute_graph_scores(g)
    a = adj.abs()
    a = a / a.sum(1, keepdim=True).clamp(min=1e-10)
    w = torch.zeros(len(adj))
    w[-n_logits:] = probs
    infl, cur = torch.zeros_like(w), w @ a
    while cur.any():
        infl, cur = infl + cur, cur @ a
    e0, e1 = n_features, n_features + n_errors
    tok, err = infl[e1:e1 + n_tokens].sum(), infl[e0:e1].sum()
    out = infl + w
    return float(tok / (tok + err)), float(((1 - a[:, e0:e1].sum(-1)) * out).sum() / out.sum())


def test_scores_equal_circuit_tracers_on_a_random_graph():
    from circuits.feature_graph import graph_scores

    rng = random.Random(0)
    n_layers, n_pos, n_feat = 3, 4, 9
    feats = [(f"L{rng.randrange(1, n_layers)}.f{i}@p{rng.randrange(n_pos)}") for i in range(n_feat)]
    layer = {f: int(f[1]) for f in feats}
    errors = [f"L{lay}.err@p{p}" for lay in range(n_layers) for p in range(n_pos)]
    tokens = [f"emb@p{p}" for p in range(n_pos)]
    order = feats + errors + tokens + ["logits"]
    index = {n: i for i, n in enumerate(order)}
    edges: dict[str, dict[str, float]] = {}
    for dst in feats + ["logits"]:
        top = layer.get(dst, n_layers)
        srcs = [f for f in feats if layer[f] < top] + [e for e in errors if int(e[1]) < top] + tokens
        edges[dst] = {s: rng.uniform(-1, 1) for s in srcs if rng.random() < 0.7}
    adj = torch.zeros(len(order), len(order))  # float32, as circuit-tracer keeps it
    for dst, row in edges.items():
        for s, v in row.items():
            adj[index[dst], index[s]] = v
    rep, comp = circuit_tracer_scores(adj, n_feat, len(errors), n_pos, 1, torch.tensor([1.0]))
    ours = graph_scores(edges)
    assert ours["replacement"] == pytest.approx(rep, rel=1e-5) and ours["completeness"] == pytest.approx(comp, rel=1e-5)
    assert 0.05 < ours["replacement"] < 0.95 and 0.05 < ours["completeness"] < 0.95  # not a degenerate graph


# -- bad input ---------------------------------------------------------------------------------------------------
def _nothing_written(folder) -> None:
    assert list(folder.iterdir()) == []


def test_bad_exports_are_one_line_and_write_nothing(circuit_result, feature_graph, monkeypatch, capsys, tmp_path):
    store = RunStore()
    c = circuit_result.save(store)
    f = feature_graph.save(store)
    out = tmp_path / "out"
    out.mkdir()
    cases = [
        (("export", c.id, "--format", "xml", "--out", str(out / "x")), ("unknown export format", "graph-json")),
        (("export", f.id, "--format", "mib", "--out", str(out / "x.json")), ("feature-graph", "mib cannot hold")),
        (("export", c.id, "--format", "csv", "--out", str(tmp_path / "missing" / "x.csv")), ("does not exist",)),
        (("export", c.id, "--format", "csv", "--out", str(out)), ("is a directory",)),
        (("export", c.id, "--format", "csv", "--out", "/proc/x.csv"), ("system folder",)),
        (("export", c.id, "--format", "csv", "--out", str(out / "x.csv"), "--table", "links"), ("--table",)),
        (("export", "no-such-run", "--format", "csv", "--out", str(out / "x.csv")), ("no run",)),
        (("export", "2", "--format", "csv", "--out", str(out / "x.csv")), ("start of 2 run ids",)),
    ]
    for args, words in cases:
        code, _, err = cli(monkeypatch, capsys, *args)
        assert_bad(code, err, *words)
        _nothing_written(out)
    attribution = store.save(__import__("core.store", fromlist=["RunDraft"]).RunDraft(kind="attribute"))
    code, _, err = cli(monkeypatch, capsys, "export", attribution.id, "--format", "graph-json", "--out",
                       str(out / "a.json"))
    assert_bad(code, err, "attribute run", "graph-json cannot hold")
    (out / "exists.csv").write_text("keep me")
    code, _, err = cli(monkeypatch, capsys, "export", c.id, "--format", "csv", "--out", str(out / "exists.csv"))
    assert_bad(code, err, "already exists")
    assert (out / "exists.csv").read_text() == "keep me"
    code, _, err = cli(monkeypatch, capsys, "export", c.id, "--format", "csv", "--out", str(out / "exists.csv"),
                       "--force")
    assert code == 0, err and sorted(p.name for p in out.iterdir()) == ["exists.csv"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into any folder")
def test_an_unwritable_folder_is_refused_before_work(circuit_result, monkeypatch, capsys, tmp_path):
    run = circuit_result.save(RunStore())
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    code, _, err = cli(monkeypatch, capsys, "export", run.id, "--format", "csv", "--out", str(locked / "x.csv"))
    assert_bad(code, err, "permission")


@pytest.mark.real
@pytest.mark.slow
def test_a_smollm2_circuit_exports_every_edge(smollm2, tmp_path):
    """smollm2-135m (30 layers x 9 heads, MLPs): its 123,211 edges are exactly EAP-IG's graph for that shape,
    the mib file scores every one, and the graph-json passes circuit-tracer's schema."""
    from circuits.discover import circuit

    res = circuit(smollm2, [ROW, ROW], method="eap", edges=50, ablation="zero", evaluate=False)
    assert res.graph.n_edges == 123_211 and res.d_model == 576
    m = json.loads((tmp_path / "m.json").read_text()) if res.export("mib", tmp_path / "m.json") else None
    assert set(m["edges"]) == set(mib.all_edges(30, 9, False)) and len(m["edges"]) == 123_211
    assert sum(e["in_graph"] for e in m["edges"].values()) == 50
    validate_graph_json(json.loads((tmp_path / "g.json").read_text()) if res.export("graph-json", tmp_path / "g.json")
                        else {})
    assert res.export("parquet", tmp_path / "e.parquet")["rows"] == 123_211
