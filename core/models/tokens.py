"""Tokenization shared by every backend: prompt checks, single-token targets and foils."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.errors import PromptError, TokenError

if TYPE_CHECKING:
    import torch
    from jaxtyping import Int


class SymbolTokenizer:
    """A whitespace tokenizer over a fixed symbol vocabulary (the toy tasks' tokenizer).

    Prompts are symbols separated by spaces ("A B C B ="); targets are single symbols.
    """

    def __init__(self, vocab: list[str]) -> None:
        self.vocab = list(vocab)
        self.index = {s: i for i, s in enumerate(self.vocab)}

    def encode(self, text: str) -> list[int]:
        ids = []
        for sym in text.split():
            if sym not in self.index:
                raise PromptError(f"symbol {sym!r} is not in the model's vocabulary")
            ids.append(self.index[sym])
        return ids

    def decode_one(self, idx: int) -> str:
        return self.vocab[idx]

    def __len__(self) -> int:
        return len(self.vocab)


@dataclass
class Encoding:
    """A prompt ready for an engine: ids [1, S], their strings, target and foil ids.

    position: the position whose next-token prediction is explained (0..S-1); None means the last.
    Only methods declaring MethodSpec.position read it; attribute() cuts the prompt for the others.
    """

    tokens: Int[torch.Tensor, "1 pos"]
    str_tokens: list[str]
    target_id: int | None = None
    foil_id: int | None = None
    target: str | None = None
    foil: str | None = None
    position: int | None = None

    @property
    def seq_len(self) -> int:
        return int(self.tokens.shape[-1])

    @property
    def query(self) -> int:
        """The explained position as an index from the start (the last one when position is None)."""
        return self.seq_len - 1 if self.position is None else int(self.position)


def check_prompt(prompt: str, n_tokens: int, n_ctx: int) -> None:
    if n_tokens == 0:
        raise PromptError("empty prompt: give at least one token")
    if n_tokens > n_ctx:
        raise PromptError(f"prompt is {n_tokens} tokens, longer than the model's context of {n_ctx}")


def single_token(ids: list[int], text: str, role: str) -> int:
    if len(ids) != 1:
        raise TokenError(f"{role} {text!r} is {len(ids)} tokens, not one "
                         "(include the leading space, e.g. ' Paris')")
    return ids[0]


def tokenizer_adds_bos(tokenizer) -> bool:
    """Whether the tokenizer's own encoding starts with BOS (GPT-2's does not; Llama's and Gemma's do, and a
    tokenizer converted from a GGUF may say so only through its post-processor, not ``add_bos_token``)."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return False
    try:
        ids = tokenizer("a")["input_ids"]
    except Exception:  # a tokenizer that cannot encode plain text: fall back to what it declares
        return bool(getattr(tokenizer, "add_bos_token", False))
    return bool(ids) and ids[0] == bos
