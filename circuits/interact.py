"""What a researcher does to a drawn graph (circuit-tracer's and Neuronpedia's graph view is the model): prune it
by cumulative influence, pin nodes into a subgraph, group nodes into labelled supernodes, take or leave
suggested groups, and keep pins and supernodes with the run they were made on.

Everything here works on a ``circuits.graph.Subgraph`` and returns a new one, so a circuit, the information
flow and a feature graph go through the same steps; the app (app/graph_interact.py) draws the result.

- ``prune(sub, threshold, pinned)``: the smallest set of nodes, most influential first, that holds ``threshold``
  of the influence on the logits (circuit-tracer's node threshold; its frontend's slider), each with its most
  influential path to the logits and from the embeddings, so the pruned graph stays connected. The logits, the
  input embeddings and pinned nodes always stay.
- ``group(sub, supernodes)``: each supernode's members become one node (kind ``supernode``), edges between
  the group and the rest summed, edges inside it dropped.
- ``pinned_only(sub, pinned)``: the pinned nodes and the edges among them.
- ``suggest(sub, explanations)``: groups of features (or heads) whose edge profiles into and out of the graph
  are alike, and whose explanations share words (average-linkage clustering of the two similarities).
- ``load`` / ``keep``: pins and supernodes as ``supernodes.json`` in the run's directory, written whole by
  the store's writer, and only into a run the workbench's store saved (``core.store``).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

from circuits.influence import node_influence
from circuits.subgraph import GraphEdge, GraphNode, Subgraph
from core.checks import read_json
from core.errors import ArgumentError, RunStoreError
from core.store import RUN_ID, check_run_dir, is_marked, write_atomic

ANNOTATIONS = "supernodes.json"  # a run's pins and supernodes, beside its meta.json
KEPT = ("logits", "embed", "token")  # kinds pruning never drops: the graph's two ends
GROUPABLE = ("feature", "head", "mlp", "error", "supernode")  # kinds a supernode may hold
SUPER = "supernode"
MAX_NAME = 80  # characters of a supernode's label
STOP = frozenset("the a an and or of to in on at for with by from is are was be as it its this that these those "
                 "token tokens word words text after before when which who whom into about like also sim "
                 "feature features fires mostly often promotes more".split())


@dataclass
class Supernode:
    """A labelled group of node ids (the node ids of the graph it was made on)."""

    name: str
    members: list[str]
    reason: str = ""  # why a suggestion grouped them (empty for a group made by hand)

    @property
    def id(self) -> str:
        return supernode_id(self.name)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "members": list(self.members)}


def supernode_id(name: str) -> str:
    return f"⊕ {name}"


@dataclass
class Annotations:
    """What a user keeps with a graph: pinned node ids, supernodes and (where set) the pruning threshold it was
    drawn at."""

    pinned: list[str] = field(default_factory=list)
    supernodes: list[Supernode] = field(default_factory=list)
    threshold: float | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"version": 1, "pinned": list(self.pinned), "supernodes": [s.to_json() for s in self.supernodes]}
        if self.threshold is not None:
            out["threshold"] = self.threshold
        return out

    def copy(self) -> Annotations:
        return Annotations(list(self.pinned), [Supernode(s.name, list(s.members), s.reason) for s in self.supernodes],
                           self.threshold)

    @classmethod
    def from_json(cls, d: Any, what: str = "the annotations") -> Annotations:
        """Read ``to_json``'s layout back; anything else is a RunStoreError naming what is wrong."""
        if not isinstance(d, dict):
            raise RunStoreError(f"{what} are damaged: not a JSON object")
        pinned, groups = d.get("pinned", []), d.get("supernodes", [])
        if not isinstance(pinned, list) or not all(isinstance(p, str) for p in pinned):
            raise RunStoreError(f"{what} are damaged: 'pinned' is not a list of node ids")
        if not isinstance(groups, list):
            raise RunStoreError(f"{what} are damaged: 'supernodes' is not a list")
        out = []
        for g in groups:
            ok = (isinstance(g, dict) and isinstance(g.get("name"), str) and isinstance(g.get("members"), list)
                  and all(isinstance(m, str) for m in g["members"]))
            if not ok:
                raise RunStoreError(f"{what} are damaged: a supernode is not {{name, members}}")
            out.append(Supernode(g["name"], list(g["members"])))
        threshold = d.get("threshold")
        if threshold is not None:
            try:
                threshold = check_threshold(threshold)
            except ArgumentError as exc:
                raise RunStoreError(f"{what} are damaged: {exc}") from None
        return cls(list(pinned), out, threshold)


