"""Activation patching from a corrupted prompt, and path patching between heads.

Convention ("noising"): activations from the corrupted run are written into the clean run, one
site at a time. ``effect`` = (clean - patched) / (clean - corrupted) of the logit difference
target - foil at the scored position: 0 = no effect, 1 = the patch alone flips to the
corrupted behaviour. Several sites are patched as one batched forward (copies of the clean
prompt), so a [layer, position] scan costs one forward per layer. When clean and corrupted give
(nearly) the same logit difference the normalization is undefined: UndefinedEffectError, before
any patching is run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from circuits.tools.common import Prompts, frame, heatmap, logit_diff, prompts
from workbench.errors import PromptError, RangeError

# |clean - corrupted| at or below this (relative to the logit differences' size, at least 1) leaves
# the normalized effect undefined: float32 rounding alone moves a logit difference by ~1e-6 of it.
NORM_TOL = 1e-5


class UndefinedEffectError(PromptError):
    """Clean and corrupted prompts give the same logit difference: no effect can be normalized by it."""


@dataclass
class PatchResult:
    effect: Any  # normalized effect, axes as named
    patched: Any  # mean logit difference after each patch
    axes: tuple[str, ...]
    site: str
    clean: float
    corrupted: float
    labels: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "site": self.site,
            "axes": list(self.axes),
            "clean": self.clean,
            "corrupted": self.corrupted,
            "effect": self.effect.tolist(),
            "patched": self.patched.tolist(),
            "labels": self.labels,
        }

    def table(self):
        return frame(self.effect, self.axes, "effect")

    def plot(self):
        lab = self.labels
        return heatmap(
            self.effect,
            self.axes,
            f"activation patching: {self.site}",
            x_labels=lab.get(self.axes[-1]),
            y_labels=lab.get(self.axes[0]),
        )


def _pair(model, clean, corrupted, target, foil, pos) -> tuple[Prompts, Any]:
    from circuits.tools.common import as_tokens

    p = prompts(model, clean, target, foil, pos)
    bad = as_tokens(model, corrupted)
    if bad.shape != p.tokens.shape:
        raise PromptError(
            f"corrupted prompt has shape {tuple(bad.shape)}, clean has {tuple(p.tokens.shape)}: "
            "they must have the same number of tokens"
        )
    return p, bad


def _metric(model, tokens, p: Prompts, hooks, copies: int):
    """Mean logit difference per copy: tokens are the clean batch repeated ``copies`` times."""
    import torch

    with torch.no_grad():
        logits = model.run_with_hooks(tokens, fwd_hooks=hooks)
    rep = Prompts(tokens, p.target.repeat(copies), None if p.foil is None else p.foil.repeat(copies), p.pos)
    return logit_diff(logits, rep).view(copies, p.batch).mean(1)


def _baselines(model, p: Prompts, bad, names):
    import torch

    with torch.no_grad():
        clean_logits, clean_cache = model.run_with_cache(p.tokens, names_filter=names)
        bad_logits, bad_cache = model.run_with_cache(bad, names_filter=names)
    return (
        float(logit_diff(clean_logits, p).mean()),
        float(logit_diff(bad_logits, p).mean()),
        clean_cache,
        bad_cache,
    )


def _check_norm(clean: float, corrupted: float) -> None:
    """UndefinedEffectError when (clean - corrupted), the effect's denominator, is (numerically) zero."""
    if not abs(clean - corrupted) > NORM_TOL * max(1.0, abs(clean), abs(corrupted)):  # NaN fails too
        raise UndefinedEffectError(
            f"clean and corrupted prompts give the same logit difference ({clean:.6g} vs {corrupted:.6g}): "
            "the normalized effect (clean - patched) / (clean - corrupted) is undefined; use a corrupted "
            "prompt that changes the answer"
        )


def _effect(patched, clean: float, corrupted: float):
    _check_norm(clean, corrupted)
    return (clean - patched) / (clean - corrupted)


def patch_residual(
    model,
    clean,
    corrupted,
    target,
    foil=None,
    pos: int = -1,
    site: str = "resid_pre",
    layers: list[int] | None = None,
    positions: list[int] | None = None,
) -> PatchResult:
    """Effect of patching the residual stream (``resid_pre``/``resid_mid``/``resid_post``) at each
    layer and position: [layer, position]."""
    import torch

    p, bad = _pair(model, clean, corrupted, target, foil, pos)
    layers = list(range(model.arch.n_layers)) if layers is None else [model.check_layer(x) for x in layers]
    seq = p.tokens.shape[1]
    positions = list(range(seq)) if positions is None else positions
    for q in positions:
        if not 0 <= q < seq:
            raise RangeError(f"position {q} out of range for {seq} tokens")
    names = [model.check_hook(f"blocks.{layer}.hook_{site}") for layer in layers]
    c, k, _, bad_cache = _baselines(model, p, bad, names)
    _check_norm(c, k)
    n, b = len(positions), p.batch
    tokens = p.tokens.repeat(n, 1)
    patched = torch.zeros(len(layers), n)
    for i, (_layer, name) in enumerate(zip(layers, names, strict=False)):
        src = bad_cache[name]

        def hook(act, hook, src=src):
            for j, q in enumerate(positions):
                act[j * b : (j + 1) * b, q] = src[:, q]
            return act

        patched[i] = _metric(model, tokens, p, [(name, hook)], n).cpu()
    labels = {
        "layer": [str(x) for x in layers],
        "position": [
            f"{q}:{s}"
            for q, s in zip(
                positions, [model.to_str_tokens(p.tokens[:1])[q] for q in positions], strict=False
            )
        ],
    }
    return PatchResult(_effect(patched, c, k), patched, ("layer", "position"), site, c, k, labels)


