"""Tiny random Hugging Face models of every supported family, built offline with transformers
(config -> random weights -> ``save_pretrained``), with a word-level tokenizer. Norm weights and biases are
randomised too, and sequences run longer than the sliding windows, so every family's pieces are exercised."""

from __future__ import annotations

from pathlib import Path

WORDS = ["[UNK]", "<s>", "The", "capital", "of", "France", "is", "Paris", "London", "Rome"] + \
    [f"w{i}" for i in range(54)]
IDS = [1, 2, 3, 4, 5, 6, 11, 12, 13, 14, 15, 16]  # <s> The capital of France is w1 .. w6 (longer than windows)
TARGET, FOIL = 7, 8  # Paris, London


def configs() -> dict:
    import transformers as T

    V = len(WORDS)
    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                 max_position_embeddings=64, vocab_size=V)
    ids = dict(pad_token_id=0, bos_token_id=1, eos_token_id=0)
    return {
        "gpt2": T.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64, vocab_size=V, bos_token_id=1,
                             eos_token_id=0),
        "gpt_neox": T.GPTNeoXConfig(**small, rotary_pct=0.25, use_parallel_residual=True, **ids),
        "llama": T.LlamaConfig(**small, num_key_value_heads=2, **ids),
        "mistral": T.MistralConfig(**small, num_key_value_heads=2, sliding_window=None, **ids),
        "qwen2": T.Qwen2Config(**small, num_key_value_heads=2, **ids),
        "qwen3": T.Qwen3Config(**small, num_key_value_heads=2, head_dim=8, **ids),
        # small caps so the soft-caps' slopes are far from 1 and the test sees them
        "gemma2": T.Gemma2Config(**small, num_key_value_heads=2, head_dim=8, sliding_window=4,
                                 query_pre_attn_scalar=8, attn_logit_softcapping=0.5,
                                 final_logit_softcapping=0.5, **ids),
        "gemma3": T.Gemma3TextConfig(**{**small, "num_hidden_layers": 3}, num_key_value_heads=1, head_dim=8,
                                     sliding_window=4, query_pre_attn_scalar=8, sliding_window_pattern=2, **ids),
        "phi3": T.Phi3Config(**small, num_key_value_heads=4, **ids),
        "olmo2": T.Olmo2Config(**small, **ids),
    }


def save_family(path: str | Path, family: str, seed: int = 0) -> Path:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    path = Path(path)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(configs()[family])
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:  # norm weights and biases: not their trivial init
                p.add_(0.3 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.3)
    model.save_pretrained(path)
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", bos_token="<s>").save_pretrained(path)
    return path
