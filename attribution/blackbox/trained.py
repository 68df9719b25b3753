"""A trained attention layer as the oracle.

The oracle feeds the query tokens straight into ``model.blocks[layer].attn`` of a TransformerLens
``HookedTransformer`` (no embedding, no positional embedding, no LayerNorm, no residual) in
float64 and reads the output at the last position along a fixed read-out direction w. So that
the spec's model f(X) = sum_h v_h . X^T softmax(X W_h x_N) holds exactly:

- b_K adds the same score to every key, and cancels in the softmax;
- b_V and b_O add the constant (sum_h b_V^h W_O^h + b_O) . w, which the oracle subtracts;
- b_Q would add a linear score term x_i . (W_K b_Q); the read-out zeroes it and reports its size.

The model's own products, the reference for the recovered heads, are then
W_h = W_K^h (W_Q^h)^T / attn_scale (so score_i = x_i^T W_h x_N) and v_h = W_V^h W_O^h w.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np

from attribution.blackbox.oracle import MHAParams, Oracle
from core.errors import MethodError, RangeError, UnknownModelError
from core.models import zoo

TINY = "tiny-attn"  # built-in recipe: a tiny attention-only model trained on the spot


@dataclass
class TrainedOracle:
    oracle: Oracle
    truth: MHAParams  # the model's own QK and OV read-out products
    name: str
    layer: int
    n_ctx: int
    dropped_b_Q_norm: float
    token_scale: float  # typical norm of the tokens this layer sees: the scale to query at


def train_tiny_attn(seed: int = 0, steps: int = 300, d_model: int = 8, n_heads: int = 2,
                    d_vocab: int = 10, n_ctx: int = 12):
    """A 1-layer attention-only HookedTransformer trained to copy the first token to the end.

    Seconds on one CPU core; used when the zoo has no toy attention model.
    """
    import torch
    from transformer_lens import HookedTransformerConfig

    from core.models.hooked import hooked_transformer

    torch.manual_seed(seed)
    cfg = HookedTransformerConfig(n_layers=1, d_model=d_model, n_ctx=n_ctx, d_head=d_model // n_heads,
                                  n_heads=n_heads, d_vocab=d_vocab, attn_only=True, act_fn=None,
                                  normalization_type="LN", seed=seed, device="cpu")
    model = hooked_transformer(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(steps):
            toks = torch.randint(0, d_vocab, (64, 6), generator=gen)
            logits = model(toks)[:, -1]
            loss = torch.nn.functional.cross_entropy(logits, toks[:, 0])
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    model.eval()
    model.train_loss = loss.item()
    return model


def load_toy(name: str):
    """A HookedTransformer from the zoo (the module under ``workbench.load(name)``) or the built-in ``tiny-attn``."""
    if name == TINY:
        if TINY not in {e.name for e in zoo.list_models()}:
            return train_tiny_attn()
    entry = zoo.resolve(name)  # UnknownModelError for an absent name
    if entry.kind != "toy":
        raise UnknownModelError(f"model {name!r} is a {entry.kind}, not a toy attention model")
    loaded = zoo.load(name)
    model = getattr(loaded, "tl", loaded)
    if not hasattr(model, "blocks"):
        raise UnknownModelError(f"model {name!r} does not expose a TransformerLens HookedTransformer")
    return model


def attention_oracle(model: Any, *, layer: int = 0, seed: int = 0, name: str = "toy") -> TrainedOracle:
    """Oracle for one attention layer of a HookedTransformer, with the model's own QK/OV products."""
    import torch

    cfg = model.cfg
    if not 0 <= layer < cfg.n_layers:
        raise RangeError(f"layer {layer} out of range: the model has {cfg.n_layers} "
                         f"(valid 0..{cfg.n_layers - 1})")
    if cfg.positional_embedding_type in ("rotary", "alibi", "relative_positional_bias"):
        raise MethodError(f"{cfg.positional_embedding_type} positions act inside attention; "
                          "the value-query model needs position-free attention")
    if getattr(cfg, "n_key_value_heads", None) not in (None, cfg.n_heads):
        raise MethodError("grouped key/value heads are not supported by the black-box recovery")
    attn = copy.deepcopy(model.blocks[layer].attn).to(torch.float64).eval()
    with torch.no_grad():
        b_q = float(attn.b_Q.norm())
        attn.b_Q.zero_()
        rng = np.random.default_rng(seed + 104729)
        w = rng.standard_normal(cfg.d_model)
        w = torch.tensor(w / np.linalg.norm(w), dtype=torch.float64)
        const = float((torch.einsum("hd,hdm->m", attn.b_V, attn.W_O) + attn.b_O) @ w)
        scale = float(attn.attn_scale)
        W = torch.einsum("hik,hjk->hij", attn.W_K, attn.W_Q) / scale  # score_i = x_i^T W_h x_N
        v = torch.einsum("hik,hkm,m->hi", attn.W_V, attn.W_O, w)
        token_scale = _token_scale(model, layer)

    def batch_fn(Xs: list[np.ndarray]) -> list[float]:
        x = torch.tensor(np.stack(Xs), dtype=torch.float64)
        with torch.no_grad():
            out = attn(x, x, x)[:, -1] @ w
        return (out - const).tolist()

    oracle = Oracle(lambda X: batch_fn([X])[0], cfg.d_model, exact=False, name=f"{name}/attn{layer}",
                    batch_fn=batch_fn)
    truth = MHAParams(W=W.numpy(), v=v.numpy())
    return TrainedOracle(oracle, truth, name, layer, int(cfg.n_ctx), b_q, token_scale)


def _token_scale(model: Any, layer: int) -> float:
    """Norm of the layer's typical input: sqrt(d_model) after a norm layer, else the embeddings'.

    Why: queries far smaller than real inputs put every pole near k = -1 (ill-conditioned);
    far larger ones make r_h extreme. The layer's own input scale is the natural middle.
    """
    import torch

    cfg = model.cfg
    if cfg.normalization_type is not None:
        ln = getattr(model.blocks[layer], "ln1", None)
        w = getattr(ln, "w", None)
        gain = float(w.detach().abs().mean()) if w is not None else 1.0
        return float(np.sqrt(cfg.d_model)) * gain
    emb = model.W_E.detach().to(torch.float64)
    if hasattr(model, "W_pos") and cfg.positional_embedding_type == "standard":
        emb = emb + model.W_pos.detach().to(torch.float64).mean(0)
    return float(emb.norm(dim=-1).median())
