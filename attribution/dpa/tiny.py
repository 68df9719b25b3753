"""Tiny random models for DPA's tests and quick checks (seconds to build, no downloads).

- ``save_tiny_llama(path)``: a Hugging Face Llama directory (SwiGLU, RMSNorm, RoPE, grouped-query
  attention) with a word-level tokenizer, loadable with ``workbench.load(str(path))``.
- ``tiny_gpt2()``: a TransformerLens GPT-2-style model (LayerNorm with biases, GELU or ReLU MLP,
  learned positions) over a symbol vocabulary, wrapped in a HookedModel.

Norm weights and biases are randomised too, so gamma, beta and every bias term are exercised.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.models.hooked import HookedModel, hooked_transformer
from core.models.tokens import SymbolTokenizer

WORDS = ["[UNK]", "<s>", "The", "capital", "of", "France", "is", "Paris", "London", "Rome", "a", "b", "c",
         "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p"]


def save_tiny_llama(path: str | Path, seed: int = 0, layers: int = 2) -> Path:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path = Path(path)
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", bos_token="<s>")
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=len(WORDS), max_position_embeddings=64,
                      tie_word_embeddings=False, rms_norm_eps=1e-6)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(1.0 + 0.3 * torch.randn_like(param))
            else:
                param.normal_(0.0, 0.3)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def tiny_gpt2(seed: int = 0, act_fn: str = "gelu_new", layers: int = 2, normalization: str = "LN") -> Any:
    import torch
    from transformer_lens import HookedTransformerConfig

    vocab = WORDS[2:]
    cfg = HookedTransformerConfig(n_layers=layers, d_model=32, n_heads=4, d_head=8, d_mlp=64,
                                  d_vocab=len(vocab), n_ctx=32, act_fn=act_fn,
                                  normalization_type=normalization, positional_embedding_type="standard",
                                  seed=seed, device="cpu")
    model = hooked_transformer(cfg, move_to_device=False)
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".w") and "ln" in name:
                param.copy_(1.0 + 0.3 * torch.randn_like(param))
            else:
                param.normal_(0.0, 0.3)
    model.eval()
    for param in model.parameters():
        param.requires_grad_(False)
    return HookedModel(model, SymbolTokenizer(vocab), name=f"tiny-gpt2-{act_fn}", kind="toy")
