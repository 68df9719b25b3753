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

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from circuits.tools.common import Prompts, as_tokens, frame, heatmap, logit_diff, prompts
from core.errors import PromptError, RangeError
from core.figures import save_figure

# |clean - corrupted| at or below this (relative to the logit differences' size, at least 1) leaves
# the normalized effect undefined: float32 rounding alone moves a logit difference by ~1e-6 of it.
NORM_TOL = 1e-5
MAX_ROWS = 64  # patched copies per forward: bounds memory on long prompts


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
        fig = heatmap(
            self.effect,
            self.axes,
            f"activation patching: {self.site} (logit difference clean {self.clean:.3f}, corrupted "
            f"{self.corrupted:.3f})",
            x_labels=lab.get(self.axes[-1]),
            y_labels=lab.get(self.axes[0]),
        )
        # the colour bar says what 1 means: the patch alone moves the logit difference all the way
        fig.update_traces(colorbar={"title": {"text": "effect<br>(1: the patch<br>alone gives the<br>corrupted "
                                                      "logit diff)", "side": "top"}})
        return fig

    def save_figure(self, path: Any) -> Any:
        """Save ``plot()`` as PNG, SVG, PDF, HTML or JSON, from the suffix (core.figures)."""
        return save_figure(self.plot(), path)


def _pair(model, clean, corrupted, target, foil, pos) -> tuple[Prompts, Any]:
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


def _metric_from(model, resid, layer: int, p: Prompts, hooks, copies: int):
    """``_metric`` for a forward that starts at ``layer`` from the clean residual stream ``resid``
    [batch, pos, d_model] (repeated ``copies`` times): a patch at layer l leaves layers before l as they
    were, so they are not run again (about half the cost of a layer scan)."""
    import torch

    x = resid.repeat(copies, *([1] * (resid.dim() - 1)))
    with torch.no_grad(), model.hooks(fwd_hooks=hooks):
        logits = model(x, start_at_layer=layer)
    rep = Prompts(p.tokens.repeat(copies, 1), p.target.repeat(copies),
                  None if p.foil is None else p.foil.repeat(copies), p.pos)
    return logit_diff(logits, rep).view(copies, p.batch).mean(1)


def _baselines(model, p: Prompts, bad, names, clean_names=()):
    """Clean and corrupted logit differences, and their caches: the clean run keeps ``names`` and
    ``clean_names``, the corrupted run ``names``."""
    import torch

    keep_clean = set(names) | set(clean_names)
    with torch.no_grad():
        clean_logits, clean_cache = model.run_with_cache(p.tokens, names_filter=keep_clean.__contains__)
        bad_logits, bad_cache = model.run_with_cache(bad, names_filter=set(names).__contains__)
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


