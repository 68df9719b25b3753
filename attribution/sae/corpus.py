"""An offline text corpus for activations: no dataset hub is reachable, so the text comes from
documentation shipped inside installed packages (package READMEs in ``*.dist-info/METADATA``,
``.md``/``.rst``/``.txt`` files, module and function docstrings) and, optionally, the model's own
samples. Every document records where it came from; the build is deterministic for a given
environment (files are visited in sorted order)."""

from __future__ import annotations

import ast
import gzip
import hashlib
import json
import re
import sysconfig
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from core.errors import DatasetError

DOC_SUFFIXES = (".md", ".rst", ".txt")
# Licence texts are near-duplicates of each other and would dominate the feature statistics.
SKIP_NAMES = re.compile(r"(LICEN[CS]E|COPYING|AUTHORS|RECORD|entry_points|top_level|WHEEL|requires)", re.I)


@dataclass
class Document:
    text: str
    source: (
        str  # e.g. "pkg-docs:numpy/doc/README.md", "docstring:torch/nn/modules/linear.py", "model:smollm2"
    )
    kind: str  # metadata | docs | docstring | model-sample


def _prose(text: str, min_chars: int) -> str | None:
    text = re.sub(r"\n{3,}", "\n\n", text.replace("\r\n", "\n")).strip()
    if len(text) < min_chars:
        return None
    letters = sum(c.isalpha() or c == " " for c in text)
    return text if letters / len(text) > 0.7 else None  # mostly words, not tables or code


def _metadata_description(path: Path) -> str:
    raw = path.read_text(errors="ignore")
    head, _, body = raw.partition("\n\n")  # RFC 822 headers, then the long description
    return body


def _docstrings(path: Path) -> Iterator[str]:
    try:
        tree = ast.parse(path.read_text(errors="ignore"))
    except (SyntaxError, ValueError, RecursionError):
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                yield doc


def iter_package_docs(root: Path, min_chars: int = 200) -> Iterator[Document]:
    """Documents from one site-packages tree, sorted by path so builds are reproducible."""
    for path in sorted(root.glob("*.dist-info/METADATA")):
        text = _prose(_metadata_description(path), min_chars)
        if text:
            yield Document(text, f"metadata:{path.relative_to(root)}", "metadata")
    for path in sorted(p for p in root.rglob("*") if p.suffix in DOC_SUFFIXES and p.is_file()):
        if SKIP_NAMES.search(path.name) or ".dist-info" in str(path) or path.stat().st_size > 2_000_000:
            continue
        text = _prose(path.read_text(errors="ignore"), min_chars)
        if text:
            yield Document(text, f"docs:{path.relative_to(root)}", "docs")
    for path in sorted(root.rglob("*.py")):
        if "/tests/" in str(path) or path.stat().st_size > 1_000_000:
            continue
        for doc in _docstrings(path):
            text = _prose(doc, min_chars)
            if text:
                yield Document(text, f"docstring:{path.relative_to(root)}", "docstring")


def model_samples(model: Any, n: int, max_new_tokens: int = 64, seed: int = 0) -> list[Document]:
    """Sampled continuations of short generic openings (temperature 1), tagged with the model."""
    import torch

    openings = [
        "The",
        "In this tutorial",
        "Once upon a time",
        "The function",
        "Today",
        "A",
        "We",
        "This library",
        "My favourite",
        "It is",
    ]
    torch.manual_seed(seed)
    docs = []
    for i in range(n):
        prompt = openings[i % len(openings)]
        tokens = model.to_tokens(prompt)
        with torch.no_grad():
            out = model.sample(tokens, max_new_tokens=max_new_tokens, temperature=1.0)
        docs.append(
            Document(model.decode(out[0].tolist()), f"model:{model.name}:seed{seed}:{i}", "model-sample")
        )
    return docs


def build_corpus(
    out: Path,
    max_chars: int = 4_000_000,
    roots: list[Path] | None = None,
    samples: list[Document] | None = None,
    per_source_chars: int = 20_000,
) -> dict[str, Any]:
    """Write ``corpus.jsonl.gz`` ({"text","source","kind"} a line) and ``sources.json``.

    Sources are interleaved by kind so a prefix of the corpus is already a mix of kinds.
    """
    roots = roots or [Path(sysconfig.get_paths()["purelib"])]
    seen: set[str] = set()
    by_kind: dict[str, list[Document]] = {}
    for doc in samples or []:
        by_kind.setdefault(doc.kind, []).append(doc)
    for root in roots:
        for doc in iter_package_docs(root):
            digest = hashlib.sha1(doc.text.encode()).hexdigest()
            if digest in seen:
                continue
            seen.add(digest)
            doc.text = doc.text[:per_source_chars]
            by_kind.setdefault(doc.kind, []).append(doc)
    if not by_kind:
        raise DatasetError("no documentation text found under " + ", ".join(map(str, roots)))
    ordered, total = [], 0
    queues = [list(v) for _, v in sorted(by_kind.items())]
    while total < max_chars and any(queues):
        for q in queues:
            if q and total < max_chars:
                doc = q.pop(0)
                ordered.append(doc)
                total += len(doc.text)
    out.mkdir(parents=True, exist_ok=True)
    with gzip.open(out / "corpus.jsonl.gz", "wt", encoding="utf-8") as fh:
        for doc in ordered:
            fh.write(json.dumps(asdict(doc)) + "\n")
    counts: dict[str, int] = {}
    for doc in ordered:
        counts[doc.kind] = counts.get(doc.kind, 0) + 1
    summary = {
        "documents": len(ordered),
        "chars": total,
        "by_kind": counts,
        "roots": [str(r) for r in roots],
        "note": "text from documentation shipped inside installed packages and model samples; "
        "each line's 'source' names the file it came from",
    }
    (out / "sources.json").write_text(
        json.dumps({**summary, "sources": sorted({d.source for d in ordered})}, indent=1)
    )
    return summary


def load_corpus(path: Path) -> list[Document]:
    file = path / "corpus.jsonl.gz" if path.is_dir() else path
    if not file.exists():
        raise DatasetError(f"no corpus at {file}: build one with `workbench sae corpus`")
    with gzip.open(file, "rt", encoding="utf-8") as fh:
        return [Document(**json.loads(line)) for line in fh if line.strip()]
