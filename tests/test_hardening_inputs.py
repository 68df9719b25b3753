"""Hardening of inputs: JSONL prompt files read line by line at "\\n" only, with a BOM tolerated."""

from __future__ import annotations

import json

import pytest

from workbench.errors import PromptError
from workbench.prompt_files import parse_prompts, read_prompts

ODD = "a\u2028b\u2029c\u0085d"  # separators str.splitlines() splits at, legal inside a JSON string


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def test_unicode_line_separators_inside_strings(tmp_path):
    rows = [{"prompt": f"x {ODD} y", "target": " y"}, {"prompt": "second", "target": " z"}]
    f = tmp_path / "p.jsonl"
    f.write_text(_jsonl(rows), encoding="utf-8")
    assert read_prompts(str(f)) == rows
    assert parse_prompts(_jsonl(rows), "p.jsonl") == rows


def test_bom_and_crlf(tmp_path):
    rows = [{"prompt": "one", "target": " a"}, {"prompt": "two", "target": " b", "foil": " c"}]
    f = tmp_path / "p.jsonl"
    f.write_bytes(b"\xef\xbb\xbf" + _jsonl(rows).replace("\n", "\r\n").encode())
    assert read_prompts(str(f)) == rows
    # Text already decoded with a plain "utf-8" (the app's upload path) still carries the BOM.
    assert parse_prompts("\ufeff" + _jsonl(rows), "up.jsonl") == rows


def test_bad_line_still_named(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "a", "target": " b"}\n\nnot json\n', encoding="utf-8")
    with pytest.raises(PromptError, match=r"p.jsonl:3"):
        read_prompts(str(f))


def test_probe_dataset_unicode_separators(tmp_path):
    from attribution.probes.activations import load_dataset

    rows = [{"text": f"t{i} {ODD}", "label": "ab"[i % 2]} for i in range(4)]
    f = tmp_path / "d.jsonl"
    f.write_bytes(b"\xef\xbb\xbf" + _jsonl(rows).encode())
    ds = load_dataset(f)
    assert ds.texts == [r["text"] for r in rows]
