"""The bridge backend on the families beyond Llama, Qwen 3 and Gemma 3 (tests/test_backend_matrix.py has those): every
engine of test_backend_matrix's ENGINES, on a tiny random model of each family (norm gains random too), gives
TransformerLens' numbers on the same weights (within 1e-4 of their own scale; an all-zero result fails) or refuses
in one BackendError line naming the bridge backend and why. Where each family refuses:

- Phi-3 (fused qkv and gate/up projections): nothing (10 engines crashed with an untyped AttributeError, its MLP's
  activation being HF's ``activation_fn``, and DPA's rotated q/k were never cached: core/models/bridge_rotary.py).
- GPT-2, GPT-NeoX, Gemma 2: the ten circuit methods (the bridge splits head inputs for Llama-style and Gemma 3
  attention only). GPT-2's residual patch at layer 0 was lost (learned positions), now TransformerLens' numbers.
- OLMo-2 (norms only after each sublayer, which the bridge presents as norms before them): the engines that read
  those norms (DPA and feature attribution over it, dpa_path, IFR, DLA, circuits).

The activation patches (resid, attn, mlp, mlps, heads) are compared on the logit differences their normalised effect
is made of (patched, clean, corrupted): on OLMo-2 the clean and corrupted prompts are 0.005 apart, and float32
rounding of the logits (9e-8, one ulp) divided by that gap put the mlp effect 1.3e-4 of its scale off
TransformerLens' (3e-5 of 0.236) although every patched logit difference agrees to 9e-8; test_olmo2_mlp_patch
checks exactly that."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from test_backend_matrix import CIRCUIT_METHODS, CLEAN, CORRUPTED, ENGINES, _tiny_with_random_gains, close

import workbench as wb
from core.errors import BackendError

_SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=49152,
              max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=0)


def _config(family: str):
    import transformers as T

    configs = {
        "phi3": (lambda: T.Phi3Config(**_SMALL, num_key_value_heads=4, tie_word_embeddings=False), "Phi3ForCausalLM"),
        # a wider init than GPT-2's 0.02, so that the prompts' logit differences are not all near zero
        "gpt2": (lambda: T.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=49152, n_positions=128,
                                      initializer_range=0.2), "GPT2LMHeadModel"),
        "gpt_neox": (lambda: T.GPTNeoXConfig(**_SMALL, rotary_pct=0.25, use_parallel_residual=True,
                                             tie_word_embeddings=False), "GPTNeoXForCausalLM"),
        "gemma2": (lambda: T.Gemma2Config(**_SMALL, num_key_value_heads=2, head_dim=8, sliding_window=4,
                                          query_pre_attn_scalar=8, attn_logit_softcapping=0.5,
                                          final_logit_softcapping=0.5), "Gemma2ForCausalLM"),
        "olmo2": (lambda: T.Olmo2Config(**_SMALL, num_key_value_heads=4, tie_word_embeddings=False),
                  "Olmo2ForCausalLM"),
    }
    make, arch = configs[family]
    cfg = make()
    cfg.architectures = [arch]
    return cfg


_SPLIT = "per-head q/k/v inputs"
_POST = "norms after each sublayer"
_CIRCUITS = [f"circuit/{m}" for m in CIRCUIT_METHODS]
# family -> {engine: what its refusal line says}; every other engine gives TransformerLens' numbers
REFUSED: dict[str, dict[str, str]] = {
    "phi3": {},
    "gpt2": dict.fromkeys(_CIRCUITS, _SPLIT),
    "gpt_neox": dict.fromkeys(_CIRCUITS, _SPLIT),
    "gemma2": dict.fromkeys(_CIRCUITS, _SPLIT),
    "olmo2": dict.fromkeys([*(f"dpa/{lv}" for lv in ("token", "head", "qk", "neuron")), "feature attribution",
                            "dpa_path/token", "ifr/head", "dla", *_CIRCUITS], _POST),
}
FAMILIES = list(REFUSED)


def _patch_logits(site: str) -> Callable:
    """The logit differences a patch's effect is made of: every patched one, then the clean and corrupted ones."""

    def run(m):
        res = wb.patch(m, CLEAN, CORRUPTED, " Mary", " John", site=site)
        return torch.cat([torch.as_tensor(res.patched).flatten().float(), torch.tensor([res.clean, res.corrupted])])

    return run


CHECKS: dict[str, Callable] = {**ENGINES, **{f"patch ({s})": _patch_logits(s)
                                             for s in ("resid", "attn", "mlp", "mlps", "heads")}}


@pytest.fixture(scope="module")
def pairs(tmp_path_factory, one_thread):
    """family -> (TransformerLens, bridge) over one tiny random model, made on first use."""
    made: dict[str, tuple] = {}

    def get(family: str) -> tuple:
        if family not in made:
            path = _tiny_with_random_gains(tmp_path_factory.mktemp(f"tiny-{family}"), _config(family))
            made[family] = (wb.load(str(path)), wb.load(str(path), backend="bridge"))
        return made[family]

    return get


