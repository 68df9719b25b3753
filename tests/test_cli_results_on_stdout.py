"""A command's human-readable result goes to stdout (so `> file` and `| grep` see it), progress and logs to stderr.
The README's `bench circuits --workers 2` line printed its whole leaderboard on stderr and nothing on stdout (the slow
suite caught it); `circuit discover`'s and `feature-graph`'s header lines went the same way."""

from __future__ import annotations

from workbench.commands import bench, circuit, feature_graph


def test_bench_circuits_result_is_on_stdout(capsys):
    row = {"task": "ioi", "method": "dpa", "level": "edge", "cpr": 1.2, "cpr_lo": 1.1, "cpr_hi": 1.3, "cmd": 0.02,
           "cmd_lo": 0.01, "cmd_hi": 0.03, "seconds": 2.0}
    bench._human({"model": "m", "seconds": 60.0, "document": None, "rows": [row]})
    out, err = capsys.readouterr()
    assert "circuit benchmark on m" in out and "CPR 1.200 [1.10, 1.30]  CMD 0.020 [0.01, 0.03]" in out and err == ""
    assert "ioi x dpa, edge level (2.0 s)" in out and max(len(line) for line in out.splitlines()) <= 80


def test_circuit_discover_header_is_on_stdout(capsys):
    circuit._human({"method": "eap", "model": "m", "n_prompts": 2, "n_nodes": 5, "n_edges_total": 9,
                    "ablation": "corrupt", "metric": "logit_diff", "seconds": 0.5,
                    "edges": [{"src": "a0.0", "dst": "logits", "score": 0.25}]})
    out, err = capsys.readouterr()
    assert out.startswith("eap on m: 2 prompts") and "a0.0" in out and err == ""


def test_feature_graph_header_is_on_stdout(capsys):
    feature_graph._human({"prompt": "p", "target": " t", "model": "m", "n_passes": 3, "seconds": 1.0, "params": {},
                          "nodes": [{"id": "f1", "kind": "feature", "token": "x", "influence": 0.5, "score": 0.1}],
                          "edges": [{"src": "f1", "dst": "logit", "score": 0.3}]})
    out, err = capsys.readouterr()
    assert out.startswith("feature graph of 'p'") and "f1" in out and err == ""