# -- checks (bad input is one typed line) ----------------------------------------------------------------------
def check_threshold(value: Any) -> float:
    """A pruning threshold: a number in (0, 1]; ArgumentError otherwise."""
    try:
        t = float(value)
    except (TypeError, ValueError):
        raise ArgumentError(f"the pruning threshold must be a number in (0, 1] (got {value!r})") from None
    if not math.isfinite(t) or not 0.0 < t <= 1.0:
        raise ArgumentError(f"the pruning threshold must be in (0, 1]: the share of the influence on the logits "
                            f"the drawn nodes keep (got {t:g})")
    return t


def check_supernode(name: str, members: list[str], present: set[str] | None = None,
                    taken: list[Supernode] | None = None) -> Supernode:
    """A supernode a user asked for: members given (at least one), a label (at most MAX_NAME characters, not
    one already used), members that are nodes of the graph (``present``) and in no other group (``taken``)."""
    name = " ".join(str(name or "").split())
    if not members:
        raise ArgumentError("a supernode needs at least one member: pick the nodes to group")
    if not name:
        raise ArgumentError("a supernode needs a label: name what its members do together")
    if len(name) > MAX_NAME:
        raise ArgumentError(f"a supernode's label has at most {MAX_NAME} characters (got {len(name)})")
    members = list(dict.fromkeys(members))
    if present is not None:
        missing = [m for m in members if m not in present]
        if missing:
            raise ArgumentError(f"not in the graph: {', '.join(missing[:3])}")
    for other in taken or []:
        if other.name == name:
            raise ArgumentError(f"there is already a supernode labelled {name!r}")
        shared = set(other.members) & set(members)
        if shared:
            raise ArgumentError(f"{sorted(shared)[0]} is already in the supernode {other.name!r}: ungroup it first")
    return Supernode(name, members)


# -- influence and pruning -------------------------------------------------------------------------------------
def influence(sub: Subgraph) -> dict[str, float]:
    """Each node's influence on the logits (circuit-tracer's: every node's |incoming edges| normalised to one,
    propagated down from the logits nodes)."""
    rows: dict[str, dict[str, float]] = {}
    for e in sub.edges:
        if e.source == e.target:
            continue
        row = rows.setdefault(e.target, {})
        row[e.source] = row.get(e.source, 0.0) + float(e.score)
    roots = {n.id: 1.0 for n in sub.nodes if n.kind == "logits"}
    return node_influence(rows, roots) if roots else {}


def prune(sub: Subgraph, threshold: float, pinned: list[str] | tuple[str, ...] = ()) -> Subgraph:
    """circuit-tracer's node pruning with the paths kept: the nodes holding ``threshold`` of the influence on the
    logits (most influential first; the logits and the embeddings always; ``pinned`` nodes always), then, for each
    kept node, its most influential path down to the logits and (where one exists) up from the embeddings, so
    nothing kept floats alone; the edges among the kept nodes. A node with no path to the logits goes (unless
    pinned)."""
    threshold = check_threshold(threshold)
    if threshold >= 1.0:  # every node, as drawn (a small circuit shows its nodes without edges too)
        return sub
    ids = {n.id for n in sub.nodes}
    pins = {p for p in pinned if p in ids}
    infl = influence(sub)
    ranked = sorted((n for n in sub.nodes if n.kind not in KEPT), key=lambda n: -infl.get(n.id, 0.0))
    total = sum(max(infl.get(n.id, 0.0), 0.0) for n in ranked)
    keep = {n.id for n in sub.nodes if n.kind in KEPT} | pins
    if total <= 0:
        keep |= {n.id for n in ranked}
    else:
        run = 0.0
        for n in ranked:
            if run >= threshold * total - 1e-12:
                break
            keep.add(n.id)
            run += max(infl.get(n.id, 0.0), 0.0)
    keep = connect(sub, keep, infl)
    edges = [e for e in sub.edges if e.source in keep and e.target in keep]
    return _to_logits(replace(sub, nodes=[n for n in sub.nodes if n.id in keep], edges=edges), pins)


