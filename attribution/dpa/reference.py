"""Brute-force DPA: autograd through the real model with its nonlinearities frozen by hooks.

An independent check of the engine (tests, benchmarks): no hand-written transposes. Hooks keep
every forward value as in the clean pass and only reshape the gradient:

- norm scales (``*.hook_scale``) are replaced by detached clean values (frozen 1/rms, 1/std);
- q, k, v are replaced by ``w x + (1 - w) x.detach()``: same value, gradient scaled by the path
  weight (w_q, w_k through the softmax, whose exact local Jacobian autograd supplies; w_v linear);
- the MLP activation is replaced by ``post.detach() + w_up act(g) (u - u.detach())
  + w_gate slope(g) u (g - g.detach())``, slope = act(g)/g detached (or, for act_mode="derivative",
  autograd's own act'(g)), u detached in the gate term.

Scores then come from gradients: token = embed . grad, head = z . grad_z, qk = A_qk v_k . grad_z_q,
neuron = post . grad_post.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from jaxtyping import Float

from attribution.dpa.params import DPAParams


def dpa_reference(model: Any, enc: Any, **params: Any) -> dict[str, Float[torch.Tensor, "*axes"]]:
    p = DPAParams.from_kwargs(**params)
    a = model.arch
    store: dict[str, Float[torch.Tensor, "1 ..."]] = {}  # one prompt's activations by hook name
    hooks = reference_hooks(model, p, store)

    with torch.enable_grad(), logits_uncapped(model):  # DPA explains the logit before a final soft-cap
        logits = model.run_with_hooks(enc.tokens, fwd_hooks=hooks)
        value = logits[0, -1, enc.target_id]
        if enc.foil_id is not None:
            value = value - logits[0, -1, enc.foil_id]
        value.backward()
    out = {"token": (store["hook_embed"].grad * store["hook_embed"]).sum(-1)[0].detach()}
    heads, edges, neurons = [], [], []
    for layer in range(a.n_layers):
        b = f"blocks.{layer}."
        z = store[b + "attn.hook_z"]  # [1, query, head, d_head]
        gz = z.grad[0].transpose(0, 1)  # [head, query, d_head]
        heads.append((gz * z[0].transpose(0, 1)).sum(-1))
        v = store[b + "attn.hook_v"][0]
        v = torch.repeat_interleave(v, a.n_heads // v.shape[1], dim=1).transpose(0, 1)  # [head, key, d_head]
        edges.append(store[b + "attn.hook_pattern"][0] * torch.bmm(gz, v.transpose(1, 2)))
        if b + "mlp.hook_post" in store:
            post = store[b + "mlp.hook_post"]
            neurons.append((post.grad * post)[0])
    out["head"] = torch.stack(heads).detach()
    out["qk"] = torch.stack(edges).detach()
    if neurons:
        out["neuron"] = torch.stack(neurons).detach()
    out["target_logit"] = value.detach()
    return out


@contextmanager
def logits_uncapped(model: Any) -> Iterator[None]:
    """Within the block, the model's logits skip their final soft-cap (Gemma 2's cap * tanh(x / cap))."""
    cfg = getattr(getattr(model, "tl", None), "cfg", None)
    saved = getattr(cfg, "output_logits_soft_cap", None)
    if cfg is None or saved is None:
        yield
        return
    cfg.output_logits_soft_cap = -1.0
    try:
        yield
    finally:
        cfg.output_logits_soft_cap = saved


def reference_hooks(model: Any, p: DPAParams,
                    store: dict[str, Float[torch.Tensor, "batch ..."]]) -> list[tuple[str, Any]]:
    """The forward hooks that freeze the nonlinearities and scale each path's gradient (module docstring);
    tensors the scores need are put in ``store`` by hook name."""
    a = model.arch
    rotary = a.positional == "rope"

    def scaled(weight: float):
        def hook(x, hook):
            return weight * x + (1.0 - weight) * x.detach()
        return hook

    def frozen(x, hook):
        return x.detach()

    def leaf(x, hook):
        x = x.detach().requires_grad_(True)
        store[hook.name] = x
        return x

    def keep(x, hook):
        x.retain_grad()
        store[hook.name] = x
        return x

    def mlp_post(layer: int):
        act = model.act_fn(layer)

        def slope_path(g, other):  # the frozen slope (ratio) or the true local derivative, times g's change
            if p.act_mode == "ratio":
                return (act(g) / g).detach() * other * (g - g.detach())
            return (act(g) - act(g).detach()) * other

        def hook(post, hook):
            g = store[f"blocks.{layer}.mlp.hook_pre"]
            u_name = f"blocks.{layer}.mlp.hook_pre_linear"
            if u_name in store:  # gated: up path (act frozen) + gate path (slope and u frozen)
                u = store[u_name]
                new = (post.detach() + p.w_up * act(g).detach() * (u - u.detach())
                       + p.w_gate * slope_path(g, u.detach()))
            else:
                new = post.detach() + p.w_mlp * slope_path(g, 1.0)
            new.retain_grad()
            store[hook.name] = new
            return new
        return hook

    def remember(x, hook):
        store[hook.name] = x
        return x

    hooks: list[tuple[str, Any]] = [("hook_embed", leaf)]
    names = set(model.hook_names())
    for name in names:
        if name.endswith("hook_scale"):
            hooks.append((name, frozen))
    for layer in range(a.n_layers):
        b = f"blocks.{layer}."
        hooks += [(b + ("attn.hook_rot_q" if rotary else "attn.hook_q"), scaled(p.w_q)),
                  (b + ("attn.hook_rot_k" if rotary else "attn.hook_k"), scaled(p.w_k)),
                  (b + "attn.hook_v", scaled(p.w_v)), (b + "attn.hook_z", keep),
                  (b + "attn.hook_pattern", remember), (b + "attn.hook_v", remember)]
        if b + "mlp.hook_pre" in names:
            hooks += [(b + "mlp.hook_pre", remember), (b + "mlp.hook_post", mlp_post(layer))]
            if b + "mlp.hook_pre_linear" in names:
                hooks.append((b + "mlp.hook_pre_linear", remember))
    return [(n, f) for n, f in hooks if n in names]
