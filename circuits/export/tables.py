"""Named tables of a graph or an attribution: one row per scored edge (every edge of a circuit, not only its
top k) or per node, as CSV or parquet.

Columns: ``source``, ``target``, ``score``, then what applies: ``role`` (q, k or v of a head), ``receiver`` (the
workbench receiver name, ``L3.H5.q``), ``rank`` (1 = largest |score|), ``in_circuit`` (at the run's K and
selection), and per end ``*_kind``, ``*_layer``, ``*_head``, ``*_position``, ``*_feature``. A feature graph's
tables hold the edges and nodes of the stored (pruned) graph. An attribution's table has one row per scored item
with its axes (layer, head, position, neuron, ...), the token at each token axis and the score.
"""

from __future__ import annotations

import io
from typing import Any

from attribution.result import AttributionResult
from core.errors import ExportError


def encode(frame: Any, fmt: str) -> bytes:
    """A DataFrame as CSV or parquet bytes."""
    if fmt == "csv":
        return frame.to_csv(index=False).encode()
    if fmt == "parquet":
        buf = io.BytesIO()
        frame.to_parquet(buf, index=False)
        return buf.getvalue()
    raise ExportError(f"not a table format: {fmt!r} (csv or parquet)")


def table(obj: Any, which: str = "edges") -> Any:
    """The ``which`` (edges | nodes) table of a CircuitResult, a Subgraph (a feature graph: its own columns) or an
    AttributionResult."""
    if isinstance(obj, AttributionResult):
        return attribution_rows(obj)
    kind = getattr(obj, "run_kind", None)
    if kind == "circuit":
        return circuit_edges(obj) if which == "edges" else circuit_nodes(obj)
    if kind == "feature-graph":
        return feature_graph_edges(obj) if which == "edges" else feature_graph_nodes(obj)
    return subgraph_edges(obj) if which == "edges" else obj.node_table()


def circuit_edges(cr: Any) -> Any:
    """Every edge of a circuit's graph, scored and named."""
    import numpy as np
    import pandas as pd

    g = cr.graph
    pairs = g.edges.numpy()
    send, recv = g.senders, g.receivers
    s_idx, r_idx = pairs[:, 0], pairs[:, 1]
    scores = cr.scores.detach().double().cpu().numpy()
    order = np.argsort(-np.abs(scores), kind="stable")
    rank = np.empty(len(scores), dtype=np.int64)
    rank[order] = np.arange(1, len(scores) + 1)
    mask = cr.mask().numpy() if len(scores) else np.zeros(0, dtype=bool)

    def col(nodes: list[Any], idx: np.ndarray, attr: str) -> list[Any]:
        values = [getattr(n, attr) for n in nodes]
        return [values[i] for i in idx.tolist()]

    frame = pd.DataFrame({
        "source": col(send, s_idx, "name"),
        "target": [recv[i].component for i in r_idx.tolist()],
        "role": col(recv, r_idx, "role"),
        "receiver": col(recv, r_idx, "name"),
        "score": scores,
        "rank": rank,
        "in_circuit": mask.astype(bool),
        "source_kind": col(send, s_idx, "kind"),
        "source_layer": pd.array(col(send, s_idx, "layer"), dtype="Int64"),
        "source_head": pd.array(col(send, s_idx, "head"), dtype="Int64"),
        "target_kind": col(recv, r_idx, "kind"),
        "target_layer": pd.array(col(recv, r_idx, "layer"), dtype="Int64"),
        "target_head": pd.array(col(recv, r_idx, "head"), dtype="Int64"),
    })
    return frame


def circuit_nodes(cr: Any) -> Any:
    """Every node of a circuit's graph: name, kind, layer, head, in_circuit, and the sum of |score| of its edges
    in and out."""
    import pandas as pd

    edges = circuit_edges(cr)
    mag = edges["score"].abs()
    out_sum = mag.groupby(edges["source"]).sum()
    in_sum = mag.groupby(edges["target"]).sum()
    used = set(edges.loc[edges["in_circuit"], "source"]) | set(edges.loc[edges["in_circuit"], "target"])
    return pd.DataFrame([{"node": n.name, "kind": n.kind, "layer": n.layer, "head": n.head,
                          "in_circuit": n.name in used, "abs_score_out": float(out_sum.get(n.name, 0.0)),
                          "abs_score_in": float(in_sum.get(n.name, 0.0))} for n in cr.graph.nodes])