def _edge_influence(sub: Subgraph, infl: dict[str, float]) -> dict[tuple[str, str], float]:
    """Each edge's influence on the logits (circuit-tracer's: its target's influence x its share of the target's
    |incoming| weight), summed over a head's q/k/v inputs."""
    mass: dict[str, float] = {}
    for e in sub.edges:
        if e.source != e.target:
            mass[e.target] = mass.get(e.target, 0.0) + abs(float(e.score))
    out: dict[tuple[str, str], float] = {}
    for e in sub.edges:
        if e.source == e.target or not mass.get(e.target):
            continue
        k = (e.source, e.target)
        out[k] = out.get(k, 0.0) + infl.get(e.target, 0.0) * abs(float(e.score)) / mass[e.target]
    return out


def connect(sub: Subgraph, keep: set[str], infl: dict[str, float] | None = None) -> set[str]:
    """``keep`` and, for each of its nodes, the most influential path (edge by edge, by edge influence) down to
    the logits and up from the input embeddings where the graph has one: the nodes a pruned graph needs so
    that every kept node lies on a drawn path."""
    infl = influence(sub) if infl is None else infl
    ei = _edge_influence(sub, infl)
    kind = {n.id: n.kind for n in sub.nodes}
    outs: dict[str, list[tuple[float, str]]] = {}
    ins: dict[str, list[tuple[float, str]]] = {}
    for (s, t), v in ei.items():
        if s in kind and t in kind:
            outs.setdefault(s, []).append((v, t))
            ins.setdefault(t, []).append((v, s))
    inputs = {i for i, k in kind.items() if k in ("embed", "token")}
    fed = set(inputs)  # nodes with a path from the input
    changed = True
    while changed:
        changed = False
        for (s, t) in ei:
            if s in fed and t not in fed and t in kind:
                fed.add(t)
                changed = True
    out = set(keep)
    down_ok = {i for i, k in kind.items() if k == "logits"}
    up_ok = set(inputs)
    for start in list(keep):
        if start not in kind:
            continue
        n, seen = start, set()
        while n not in down_ok and n not in seen:  # down: the strongest edge into a node that reaches the logits
            seen.add(n)
            nxt = max(((v, t) for v, t in outs.get(n, []) if infl.get(t, 0.0) > 0 or kind[t] == "logits"),
                      default=None)
            if nxt is None:
                break
            n = nxt[1]
            out.add(n)
        else:
            down_ok |= seen
        n, seen = start, set()
        while n in fed and n not in up_ok and n not in seen:  # up: the strongest edge from a node the input feeds
            seen.add(n)
            prev = max(((v, s) for v, s in ins.get(n, []) if s in fed), default=None)
            if prev is None:
                break
            n = prev[1]
            out.add(n)
        else:
            up_ok |= seen
    return out


def _to_logits(sub: Subgraph, pinned: set[str] | None = None) -> Subgraph:
    """Only the nodes with a path to the logits (the ends and the ``pinned`` nodes stay), and the edges among
    them."""
    reach = {n.id for n in sub.nodes if n.kind == "logits"}
    if not reach:
        return sub
    changed = True
    while changed:
        changed = False
        for e in sub.edges:
            if e.target in reach and e.source not in reach:
                reach.add(e.source)
                changed = True
    keep = reach | {n.id for n in sub.nodes if n.kind in KEPT} | (pinned or set())
    return replace(sub, nodes=[n for n in sub.nodes if n.id in keep],
                   edges=[e for e in sub.edges if e.source in keep and e.target in keep])


