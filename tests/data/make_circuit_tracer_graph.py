"""How tests/data/circuit_tracer_gemma2_graph.json was made: by circuit-tracer 0.5.0's own code (its Graph,
prune_graph, create_nodes, create_used_nodes_and_edges and build_model, as create_graph_files chains them), on
a synthetic attribution graph of gemma-2-2b's shape (26 layers, per-layer transcoders, Gemma 2's vocabulary ids
for the prompt's tokens); only the tokenizer is a stand-in (create_graph_files loads gemma-2-2b's from the hub,
which this machine cannot reach). Run with circuit-tracer installed (`pip install --no-deps
circuit-tracer==0.5.0`): ``python tests/data/make_circuit_tracer_graph.py``.
"""

from __future__ import annotations

from pathlib import Path

import torch

PROMPT = "Fact: the capital of the state containing Dallas is"
# gemma-2-2b's token ids and strings for PROMPT (with <bos>), and its top two next tokens
TOKENS = [(2, "<bos>"), (18143, "Fact"), (235292, ":"), (573, " the"), (6037, " capital"), (576, " of"),
          (573, " the"), (2329, " state"), (10751, " containing"), (26865, " Dallas"), (603, " is")]
LOGITS = [(" Austin", 22605, 0.52), (" Texas", 9447, 0.21)]


class Tokenizer:
    def decode(self, ids):
        table = {i: s for i, s in TOKENS}
        return "".join(table[int(i)] for i in (ids if isinstance(ids, list) else [ids]))


def main() -> None:
    from circuit_tracer.attribution.targets import LogitTarget
    from circuit_tracer.graph import Graph, prune_graph
    from circuit_tracer.utils.create_graph_files import build_model, create_nodes, create_used_nodes_and_edges
    from circuit_tracer.utils.tl_nnsight_mapping import UnifiedConfig

    g = torch.Generator().manual_seed(0)
    n_layers, n_pos = 26, len(TOKENS)
    cfg = UnifiedConfig(n_layers=n_layers, d_model=2304, d_head=256, n_heads=8, d_mlp=9216, d_vocab=256000,
                        tokenizer_name="google/gemma-2-2b", model_name="google/gemma-2-2b",
                        original_architecture="Gemma2ForCausalLM")
    n_active = 120
    layer = torch.randint(0, n_layers, (n_active,), generator=g)
    pos = torch.randint(1, n_pos, (n_active,), generator=g)
    feat = torch.randint(0, 16384, (n_active,), generator=g)
    active = torch.stack([layer, pos, feat], 1)
    selected = torch.arange(n_active)
    n_err, n_tok, n_logit = n_layers * n_pos, n_pos, len(LOGITS)
    n = n_active + n_err + n_tok + n_logit
    # source layer/pos of every node (features, errors, tokens); a target reads sources below it, at or before it
    src_layer = torch.cat([layer, torch.arange(n_layers).repeat_interleave(n_pos), torch.full((n_tok,), -1)])
    src_pos = torch.cat([pos, torch.arange(n_pos).repeat(n_layers), torch.arange(n_tok)])
    adj = torch.zeros(n, n)
    weights = torch.randn(n, n, generator=g) * torch.rand(n, n, generator=g).pow(6)
    for t in range(n_active):
        ok = (src_layer < layer[t]) & (src_pos <= pos[t])
        adj[t, : n_active + n_err + n_tok] = torch.where(ok, weights[t, : n_active + n_err + n_tok], 0.0)
    for i in range(n_logit):
        row = n_active + n_err + n_tok + i
        ok = src_pos == n_pos - 1
        adj[row, : n_active + n_err + n_tok] = torch.where(ok, weights[row, : n_active + n_err + n_tok], 0.0)
    graph = Graph(input_string=PROMPT, input_tokens=torch.tensor([i for i, _ in TOKENS]), active_features=active,
                  adjacency_matrix=adj, cfg=cfg, selected_features=selected,
                  activation_values=torch.rand(n_active, generator=g) * 20,
                  logit_targets=[LogitTarget(s, i) for s, i, _ in LOGITS],
                  logit_probabilities=torch.tensor([p for _, _, p in LOGITS]), scan="gemma-2-2b", vocab_size=256000)
    node_mask, edge_mask, cumulative = prune_graph(graph, 0.8, 0.98)
    nodes = create_nodes(graph, node_mask, Tokenizer(), cumulative)
    used_nodes, used_edges = create_used_nodes_and_edges(graph, nodes, edge_mask)
    model = build_model(graph, used_nodes, used_edges, "gemma-2-2b-dallas-austin", "gemma-2-2b", 0.8, Tokenizer())
    out = Path(__file__).with_name("circuit_tracer_gemma2_graph.json")
    out.write_text(model.model_dump_json(indent=1))
    print(out, out.stat().st_size, len(used_nodes), len(used_edges))


if __name__ == "__main__":
    main()
