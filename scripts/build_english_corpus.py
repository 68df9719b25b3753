"""Build data/corpus/english.jsonl.gz: about 2.5 million tokens of natural English, offline.

The text comes from Debian's package registry (the only text registry this machine reaches
besides PyPI and npm), downloaded with ``apt-get download`` and unpacked with ``dpkg-deb -x``
(no installation, no root needed beyond apt's cache):

- ``debian-handbook``: The Debian Administrator's Handbook, a modern English book (HTML, en-US
  only; paragraphs kept, code listings dropped);
- ``python3.11-doc``: the prose of the Python documentation (reStructuredText sources; code
  blocks, directives and tables dropped, inline roles reduced to their text);
- ``fortunes``: fortune-mod's quotations, sayings and short humour (grouped a few dozen per document);
- ``dict-devil``: Ambrose Bierce's The Devil's Dictionary (1911);
- ``dict-gcide``: the Collaborative International Dictionary of English (Webster's 1913 and
  WordNet): each entry's headword, definitions and literary quotations as sentences, markup
  and etymologies removed; every seventh entry, up to 700k words.

Text is cut into chunks of about 350 words at paragraph boundaries (so that every chunk fills
the four 128-token windows the activation cache takes per document); 5% of the chunks, chosen
by a hash of their text, form the held-out split used for evaluation, dashboards and lens KL.

    python scripts/build_english_corpus.py [--work /tmp/english-debs] [--out data/corpus/english.jsonl.gz]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import html
import json
import re
import subprocess
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

PACKAGES = ("debian-handbook", "python3.11-doc", "fortunes", "dict-devil", "dict-gcide")
GCIDE_WORDS = 700_000  # the dictionary is 5 M words; a slice keeps it from dominating
CHUNK_WORDS = 350
HELDOUT_PERCENT = 5


def fetch(work: Path) -> dict[str, Path]:
    """Download and unpack each package into work/<name>; returns the unpacked roots."""
    work.mkdir(parents=True, exist_ok=True)
    roots = {}
    for name in PACKAGES:
        root = work / name
        if not root.exists():
            subprocess.run(["apt-get", "download", name], cwd=work, check=True, capture_output=True)
            deb = next(work.glob(f"{name}_*.deb"))
            subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
        roots[name] = root
    return roots


class _Paragraphs(HTMLParser):
    """Text of paragraphs outside <pre>; each paragraph whitespace-collapsed."""

    def __init__(self) -> None:
        super().__init__()
        self.paras: list[str] = []
        self._buf: list[str] | None = None
        self._pre = 0
        self._depth = 0

    @staticmethod
    def _starts_para(tag: str, attrs) -> bool:
        # DocBook's HTML puts paragraphs in <div class="para">, plain HTML in <p>
        return tag == "p" or (tag == "div" and ("class", "para") in attrs)

    def handle_starttag(self, tag, attrs):
        if tag == "pre":
            self._pre += 1
        elif self._starts_para(tag, attrs) and not self._pre:
            self._buf = []
            self._depth = 0
        elif tag == "div" and self._buf is not None:
            self._depth += 1

    def handle_endtag(self, tag):
        if tag == "pre":
            self._pre = max(0, self._pre - 1)
        elif tag == "div" and self._buf is not None and self._depth:
            self._depth -= 1
        elif tag in ("p", "div") and self._buf is not None:
            self.paras.append(" ".join("".join(self._buf).split()))
            self._buf = None

    def handle_data(self, data):
        if self._buf is not None and not self._pre:
            self._buf.append(data)


def _prose(para: str, min_words: int = 6) -> bool:
    words = para.split()
    if len(words) < min_words:
        return False
    letters = sum(c.isalpha() or c.isspace() for c in para)
    return letters / len(para) > 0.85


def handbook(root: Path) -> Iterator[list[str]]:
    for page in sorted(root.glob("usr/share/doc/debian-handbook/html/en-US/*.html")):
        parser = _Paragraphs()
        parser.feed(page.read_text(errors="ignore"))
        paras = [html.unescape(p) for p in parser.paras if _prose(p)]
        if paras:
            yield paras


_ROLE = re.compile(r":[a-z:]+:`~?!?([^`<]*?)(?:\s*<[^>]*>)?`")
_LITERAL = re.compile(r"``([^`]*)``")
_LINK = re.compile(r"`([^`<]*?)\s*<[^>]*>`_+")
_EMPH = re.compile(r"\*\*?([^*]+)\*\*?")


def _rst_inline(text: str) -> str:
    text = _ROLE.sub(r"\1", text)
    text = _LITERAL.sub(r"\1", text)
    text = _LINK.sub(r"\1", text)
    text = _EMPH.sub(r"\1", text)
    return text.replace("`", "").replace("\\", "")


def rst_paragraphs(text: str) -> list[str]:
    """Prose paragraphs of a reStructuredText file: top-level paragraphs only, so code blocks,
    directive bodies and tables (all indented or fenced) are left out."""
    paras, cur, skip_indented = [], [], False
    for line in text.splitlines() + [""]:
        stripped = line.strip()
        if not stripped:
            if cur:
                para = " ".join(cur)
                skip_indented = para.endswith("::")
                para = para[:-1] if para.endswith("::") else para
                if _prose(para) and not para.startswith(("..", "+", "|", "=", "-")):
                    paras.append(_rst_inline(para))
                cur = []
            continue
        if line[0].isspace():  # indented: a code block, directive body, or quote
            continue
        if stripped.startswith(".. ") or set(stripped) <= set("=-~^*#+`'\"_:."):
            skip_indented = True
            continue
        cur.append(stripped)
    del skip_indented
    return paras


def python_docs(root: Path) -> Iterator[list[str]]:
    src = root / "usr/share/doc/python3.11/html/_sources"
    for path in sorted(src.rglob("*.rst.txt")):
        paras = rst_paragraphs(path.read_text(errors="ignore"))
        if paras:
            yield paras


def fortunes(root: Path, per_doc: int = 30) -> Iterator[list[str]]:
    for path in sorted((root / "usr/share/games/fortunes").glob("*")):
        if "." in path.name or path.is_dir():
            continue
        items = [" ".join(f.split()) for f in path.read_text(errors="ignore").split("\n%\n")]
        items = [f for f in items if len(f.split()) >= 4]
        for i in range(0, len(items), per_doc):
            yield items[i : i + per_doc]


def devil(root: Path) -> Iterator[list[str]]:
    raw = gzip.open(next(root.glob("usr/share/dictd/devil.dict.dz"))).read().decode("utf-8", "ignore")
    entries = [" ".join(e.split()) for e in re.split(r"\n(?=[A-Z][A-Z' -]+,? [a-z]+\.)", raw)]
    entries = [e for e in entries if len(e.split()) >= 6 and not e.startswith("00-database")]
    for i in range(0, len(entries), 20):
        yield entries[i : i + 20]


_GCIDE_DROP = re.compile(r"\[(1913 Webster|WordNet[^\]]*|PJC|Obs\.|R\.|Archaic|Colloq\.)\]|\\[^\\]*\\|[{}]")


def gcide(root: Path, every: int = 7) -> Iterator[list[str]]:
    raw = gzip.open(next(root.glob("usr/share/dictd/gcide.dict.dz"))).read().decode("latin-1")
    entries = re.split(r"\n(?=[A-Z][A-Za-z' -]* \\)", raw)
    batch, words = [], 0
    for entry in entries[1::every]:
        head = entry.split("\\", 1)[0].strip()
        body = re.sub(r"^[^\n]*\n", "", entry, count=1)  # the headword line holds pronunciation
        body = re.sub(r"\[[^\]]*\]", "", _GCIDE_DROP.sub("", body))  # etymologies and sources
        body = " ".join(re.sub(r"--\s*[A-Z][\w. ]*\.?", "", body).split())
        body = re.sub(r"(^| )\d+\. ", " ", body).replace("Syn:", "Synonyms:").strip()
        if len(body.split()) < 6 or not head:
            continue
        batch.append(f"{head}: {body}")
        words += len(body.split())
        if len(batch) == 25:
            yield batch
            batch = []
        if words > GCIDE_WORDS:
            break


def chunks(paras: list[str], words: int = CHUNK_WORDS) -> Iterator[str]:
    cur, n = [], 0
    for p in paras:
        cur.append(p)
        n += len(p.split())
        if n >= words:
            yield "\n\n".join(cur)
            cur, n = [], 0
    if n >= 40:
        yield "\n\n".join(cur)


def build(work: Path, out: Path) -> dict:
    roots = fetch(work)
    readers = {"debian-handbook": handbook, "python3.11-doc": python_docs, "fortunes": fortunes,
               "dict-devil": devil, "dict-gcide": gcide}
    rows, by_source = [], {}
    for name, read in readers.items():
        for doc in read(roots[name]):
            for text in chunks(doc):
                h = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
                split = "heldout" if h % 100 < HELDOUT_PERCENT else "train"
                rows.append({"text": text, "source": name, "split": split})
                by_source[name] = by_source.get(name, 0) + len(text.split())
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    tmp.replace(out)
    return {"documents": len(rows), "heldout": sum(r["split"] == "heldout" for r in rows),
            "words": sum(by_source.values()), "words_by_source": by_source}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/english-debs"))
    ap.add_argument("--out", type=Path, default=Path("data/corpus/english.jsonl.gz"))
    ap.add_argument("--count-tokens", action="store_true", help="count smollm2-135m tokens too")
    args = ap.parse_args()
    stats = build(args.work, args.out)
    if args.count_tokens:
        from core.models import zoo

        tok = zoo.load("smollm2-135m").tokenizer
        n = {"train": 0, "heldout": 0}
        with gzip.open(args.out, "rt") as f:
            for line in f:
                r = json.loads(line)
                n[r["split"]] += len(tok(r["text"])["input_ids"])
        stats["tokens"] = n
    manifest = args.out.with_name("english.json")
    manifest.write_text(json.dumps({**stats, "packages": list(PACKAGES), "builder":
                                    "scripts/build_english_corpus.py"}, indent=1) + "\n")
    print(json.dumps(stats, indent=1))


if __name__ == "__main__":
    main()