@pytest.mark.parametrize("engine", list(CHECKS))
@pytest.mark.parametrize("family", FAMILIES)
def test_engine_on_bridge_family(pairs, family, engine):
    tl, bridge = pairs(family)
    why = REFUSED[family].get(engine)
    if why is not None:
        with pytest.raises(BackendError) as err:
            CHECKS[engine](bridge)
        msg = str(err.value)
        assert "\n" not in msg and "the bridge backend" in msg and why in msg, msg
        return
    close(torch.as_tensor(CHECKS[engine](bridge)).float(), torch.as_tensor(CHECKS[engine](tl)).float())


def test_counts():
    """Per family: engines compared with TransformerLens' numbers, and refusals (README's bridge paragraph)."""
    counts = {f: (len(CHECKS) - len(REFUSED[f]), len(REFUSED[f])) for f in FAMILIES}
    assert counts == {"phi3": (39, 0), "gpt2": (29, 10), "gpt_neox": (29, 10), "gemma2": (29, 10),
                      "olmo2": (21, 18)}
    assert all(e in CHECKS for f in FAMILIES for e in REFUSED[f])


def test_olmo2_mlp_patch(pairs):
    """OLMo-2's mlp patch on the bridge: what it patches (hook_mlp_out, the post-norm's output as TransformerLens
    has it) and every patched logit difference agree with TransformerLens to float32 rounding; the normalised
    effect differs only by that rounding over the clean-corrupted gap (a bound, not a tolerance picked to pass)."""
    from circuits.tools.patching import patch_residual

    tl, bridge = pairs("olmo2")
    _, ref = tl.run_with_cache(CLEAN, names_filter=["blocks.0.hook_mlp_out", "blocks.1.hook_mlp_out"])
    _, got = bridge.run_with_cache(CLEAN, names_filter=["blocks.0.hook_mlp_out", "blocks.1.hook_mlp_out"])
    for name in ("blocks.0.hook_mlp_out", "blocks.1.hook_mlp_out"):
        close(got[name].float(), ref[name].float())
    a = patch_residual(tl, CLEAN, CORRUPTED, " Mary", " John", site="mlp_out")
    b = patch_residual(bridge, CLEAN, CORRUPTED, " Mary", " John", site="mlp_out")
    ulp = 4 * torch.finfo(torch.float32).eps * max(abs(a.clean), abs(a.corrupted), float(a.patched.abs().max()))
    assert float((a.patched - b.patched).abs().max()) <= ulp
    assert abs(a.clean - b.clean) <= ulp and abs(a.corrupted - b.corrupted) <= ulp
    gap = abs(a.clean - a.corrupted)
    bound = 3 * ulp / gap * (1 + float(a.effect.abs().max()))  # d((c - p) / (c - k)) from p, c, k each off by ulp
    assert float((a.effect - b.effect).abs().max()) <= bound


def test_phi3_bridge_rotates_like_its_own_attention(pairs):
    """Phi-3's bridged attention (fused qkv) never fires hook_rot_q/k; the workbench's rotated q/k are those the
    attention uses: its pattern, recomputed from them, is the bridge's own hook_pattern."""
    _, bridge = pairs("phi3")
    names = ["blocks.1.attn.hook_rot_q", "blocks.1.attn.hook_rot_k", "blocks.1.attn.hook_pattern"]
    _, cache = bridge.run_with_cache(CLEAN, names_filter=names)
    q, k = cache[names[0]].transpose(1, 2), cache[names[1]].transpose(1, 2)  # [batch, head, pos, d_head]
    scores = q @ k.transpose(-1, -2) / bridge.attn_scale(1)
    mask = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)
    close(scores.masked_fill(mask, float("-inf")).softmax(-1), cache[names[2]].float())
    assert sorted(cache.keys()) == sorted(names)  # hook_q / hook_k were read, not left in the cache


def test_rot_hook_sees_and_edits_the_rotated_value(pairs):
    """A hook on Phi-3's hook_rot_k (moved to hook_k on the bridge) sees TransformerLens' rotated keys, and what it
    returns is what the attention uses: TransformerLens' logits under the same edit."""
    tl, bridge = pairs("phi3")
    seen: dict[str, torch.Tensor] = {}

    def bump(x, hook):  # one feature raised: an edit that does not commute with the rotation
        seen[hook.name] = x.detach().clone()
        out = x.clone()
        out[..., 0] += 1.0
        return out

    hooks = [("blocks.1.attn.hook_rot_k", bump)]
    ref = tl.run_with_hooks(CLEAN, fwd_hooks=hooks)
    ref_k = seen.pop("blocks.1.attn.hook_rot_k")
    got = bridge.run_with_hooks(CLEAN, fwd_hooks=hooks)
    close(seen["blocks.1.attn.hook_rot_k"].float(), ref_k.float())
    close(got.float(), ref.float())