def patch_heads(
    model, clean, corrupted, target, foil=None, pos: int = -1, position: int | None = None
) -> PatchResult:
    """Effect of patching each head's output (hook_z) at all positions (or one): [layer, head]."""
    import torch

    p, bad = _pair(model, clean, corrupted, target, foil, pos)
    L, H, b = model.arch.n_layers, model.arch.n_heads, p.batch
    names = [f"blocks.{layer}.attn.hook_z" for layer in range(L)]
    c, k, _, bad_cache = _baselines(model, p, bad, names)
    _check_norm(c, k)
    tokens = p.tokens.repeat(H, 1)
    sl = slice(None) if position is None else slice(position, position + 1)
    patched = torch.zeros(L, H)
    for layer, name in enumerate(names):
        src = bad_cache[name]

        def hook(z, hook, src=src):
            for h in range(H):
                z[h * b : (h + 1) * b, sl, h] = src[:, sl, h]
            return z

        patched[layer] = _metric(model, tokens, p, [(name, hook)], H).cpu()
    labels = {"layer": [str(x) for x in range(L)], "head": [str(h) for h in range(H)]}
    return PatchResult(_effect(patched, c, k), patched, ("layer", "head"), "head", c, k, labels)


def patch_mlps(
    model, clean, corrupted, target, foil=None, pos: int = -1, site: str = "mlp_out"
) -> PatchResult:
    """Effect of patching each layer's MLP output (or ``attn_out``): [layer]."""
    import torch

    if site == "mlp_out" and model.arch.mlp == "none":
        raise RangeError(f"{model.name} has no MLPs (attention-only)")
    p, bad = _pair(model, clean, corrupted, target, foil, pos)
    names = [model.check_hook(f"blocks.{layer}.hook_{site}") for layer in range(model.arch.n_layers)]
    c, k, _, bad_cache = _baselines(model, p, bad, names)
    _check_norm(c, k)
    patched = torch.zeros(len(names))
    for layer, name in enumerate(names):
        src = bad_cache[name]
        patched[layer] = _metric(model, p.tokens, p, [(name, lambda a, hook, s=src: s.clone())], 1).cpu()[0]
    return PatchResult(
        _effect(patched, c, k),
        patched,
        ("layer",),
        site,
        c,
        k,
        {"layer": [str(x) for x in range(len(names))]},
    )


def path_patch(
    model,
    clean,
    corrupted,
    target,
    foil=None,
    sender: tuple[int, int] = (0, 0),
    receivers: list[tuple[int, int]] | None = None,
    via: str = "q",
    pos: int = -1,
) -> dict[str, Any]:
    """Patch the corrupted output of ``sender`` head only along its direct paths into the
    ``via`` input (q, k or v) of the ``receivers`` heads; every other head and MLP is frozen to
    its clean value while the receivers' inputs are computed. ``receivers=None``: the direct path
    to the logits. Returns the patched logit difference and the normalized effect."""
    import torch

    if via not in ("q", "k", "v"):
        raise RangeError(f"via must be q, k or v, not {via!r}")
    ls, hs = model.check_layer(sender[0]), model.check_head(sender[1])
    p, bad = _pair(model, clean, corrupted, target, foil, pos)
    L = model.arch.n_layers
    z_names = [f"blocks.{layer}.attn.hook_z" for layer in range(L)]
    mlp_names = [n for n in (f"blocks.{layer}.hook_mlp_out" for layer in range(L)) if model.has_hook(n)]
    c, k, clean_cache, bad_cache = _baselines(model, p, bad, z_names + mlp_names)
    _check_norm(c, k)

    def freeze(z, hook):
        layer = int(hook.name.split(".")[1])
        out = clean_cache[hook.name].clone()
        if layer == ls:
            out[:, :, hs] = bad_cache[hook.name][:, :, hs]
        return out

    hooks = [(n, freeze) for n in z_names] + [(n, lambda a, hook: clean_cache[hook.name]) for n in mlp_names]
    if receivers is None:  # direct path to the logits: the sender's change reaches them untouched
        with torch.no_grad():
            logits = model.run_with_hooks(p.tokens, fwd_hooks=hooks)
    else:
        recv = [(model.check_layer(lr), model.check_head(hr)) for lr, hr in receivers]
        if any(lr <= ls for lr, _ in recv):
            raise RangeError("receivers must sit in layers after the sender")
        in_names = sorted({f"blocks.{lr}.attn.hook_{via}" for lr, _ in recv})
        with torch.no_grad():
            mixed = _run_cache_with_hooks(model, p.tokens, in_names, hooks)
        n_heads = model.arch.n_heads

        def put(x, hook):
            layer = int(hook.name.split(".")[1])
            for lr, hr in recv:
                if lr == layer:
                    idx = hr * x.shape[2] // n_heads  # grouped-query k/v: the kv head of hr
                    x[:, :, idx] = mixed[hook.name][:, :, idx]
            return x

        with torch.no_grad():
            logits = model.run_with_hooks(p.tokens, fwd_hooks=[(n, put) for n in in_names])
    patched = float(logit_diff(logits, p).mean())
    return {
        "sender": list(sender),
        "receivers": None if receivers is None else [list(r) for r in receivers],
        "via": via,
        "clean": c,
        "corrupted": k,
        "patched": patched,
        "effect": float(_effect(torch.tensor(patched), c, k)),
    }


def _run_cache_with_hooks(model, tokens, names, hooks):
    """run_with_cache under extra forward hooks (a cache of the hooked run)."""
    store: dict[str, Any] = {}

    def save(x, hook):
        store[hook.name] = x.detach().clone()
        return x

    with model.hooks(fwd_hooks=list(hooks)):
        model.run_with_hooks(tokens, fwd_hooks=[(n, save) for n in names])
    return store