def _chunks(items: list[int], rows_per_item: int, max_rows: int) -> list[list[int]]:
    """``items`` in groups whose copies (``rows_per_item`` rows each) fit one forward of ``max_rows``."""
    size = max(1, max_rows // max(rows_per_item, 1))
    return [items[i : i + size] for i in range(0, len(items), size)]


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
    on_step: Callable[[int, int], None] | None = None,
    max_rows: int = MAX_ROWS,
) -> PatchResult:
    """Effect of patching one site at each layer and position: [layer, position]. ``site`` is a residual
    point (``resid_pre``/``resid_mid``/``resid_post``) or a block's output (``attn_out``/``mlp_out``).

    Every position of one layer is patched in one batched forward (copies of the clean prompt stacked in
    the batch dimension, at most ``max_rows`` rows), started at that layer from the clean residual stream.
    ``on_step(done, total)`` is called after each forward."""
    import torch

    p, bad = _pair(model, clean, corrupted, target, foil, pos)
    layers = list(range(model.arch.n_layers)) if layers is None else [model.check_layer(x) for x in layers]
    seq = p.tokens.shape[1]
    positions = list(range(seq)) if positions is None else positions
    for q in positions:
        if not 0 <= q < seq:
            raise RangeError(f"position {q} out of range for {seq} tokens")
    names = [model.check_hook(f"blocks.{layer}.hook_{site}") for layer in layers]
    starts = [f"blocks.{layer}.hook_resid_pre" for layer in layers]
    c, k, clean_cache, bad_cache = _baselines(model, p, bad, set(names), set(starts))
    _check_norm(c, k)
    b = p.batch
    groups = _chunks(list(range(len(positions))), b, max_rows)
    total, done = len(layers) * len(groups), 0
    patched = torch.zeros(len(layers), len(positions))
    for i, (layer, name) in enumerate(zip(layers, names, strict=True)):
        src = bad_cache[name]
        for group in groups:
            cols = [positions[j] for j in group]

            def hook(act, hook, src=src, cols=cols):
                for j, q in enumerate(cols):
                    act[j * b : (j + 1) * b, q] = src[:, q]
                return act

            patched[i, group] = _metric_from(model, clean_cache[starts[i]], layer, p, [(name, hook)],
                                             len(group)).cpu()
            done += 1
            if on_step is not None:
                on_step(done, total)
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
    model, clean, corrupted, target, foil=None, pos: int = -1, position: int | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> PatchResult:
    """Effect of patching each head's output (hook_z) at all positions (or one): [layer, head]. One
    forward per layer (a copy per head), started at that layer from the clean residual stream."""
    import torch

    p, bad = _pair(model, clean, corrupted, target, foil, pos)
    L, H, b = model.arch.n_layers, model.arch.n_heads, p.batch
    if position is not None and not 0 <= position < p.tokens.shape[1]:
        raise RangeError(f"position {position} out of range for {p.tokens.shape[1]} tokens")
    names = [f"blocks.{layer}.attn.hook_z" for layer in range(L)]
    starts = [f"blocks.{layer}.hook_resid_pre" for layer in range(L)]
    c, k, clean_cache, bad_cache = _baselines(model, p, bad, set(names), set(starts))
    _check_norm(c, k)
    sl = slice(None) if position is None else slice(position, position + 1)
    patched = torch.zeros(L, H)
    for layer, name in enumerate(names):
        src = bad_cache[name]

        def hook(z, hook, src=src):
            for h in range(H):
                z[h * b : (h + 1) * b, sl, h] = src[:, sl, h]
            return z

        patched[layer] = _metric_from(model, clean_cache[starts[layer]], layer, p, [(name, hook)], H).cpu()
        if on_step is not None:
            on_step(layer + 1, L)
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

    from core.models.hooked import require

    require(model, "path patching")

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


# -- one entry point for the CLI, the notebook and the app ---------------------------------------------
SITES = {
    "resid": "residual stream before each layer, per layer and position",
    "attn": "attention output of each layer, per layer and position",
    "mlp": "MLP output of each layer, per layer and position",
    "heads": "each head's output (all positions), per layer and head",
    "mlps": "each layer's MLP output (all positions), per layer",
}


def patch(
    model,
    clean,
    corrupted,
    target,
    foil=None,
    site: str = "resid",
    pos: int = -1,
    on_step: Callable[[int, int], None] | None = None,
) -> PatchResult:
    """Activation patching of one kind of site (``SITES``) from ``corrupted`` into ``clean``."""
    if site not in SITES:
        raise RangeError(f"unknown site {site!r}: {', '.join(SITES)}")
    from core.models.hooked import require

    require(model, "patch (heads)" if site == "heads" else "patch (resid, attn, mlp, mlps)")
    if site == "heads":
        return patch_heads(model, clean, corrupted, target, foil, pos=pos, on_step=on_step)
    if site == "mlps":
        return patch_mlps(model, clean, corrupted, target, foil, pos=pos)
    if site == "mlp" and model.arch.mlp == "none":
        raise RangeError(f"{model.name} has no MLPs (attention-only)")
    hook = {"resid": "resid_pre", "attn": "attn_out", "mlp": "mlp_out"}[site]
    return patch_residual(model, clean, corrupted, target, foil, pos=pos, site=hook, on_step=on_step)


def swap_names(prompt: str, target: str, foil: str) -> str:
    """The prompt with every whole-word target name and foil name exchanged ("Mary"<->"John"): the
    IOI-style corrupted prompt."""
    import re

    a, b = target.strip(), foil.strip()
    if not a or not b or a == b:
        raise PromptError("swap names needs a target and a different foil (e.g. ' Mary' and ' John')")
    if not re.search(rf"\b({re.escape(a)}|{re.escape(b)})\b", prompt):
        raise PromptError(f"neither {a!r} nor {b!r} occurs in the prompt: nothing to swap")
    return re.sub(rf"\b({re.escape(a)}|{re.escape(b)})\b", lambda m: b if m.group(0) == a else a, prompt)