# -- pins and supernodes ---------------------------------------------------------------------------------------
def pinned_only(sub: Subgraph, pinned: list[str]) -> Subgraph:
    """The pinned nodes (a supernode holding a pinned node counts as pinned) and the edges among them."""
    keep = set(pinned)
    for n in sub.nodes:
        if n.kind == SUPER and set(n.metadata.get("members") or []) & keep:
            keep.add(n.id)
    return replace(sub, nodes=[n for n in sub.nodes if n.id in keep],
                   edges=[e for e in sub.edges if e.source in keep and e.target in keep])


def group(sub: Subgraph, supernodes: list[Supernode], infl: dict[str, float] | None = None) -> Subgraph:
    """Each supernode's members drawn as one node: placed where its most influential member is (the same row
    and position), its edges to the rest of the graph summed per neighbour, the edges among its members
    dropped. A supernode none of whose members is in ``sub`` is left out."""
    if not supernodes:
        return sub
    infl = influence(sub) if infl is None else infl
    by_id = {n.id: n for n in sub.nodes}
    owner: dict[str, str] = {}
    new_nodes: list[GraphNode] = []
    for s in supernodes:
        members = [by_id[m] for m in s.members if m in by_id]
        if not members:
            continue
        rep = max(members, key=lambda n: (infl.get(n.id, 0.0), -n.layer))
        for m in members:
            owner[m.id] = s.id
        total = sum(infl.get(m.id, 0.0) for m in members)
        acts = [m.metadata.get("activation") for m in members if isinstance(m.metadata.get("activation"), int | float)]
        new_nodes.append(GraphNode(s.id, SUPER, rep.layer, rep.position, s.name, {
            "members": [m.id for m in members], "rep": rep.id, "influence": total,
            "activation": max(acts) if acts else None, "clerp": f"{s.name}: " + ", ".join(m.id for m in members),
            "token": rep.metadata.get("token")}))
    nodes = [n for n in sub.nodes if n.id not in owner]
    placed: dict[str, int] = {}
    for i, n in enumerate(sub.nodes):  # a supernode takes its first member's place in the node order
        if n.id in owner and owner[n.id] not in placed:
            placed[owner[n.id]] = i
    order = {n.id: i for i, n in enumerate(sub.nodes)}
    nodes = sorted(nodes + new_nodes, key=lambda n: order.get(n.id, placed.get(n.id, 0)))
    summed: dict[tuple[str, str, str | None], float] = {}
    for e in sub.edges:
        src, dst = owner.get(e.source, e.source), owner.get(e.target, e.target)
        if src == dst:
            continue
        role = e.role if dst == e.target else None  # a head's q/k/v input is no input of a group
        summed[(src, dst, role)] = summed.get((src, dst, role), 0.0) + float(e.score)
    edges = [GraphEdge(s, d, v, r) for (s, d, r), v in summed.items() if v != 0.0]
    return replace(sub, nodes=nodes, edges=edges)


# -- suggested groups ------------------------------------------------------------------------------------------
def words(text: str) -> set[str]:
    """What an explanation says a unit reads: its quoted tokens (“to”, any length) and content words (lower case,
    three letters or more, no stop words), before what it promotes (the tokens it raises are mostly noise
    here) and without its score."""
    text = re.sub(r"·\s*sim\s*[-\d.]+", " ", str(text or "").lower()).split("; promotes")[0]
    quoted = {f"“{t.strip()}”" for t in re.findall(r"“([^”]*)”", text) if t.strip()}
    text = re.sub(r"“[^”]*”", " ", text)
    return quoted | {w for w in re.findall(r"[a-z][a-z'-]{2,}", text) if w not in STOP}


def _cosine(a: dict[str, float], b: dict[str, float]) -> float:
    dot = sum(v * b.get(k, 0.0) for k, v in a.items())
    na = math.sqrt(sum(v * v for v in a.values()))
    nb = math.sqrt(sum(v * v for v in b.values()))
    return dot / (na * nb) if na > 0 and nb > 0 else 0.0


