"""The LLM families the workbench runs every engine on, and their TransformerLens configs.

One table: a Hugging Face architecture name -> the family's label and how its HookedTransformer config
is built from the model's own ``config.json``. TransformerLens 3.9 builds most configs from the HF config
itself; for Gemma 2, Gemma 3 and OLMo-2 it only knows the official checkpoints by name (its table is
keyed on "google/gemma-3-270m", ...), so a local or hub copy under any other name, or a tiny random
config, gets its config built here from the HF fields, with the same keys TransformerLens uses.

Nothing here imports torch or transformers at import time.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import ModelFileError


@dataclass(frozen=True)
class Family:
    label: str
    architecture: str
    # hf config dict -> TransformerLens config dict; None: TransformerLens builds it from the HF config
    tl_config: Callable[[dict[str, Any]], dict[str, Any]] | None = None


def _rope_theta(hf: dict[str, Any], layer_type: str | None = None, default: float = 10000.0) -> float:
    """rope_theta from a transformers 5 ``rope_parameters`` (flat, or one entry per layer type) or the
    older top-level field."""
    params = hf.get("rope_parameters") or {}
    if layer_type and isinstance(params.get(layer_type), dict):
        params = params[layer_type]
    for source in (params, hf):
        if isinstance(source, dict) and source.get("rope_theta") is not None:
            return float(source["rope_theta"])
    return default


def _kv_heads(hf: dict[str, Any]) -> int | None:
    kv = hf.get("num_key_value_heads")
    return None if kv in (None, hf["num_attention_heads"]) else int(kv)


def _attn_types(hf: dict[str, Any]) -> list[str] | None:
    types = hf.get("layer_types")
    if not types:
        return None
    return ["local" if t == "sliding_attention" else "global" for t in types]


def _gemma(hf: dict[str, Any], third: bool) -> dict[str, Any]:
    d_head = int(hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"])
    attn_types = _attn_types(hf)
    window = hf.get("sliding_window")
    cfg: dict[str, Any] = {
        "d_model": hf["hidden_size"], "d_head": d_head, "n_heads": hf["num_attention_heads"],
        "n_key_value_heads": hf.get("num_key_value_heads") or hf["num_attention_heads"],
        "d_mlp": hf["intermediate_size"], "n_layers": hf["num_hidden_layers"],
        "n_ctx": hf.get("max_position_embeddings", 8192), "eps": hf.get("rms_norm_eps", 1e-6),
        "d_vocab": hf["vocab_size"], "act_fn": hf.get("hidden_activation") or hf.get("hidden_act", "gelu_pytorch_tanh"),
        "initializer_range": hf.get("initializer_range", 0.02), "normalization_type": "RMS",
        "positional_embedding_type": "rotary", "rotary_dim": d_head, "use_attn_scale": True,
        "attn_scale": float(hf.get("query_pre_attn_scalar") or d_head) ** 0.5,
        "gated_mlp": True, "final_rms": True, "use_normalization_before_and_after": True,
        "original_architecture": "Gemma3ForCausalLM" if third else "Gemma2ForCausalLM",
    }
    if window and attn_types and "local" in attn_types:
        cfg.update(window_size=int(window), use_local_attn=True, attn_types=attn_types)
    if third:
        cfg.update(use_qk_norm=True, rotary_base=_rope_theta(hf, "full_attention", 1e6),
                   rotary_base_local=_rope_theta(hf, "sliding_attention", hf.get("rope_local_base_freq", 1e4)))
    else:
        cfg["rotary_base"] = _rope_theta(hf)
    for hf_key, tl_key in (("attn_logit_softcapping", "attn_scores_soft_cap"),
                           ("final_logit_softcapping", "output_logits_soft_cap")):
        if hf.get(hf_key):
            cfg[tl_key] = float(hf[hf_key])
    return cfg


def _olmo2(hf: dict[str, Any]) -> dict[str, Any]:
    d_head = hf["hidden_size"] // hf["num_attention_heads"]
    return {
        "d_model": hf["hidden_size"], "d_head": d_head, "n_heads": hf["num_attention_heads"],
        "n_key_value_heads": _kv_heads(hf), "d_mlp": hf["intermediate_size"],
        "n_layers": hf["num_hidden_layers"], "n_ctx": hf.get("max_position_embeddings", 4096),
        "eps": hf.get("rms_norm_eps", 1e-6), "d_vocab": hf["vocab_size"], "act_fn": hf.get("hidden_act", "silu"),
        "initializer_range": hf.get("initializer_range", 0.02), "normalization_type": "RMS",
        "positional_embedding_type": "rotary", "rotary_dim": d_head, "rotary_base": _rope_theta(hf),
        "rotary_adjacent_pairs": False, "gated_mlp": True, "final_rms": True,
        "attn_types": ["global"] * hf["num_hidden_layers"], "original_architecture": "Olmo2ForCausalLM",
    }


FAMILIES: dict[str, Family] = {f.architecture: f for f in (
    Family("GPT-2", "GPT2LMHeadModel"),
    Family("GPT-NeoX / Pythia", "GPTNeoXForCausalLM"),
    Family("Llama", "LlamaForCausalLM"),
    Family("Mistral", "MistralForCausalLM"),
    Family("Qwen2 / Qwen2.5", "Qwen2ForCausalLM"),
    Family("Qwen3", "Qwen3ForCausalLM"),
    Family("Gemma 2", "Gemma2ForCausalLM", lambda hf: _gemma(hf, third=False)),
    Family("Gemma 3", "Gemma3ForCausalLM", lambda hf: _gemma(hf, third=True)),
    Family("Phi-3", "Phi3ForCausalLM"),
    Family("OLMo-2", "Olmo2ForCausalLM", _olmo2),
)}


def supported_line() -> str:
    return ", ".join(f"{f.label} ({f.architecture})" for f in FAMILIES.values())


def family_of(config: dict[str, Any], where: str) -> Family:
    """The family of an HF config; ModelFileError naming the supported families otherwise."""
    archs = config.get("architectures") or []
    arch = archs[0] if isinstance(archs, list) and archs else None
    if arch not in FAMILIES:
        raise ModelFileError(f"{where}: architecture {arch or config.get('model_type') or 'unknown'} is not "
                             f"supported; supported families: {supported_line()}")
    return FAMILIES[arch]


def tl_config(path: Path) -> dict[str, Any]:
    """TransformerLens config dict for the HF model directory ``path``."""
    config = json.loads((path / "config.json").read_text())
    family = family_of(config, str(path))
    if family.tl_config is not None:
        try:
            return family.tl_config(config)
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFileError(f"{path}/config.json: cannot read {family.label} config ({exc})") from None
    return _tl_generic(config)


def _tl_generic(config: dict[str, Any]) -> dict[str, Any]:
    """TransformerLens' own conversion, from a neutral folder name: it picks some families by substrings of
    the path (a folder called 'llama-...' or 'gemma-...' would skip reading config.json)."""
    import logging
    import warnings

    from transformer_lens.loading_from_pretrained import convert_hf_model_config

    if config.get("model_type") == "gpt2":  # TransformerLens reads n_ctx, newer configs omit it
        config.setdefault("n_ctx", config.get("n_positions", 1024))
    with tempfile.TemporaryDirectory(prefix="wbcfg-") as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (Path(tmp) / "config.json").write_text(json.dumps(config))
        level = logging.root.manager.disable
        logging.disable(logging.WARNING)
        try:
            cfg = convert_hf_model_config(tmp)
        finally:
            logging.disable(level)
    cfg.pop("tokenizer_name", None)
    cfg.pop("trust_remote_code", None)
    return cfg
