"""Labelled text sets and pooled activations at any hook.

A dataset is JSONL, one ``{"text": str, "label": str}`` a line, optionally ``"word"``: the word
that carries the label (used by ``pooling="marked"`` and as the word type of the control task).
Pooling reduces an example's [pos, d] activations to one vector: the last token, the mean over
tokens, or the token that ends the marked word.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.checks import JSONTooDeep, loads_bounded
from core.errors import DatasetError, RangeError
from core.options import parse_layer_spec
from core.prompt_files import check_input_file

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float

POOLINGS = ("last", "mean", "marked")


@dataclass
class LabeledSet:
    texts: list[str]
    labels: list[str]
    words: list[str] = field(default_factory=list)  # one word type per example (control task)
    marked: list[str | None] = field(default_factory=list)  # the "word" field, if given

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def classes(self) -> list[str]:
        return sorted(set(self.labels))

    def label_ids(self):
        import numpy as np

        index = {c: i for i, c in enumerate(self.classes)}
        return np.array([index[y] for y in self.labels])


def word_type(text: str, word: str | None) -> str:
    """The example's word type: its marked word, else its last word without punctuation."""
    if word:
        return word.lower()
    words = re.findall(r"[\w']+", text.lower())
    return words[-1] if words else text.strip().lower()