def similarity(sub: Subgraph, explanations: dict[str, str] | None = None, text_weight: float = 0.5,
               position_weight: float = 0.2) -> tuple[list[str], dict[tuple[str, str], float]]:
    """(candidate node ids, their pairwise similarity): the cosine of their edge profiles (signed weights in
    from and out to every other node, each side normalised so in and out weigh alike), blended with the
    Jaccard overlap of their explanations' words (``text_weight``, where both have one) and whether they sit at
    the same token position (``position_weight``: circuit-tracer's supernodes are mostly one position's
    features across layers)."""
    cands = [n.id for n in sub.nodes if n.kind in ("feature", "head", "mlp")]
    inc: dict[str, dict[str, float]] = {c: {} for c in cands}
    out: dict[str, dict[str, float]] = {c: {} for c in cands}
    for e in sub.edges:
        if e.target in inc:
            inc[e.target][e.source] = inc[e.target].get(e.source, 0.0) + float(e.score)
        if e.source in out:
            out[e.source][e.target] = out[e.source].get(e.target, 0.0) + float(e.score)

    def unit(d: dict[str, float]) -> dict[str, float]:
        norm = math.sqrt(sum(v * v for v in d.values()))
        return {k: v / norm for k, v in d.items()} if norm > 0 else {}

    profile = {c: {**{f"in:{k}": v for k, v in unit(inc[c]).items()},
                   **{f"out:{k}": v for k, v in unit(out[c]).items()}} for c in cands}
    bags = {c: words((explanations or {}).get(c, "")) for c in cands}
    where = {n.id: n.position for n in sub.nodes}
    sims = {}
    for i, a in enumerate(cands):
        for b in cands[i + 1:]:
            same = float(where[a] is not None and where[a] == where[b])
            s = _cosine(profile[a], profile[b])
            if bags[a] and bags[b]:
                jac = len(bags[a] & bags[b]) / len(bags[a] | bags[b])
                s = (1 - text_weight - position_weight) * s + text_weight * jac + position_weight * same
            else:
                s = (1 - position_weight) * s + position_weight * same
            sims[(a, b)] = sims[(b, a)] = s
    return cands, sims


def suggest(sub: Subgraph, explanations: dict[str, str] | None = None, min_similarity: float = 0.5,
            max_size: int = 8, text_weight: float = 0.5, position_weight: float = 0.2) -> list[Supernode]:
    """Suggested supernodes: average-linkage clusters of features (or heads and MLPs) whose ``similarity`` is
    at least ``min_similarity``, two to ``max_size`` members each, strongest first; each named by the words its
    members' explanations share (else by what they are) and saying why it was suggested."""
    cands, sims = similarity(sub, explanations, text_weight, position_weight)
    clusters: list[list[str]] = [[c] for c in cands]

    def link(a: list[str], b: list[str]) -> float:
        return sum(sims[(x, y)] for x in a for y in b) / (len(a) * len(b))

    while len(clusters) > 1:
        best, pair = -1.0, None
        for i in range(len(clusters)):
            for j in range(i + 1, len(clusters)):
                if len(clusters[i]) + len(clusters[j]) > max_size:
                    continue
                s = link(clusters[i], clusters[j])
                if s > best:
                    best, pair = s, (i, j)
        if pair is None or best < min_similarity:
            break
        i, j = pair
        clusters[i] = clusters[i] + clusters[j]
        del clusters[j]
    def cohesion(c: list[str]) -> float:  # mean similarity over the group's pairs
        pairs = [(a, b) for i, a in enumerate(c) for b in c[i + 1:]]
        return sum(sims[p] for p in pairs) / len(pairs)

    groups = sorted((c for c in clusters if len(c) >= 2), key=lambda c: -cohesion(c) * len(c))
    out, used = [], set()
    by_id = {n.id: n for n in sub.nodes}
    for c in groups:
        name = _name(c, by_id, explanations or {}, used)
        used.add(name)
        pairs = [(a, b) for i, a in enumerate(c) for b in c[i + 1:]]
        mean = cohesion(c)
        out.append(Supernode(name, c, f"mean similarity {mean:.2f} over {len(pairs)} pairs (edge profiles"
                                      f"{' and explanations' if explanations else ''})"))
    return out


