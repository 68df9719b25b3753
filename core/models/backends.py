"""Backends behind HookedModel for Hugging Face models.

- ``transformer_lens`` (default): a ``HookedTransformer`` built from the local HF weights with
  TransformerLens' own config and weight conversion, norms left unfolded so engines see the
  model's real weights (gamma separate, as the DPA spec writes it).
- ``bridge``: TransformerLens ``TransformerBridge`` over the same HF module (same hook names).

Why ``HookedTransformer`` stays the default although TransformerLens 3.x deprecates it (measured on
smollm2-135m with scripts/compare_bridge.py, TransformerLens 3.9.0, compatibility mode): the bridge's
logits differ from HookedTransformer's by up to 4.5e-5 (the bar was 1e-5), and DPA, gradients and the
other engines do not run on it: its attention components have no ``attn_scale``, and its unembedding does
not take the final residual the way ``final_logits`` gives it (shape error). The circuits' split head inputs
do work on it. Until the engines are ported, core.models.hooked.hooked_transformer silences that one
deprecation warning where the model is built.
- ``nnsight``: nnsight's ``LanguageModel`` over the HF module, or over a hosted model on NDIF
  with ``remote=True`` (see core/models/remote.py).
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

from core.errors import BackendError
from core.models.arch import arch_from_cfg
from core.models.config import read_config
from core.models.families import family_of, tl_config
from core.models.files import load_hf_model
from core.models.hooked import HookedModel, hooked_transformer
from core.models.remote import NNsightModel
from core.models.tokens import tokenizer_adds_bos

BACKENDS = ("transformer_lens", "bridge", "nnsight")


def build_backend(path: Path, name: str, device: str = "cpu", backend: str = "transformer_lens",
                  n_ctx: int | None = None, prepend_bos: bool | None = None, remote: bool = False,
                  dtype: str = "float32"):
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    if backend not in BACKENDS:  # before anything loads
        raise BackendError(f"unknown backend {backend!r}: {', '.join(BACKENDS)}")
    if backend == "nnsight":
        hf, tokenizer = load_hf_model(path, device, dtype)
        return NNsightModel(hf, tokenizer, name=name, remote=remote, prepend_bos=prepend_bos)
    if backend in ("transformer_lens", "bridge"):  # refuse an unsupported family before loading anything
        family_of(read_config(path), str(path))
    # TransformerLens converts from float32 weights and casts once; the bridge wraps the HF module as loaded
    hf, tokenizer = load_hf_model(path, device, dtype if backend == "bridge" else "float32")
    if prepend_bos is None:
        prepend_bos = tokenizer_adds_bos(tokenizer)
    if backend == "bridge":
        return _bridge(path, hf, tokenizer, name, device, prepend_bos)
    return _hooked_transformer(path, hf, tokenizer, name, device, n_ctx, prepend_bos, dtype)


def load_dir(path: Path, name: str, device: str, backend: str, n_ctx: int | None = None,
             prepend_bos: bool | None = None, remote: bool = False, dtype: str = "float32") -> Any:
    """The HookedModel of a converted model directory, built by ``backend`` (core.models.backends)."""
    return build_backend(path, name, device=device, backend=backend, n_ctx=n_ctx,
                         prepend_bos=prepend_bos, remote=remote, dtype=dtype)


def attach_tokenizer(model, tokenizer) -> None:
    """What TransformerLens' ``set_tokenizer`` does, but with the tokenizer as loaded (it would load it again
    with ``add_bos_token=True``): ``cfg.tokenizer_prepends_bos`` from the tokenizer's own encoding, so its
    string paths (``model("text")``, ``to_tokens``, ``run_with_cache``, ``generate``) add BOS exactly when
    ``cfg.default_prepend_bos`` (the workbench's rule) says, as HookedModel.to_tokens does. A missing pad
    token becomes end-of-text, as there (its padding and attention masks need one); BOS and EOS are left
    as the model has them (generation stops at the model's own end-of-text)."""
    model.tokenizer = tokenizer
    model.cfg.tokenizer_prepends_bos = len(tokenizer.encode("")) > 0
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token


def _hooked_transformer(path, hf, tokenizer, name, device, n_ctx, prepend_bos, dtype="float32") -> HookedModel:
    import torch
    from transformer_lens.config import HookedTransformerConfig
    from transformer_lens.loading_from_pretrained import fill_missing_keys, get_pretrained_state_dict

    arch = (hf.config.architectures or [type(hf).__name__])[0]
    with warnings.catch_warnings(), _quiet():
        warnings.simplefilter("ignore")
        cfg_dict = tl_config(path)
        cfg_dict.update(init_weights=False, device=device, default_prepend_bos=prepend_bos,
                        n_ctx=min(n_ctx or cfg_dict["n_ctx"], cfg_dict["n_ctx"], 4096))
        cfg_dict.pop("quantization_method", None)
        cfg_dict["dtype"] = getattr(torch, dtype)
        cfg = HookedTransformerConfig(**cfg_dict)
        state = get_pretrained_state_dict(str(path), cfg, hf_model=hf)
        # The tokenizer is attached afterwards: TransformerLens' set_tokenizer loads it again by name (15 s
        # for Gemma's 262k vocabulary); the HookedModel adds BOS itself.
        model = hooked_transformer(cfg, tokenizer=None, move_to_device=False)
        tokenizer.padding_side = "right"
        attach_tokenizer(model, tokenizer)
        # One load_state_dict call: TransformerLens' own loader calls it once per key (8 s here).
        state = fill_missing_keys(model, state)
        # TransformerLens' Phi-3 conversion also emits zero LayerNorm biases its RMSNorm blocks do not have
        expected = set(model.state_dict())
        for key in [k for k in state if k not in expected]:
            if bool((state[key] == 0).all()):
                state.pop(key)
        # converted from the float32 HF weights, then cast once (norm weights too: TL computes scales in float32)
        state = {k: v.to(cfg.dtype) if v.is_floating_point() else v for k, v in state.items()}
        model.load_state_dict(state, strict=True, assign=True)
    model.to(device, print_details=False).eval()
    for p in model.parameters():
        p.requires_grad_(False)  # engines ask for gradients on activations, not weights
    return HookedModel(model, tokenizer, name=name, kind="llm", backend="transformer_lens",
                       prepend_bos=prepend_bos, info={"path": str(path), "architecture": arch})


def _bridge(path, hf, tokenizer, name, device, prepend_bos) -> HookedModel:
    from transformer_lens.model_bridge import TransformerBridge

    with warnings.catch_warnings(), _quiet():
        warnings.simplefilter("ignore")
        bridge = TransformerBridge.boot_transformers(str(path), hf_model=hf, tokenizer=tokenizer,
                                                     device=device)
        bridge.enable_compatibility_mode(no_processing=True)
    return HookedModel(bridge, tokenizer, name=name, kind="llm", backend="bridge",
                       prepend_bos=prepend_bos, arch=arch_from_cfg(bridge.cfg),
                       info={"path": str(path)})


class _quiet:
    """Silence TransformerLens' informational logging while it builds a model."""

    def __enter__(self):
        self.level = logging.root.manager.disable
        logging.disable(logging.WARNING)

    def __exit__(self, *exc):
        logging.disable(self.level)