def _fg_node_columns(n: dict[str, Any] | None, end: str) -> dict[str, Any]:
    n = n or {}
    return {f"{end}_kind": n.get("kind"), f"{end}_layer": n.get("row"), f"{end}_position": n.get("position"),
            f"{end}_feature": n.get("feature"), f"{end}_dictionary": n.get("dictionary")}


def feature_graph_edges(fg: Any) -> Any:
    """The feature graph's edges (the stored, pruned graph), with both ends described."""
    import pandas as pd

    nodes = {n.id: n.row() for n in fg.nodes}
    rows = [{"source": e.source, "target": e.target, "score": float(e.score),
             **_fg_node_columns(nodes.get(e.source), "source"), **_fg_node_columns(nodes.get(e.target), "target")}
            for e in fg.edges]
    columns = ["source", "target", "score"] + [f"{end}_{c}" for end in ("source", "target")
                                               for c in ("kind", "layer", "position", "feature", "dictionary")]
    frame = pd.DataFrame(rows, columns=columns)
    for c in ("source_position", "target_position", "source_feature", "target_feature"):
        frame[c] = pd.array(frame[c], dtype="Int64")
    return frame


def feature_graph_nodes(fg: Any) -> Any:
    """The feature graph's nodes: id, kind, layer (drawing row), position, token, dictionary, feature, activation,
    DPA score, influence, label."""
    import pandas as pd

    cols = ["id", "kind", "row", "position", "token", "dictionary", "feature", "activation", "score", "influence",
            "label"]
    rows = [{c: n.get(c) for c in cols} for n in (m.row() for m in fg.nodes)]
    frame = pd.DataFrame(rows, columns=cols).rename(columns={"row": "layer"})
    for c in ("position", "feature"):
        frame[c] = pd.array(frame[c], dtype="Int64")
    return frame


def subgraph_edges(sub: Any) -> Any:
    """A Subgraph's edge table with the layer, head and position of both ends."""
    import pandas as pd

    nodes = {n.id: n for n in sub.nodes}

    def ends(node_id: str, end: str) -> dict[str, Any]:
        n = nodes.get(node_id)
        return {f"{end}_kind": n.kind if n else None, f"{end}_layer": n.layer if n else None,
                f"{end}_head": (n.metadata.get("head") if n else None),
                f"{end}_position": n.position if n else None}

    rows = [{"source": e.source, "target": e.target, "role": e.role, "score": e.score,
             **ends(e.source, "source"), **ends(e.target, "target")} for e in sub.edges]
    cols = ["source", "target", "role", "score"] + [f"{end}_{c}" for end in ("source", "target")
                                                    for c in ("kind", "layer", "head", "position")]
    frame = pd.DataFrame(rows, columns=cols)
    for c in ("source_head", "target_head", "source_position", "target_position"):
        frame[c] = pd.array(frame[c], dtype="Int64")
    return frame


def attribution_rows(res: Any) -> Any:
    """One row per scored item of an attribution: its index on each axis, the token at token axes, the score."""
    import numpy as np
    import pandas as pd

    s = res.scores.detach().float().cpu().numpy()
    idx = np.indices(s.shape).reshape(s.ndim, -1)
    data: dict[str, Any] = {}
    tokens = np.array(list(res.tokens) + [""], dtype=object)
    for ax, values in zip(res.axes, idx, strict=True):
        data[ax] = values
        if ax in ("token", "position", "query", "key"):
            data[f"{ax}_str"] = tokens[np.minimum(values, len(res.tokens))]
    data["score"] = s.reshape(-1).astype(np.float64)
    return pd.DataFrame(data)