def _name(members: list[str], by_id: dict[str, GraphNode], explanations: dict[str, str], used: set[str]) -> str:
    """A suggested group's label: the words most of its members' explanations share, else what the members are
    (``L3 heads``, ``features at ' John'``)."""
    counts: dict[str, int] = {}
    for m in members:
        for w in words(explanations.get(m, "")):
            counts[w] = counts.get(w, 0) + 1
    common = sorted((w for w, k in counts.items() if k * 2 >= len(members) and k > 1), key=lambda w: (-counts[w], w))
    if common:
        name = " ".join(common[:2])
    else:
        nodes = [by_id[m] for m in members if m in by_id]
        tokens = {n.metadata.get("token") for n in nodes}
        layers = {int(n.layer) for n in nodes}
        if len(tokens) == 1 and None not in tokens:
            name = f"features at {next(iter(tokens))!r}"
        elif len(layers) == 1 and all(n.kind == "head" for n in nodes):
            name = f"L{next(iter(layers))} heads"
        else:
            name = f"group of {len(members)}"
    base, k = name[:MAX_NAME - 4], 2
    while name in used:
        name = f"{base} {k}"
        k += 1
    return name


def matches(suggested: list[list[str]], reference: list[list[str]], min_jaccard: float = 0.5) -> dict[str, Any]:
    """How well suggested groups match reference groups made by hand: for each reference group its best
    suggestion's Jaccard overlap; matched when it is at least ``min_jaccard``; precision over suggestions."""
    def jac(a: list[str], b: list[str]) -> float:
        return len(set(a) & set(b)) / len(set(a) | set(b)) if a or b else 0.0

    best = [max((jac(r, s) for s in suggested), default=0.0) for r in reference]
    hit = [max((jac(r, s) for r in reference), default=0.0) >= min_jaccard for s in suggested]
    return {"reference": len(reference), "suggested": len(suggested), "best_jaccard": best,
            "recall": sum(b >= min_jaccard for b in best) / len(reference) if reference else 0.0,
            "precision": sum(hit) / len(suggested) if suggested else 0.0}


# -- kept with the run -----------------------------------------------------------------------------------------
def _writable(run: Any) -> None:
    """Refuse a run the workbench's store did not save (RunStoreError): its folder must be a marked store, its
    name a run id as save() makes it, itself a sound run directory."""
    path = getattr(run, "path", None)
    if path is None or not RUN_ID.match(str(getattr(run, "id", ""))) or not is_marked(path.parent):
        raise RunStoreError(f"run {getattr(run, 'id', run)} was not saved by the workbench's run store: its "
                            "supernodes are not written into it")
    meta, why = check_run_dir(path)
    if meta is None:
        raise RunStoreError(f"run {run.id} is damaged ({why}): its supernodes are not written into it")


def load(run: Any) -> Annotations:
    """The pins and supernodes kept with ``run`` (none when it has no ``supernodes.json``)."""
    file = run.path / ANNOTATIONS
    if file.is_symlink():
        raise RunStoreError(f"run {run.id}: {ANNOTATIONS} is a symlink; refusing to read it")
    if not file.exists():
        return Annotations()

    return Annotations.from_json(read_json(file, f"run {run.id}'s {ANNOTATIONS}", RunStoreError),
                                 f"run {run.id}'s supernodes")


def keep(run: Any, annotations: Annotations) -> None:
    """Write ``annotations`` into ``run``'s directory, whole (the store's atomic writer), only into a run the
    workbench's store saved."""
    _writable(run)
    for s in annotations.supernodes:
        if not s.members:
            raise ArgumentError(f"the supernode {s.name!r} has no members: not kept")
    write_atomic(run.path / ANNOTATIONS, json.dumps(annotations.to_json(), ensure_ascii=False, indent=1),
                 f"run {run.id}'s supernodes", RunStoreError)
