"""The English corpus (data/corpus/english.jsonl.gz, built by scripts/build_english_corpus.py).

About 2.4 million smollm2 tokens of natural English from Debian's package registry: the Debian
Administrator's Handbook, the prose of the Python documentation, fortune-mod's quotations, The
Devil's Dictionary and a slice of GCIDE. Each document is a ~350-word chunk; 5% of the chunks
(by a hash of their text) are the held-out split, used for SAE evaluation, dashboards and lens KL.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from core.errors import DatasetError
from core.models.zoo import DATA_DIR

SPLITS = ("train", "heldout")


def english_path() -> Path:
    return DATA_DIR / "corpus" / "english.jsonl.gz"


def english_texts(split: str = "train", path: Path | None = None) -> list[str]:
    """The corpus documents of one split, in file order."""
    if split not in SPLITS:
        raise DatasetError(f"unknown corpus split {split!r}: {', '.join(SPLITS)}")
    path = path or english_path()
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as e:
        raise DatasetError(f"cannot read the English corpus {path}: {e}") from None
    return [r["text"] for r in rows if r.get("split") == split]