def load_dataset(path: str | Path, min_per_class: int = 2) -> LabeledSet:
    """Read and check a labelled JSONL set: >= 2 classes, each with >= ``min_per_class`` examples."""
    path = check_input_file(path, "dataset", DatasetError)  # missing, a directory, a pipe or a device: refused
    texts, labels, marked = [], [], []
    # JSONL lines end at "\n" only (splitlines() also splits at U+2028/U+2029/U+0085 inside strings);
    # utf-8-sig drops a byte-order mark.
    for n, line in enumerate(path.read_text(encoding="utf-8-sig", errors="replace").split("\n"), 1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        try:
            row = loads_bounded(line)
        except JSONTooDeep as exc:
            raise DatasetError(f"{path.name} line {n} is {exc}; a line is one flat JSON object") from None
        except ValueError:
            raise DatasetError(f"{path.name} line {n} is not JSON") from None
        if not isinstance(row, dict) or not isinstance(row.get("text"), str) or "label" not in row:
            raise DatasetError(f'{path.name} line {n} needs {{"text": str, "label": str}}')
        if not row["text"].strip():
            raise DatasetError(f"{path.name} line {n} has an empty text")
        if not isinstance(row["label"], str) or not row["label"].strip():  # 1 and "1" would merge silently
            raise DatasetError(f"{path.name} line {n}: \"label\" must be a non-empty string (got {row['label']!r})")
        word = row.get("word")
        if word is not None and (not isinstance(word, str) or not word.strip()):
            raise DatasetError(f"{path.name} line {n}: \"word\" must be a non-empty string (got {word!r})")
        texts.append(row["text"])
        labels.append(str(row["label"]))
        marked.append(word)
    if not texts:
        raise DatasetError(f"dataset {path.name} is empty")
    counts = {c: labels.count(c) for c in set(labels)}
    if len(counts) < 2:
        raise DatasetError(f"dataset {path.name} has one class ({next(iter(counts))!r}); a probe needs two")
    few = {c: k for c, k in counts.items() if k < min_per_class}
    if few:
        raise DatasetError(f"dataset {path.name}: classes with fewer than {min_per_class} examples: {few}")
    return LabeledSet(texts, labels, [word_type(t, w) for t, w in zip(texts, marked, strict=False)], marked)


def dataset_rows(data: LabeledSet) -> list[dict[str, str]]:
    """The set as JSON rows ({"text", "label"} and "word" where marked): what load_dataset reads back."""
    rows = []
    for i, (text, label) in enumerate(zip(data.texts, data.labels, strict=True)):
        row = {"text": text, "label": label}
        if data.marked and data.marked[i]:
            row["word"] = data.marked[i]
        rows.append(row)
    return rows


def from_rows(rows: list[dict[str, Any]]) -> LabeledSet:
    """A LabeledSet from rows written by ``dataset_rows`` (already checked when first read)."""
    texts = [str(r["text"]) for r in rows]
    marked = [r.get("word") for r in rows]
    return LabeledSet(texts, [str(r["label"]) for r in rows],
                      [word_type(t, w) for t, w in zip(texts, marked, strict=True)], marked)


def resid_hooks(model: Any, layers: str | list[int] = "all") -> list[str]:
    n = model.arch.n_layers
    idx = list(range(n)) if layers == "all" else [model.check_layer(int(x)) for x in layers]
    return [f"blocks.{i}.hook_resid_post" for i in idx]


def parse_layers(spec: str, n_layers: int) -> list[int]:
    """'all', '3', '0,5,10' or '4-8' -> layer indices."""
    out = parse_layer_spec(spec)
    if out is None:
        return list(range(n_layers))
    for layer in out:
        if not 0 <= layer < n_layers:
            raise RangeError(
                f"layer {layer} out of range: the model has {n_layers} (valid 0..{n_layers - 1})"
            )
    return out


def check_pooling(data: LabeledSet, pooling: str, source: str = "the dataset") -> None:
    """DatasetError (one line) for an unknown pooling, or ``marked`` on a set whose examples do not all mark
    their "word" (an unmarked one would silently pool its last token while the run says "marked")."""
    if pooling not in POOLINGS:
        raise DatasetError(f"unknown pooling {pooling!r}: {', '.join(POOLINGS)}")
    if pooling == "marked":
        missing = [i for i, w in enumerate(data.marked or [None] * len(data.texts), 1) if not w]
        if missing:
            raise DatasetError(f"--pooling marked pools each example's \"word\", and {len(missing)} of the "
                               f"{len(data.texts)} examples in {source} have none (first: example {missing[0]}): add "
                               "\"word\" to every line, or use --pooling last or mean")


def marked_index(model: Any, text: str, word: str | None) -> int:
    """Position of the last token of the last occurrence of ``word`` (the last token if absent)."""
    n = model.to_tokens(text).shape[1]
    if not word:
        return n - 1
    at = text.lower().rfind(word.lower())
    if at < 0:
        raise DatasetError(f"marked word {word!r} does not occur in {text!r}")
    prefix = text[: at + len(word)]
    return min(model.to_tokens(prefix).shape[1], n) - 1


def pooled_activations(
    model: Any,
    data: LabeledSet,
    hooks: list[str],
    pooling: str = "last",
    batch_size: int = 16,
    on_step: Callable[[int], None] | None = None,
) -> dict[str, Float[torch.Tensor, "example _d"]]:
    """{hook: FloatTensor [example, d]} of pooled activations (per-head hooks flattened).
    ``on_step(k)`` after each batch of k examples (a job's progress)."""
    import torch

    check_pooling(data, pooling)
    for h in hooks:
        model.check_hook(h)
    toks = [model.to_tokens(t)[0] for t in data.texts]
    if pooling == "marked":
        where = [marked_index(model, t, w) for t, w in zip(data.texts, data.marked, strict=False)]
    else:
        where = [len(t) - 1 for t in toks]
    out: dict[str, list] = {h: [None] * len(toks) for h in hooks}
    order = sorted(range(len(toks)), key=lambda i: len(toks[i]))  # similar lengths share a batch
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        width = max(len(toks[i]) for i in idx)
        # right padding with each row's last token: a causal model never lets it reach earlier positions
        batch = torch.stack([torch.cat([toks[i], toks[i][-1:].repeat(width - len(toks[i]))]) for i in idx])
        with torch.no_grad():
            _, cache = model.run_with_cache(batch.to(model.device), names_filter=list(hooks))
        for h in hooks:
            a = cache[h].float()
            if a.dim() > 3:
                a = a.flatten(2)
            for row, i in enumerate(idx):
                if pooling == "mean":
                    out[h][i] = a[row, : len(toks[i])].mean(0).cpu()
                else:
                    out[h][i] = a[row, where[i]].cpu()
        if on_step is not None:
            on_step(len(idx))
    return {h: torch.stack(v) for h, v in out.items()}
