"""Deep links with hostile or absurd query parameters (HTML and Markdown images, unknown choices, out-of-range
numbers, paths out of the store) open every page without an exception, and every message that quotes them
carries them escaped (no Markdown image or HTML tag can form)."""

from __future__ import annotations

import re

import pytest

from app.testing import MAIN

H = '<img src="http://127.0.0.2/x.png"> ![x](http://127.0.0.2/y.png)'
CASES = [
    ("lens", {"model": "ioi-attn-1l2h", "kind": "bogus", "prompt": H, "target": H}),
    ("blackbox", {"d": "-5", "heads": "1000000", "noise": "nan", "seed": "x", "bound": H}),
    ("attribution", {"model": "ioi-attn-1l2h", "methods": "nosuch," + H, "prompt": H, "position": "99999"}),
    ("vision", {"methods": "zzz," + H}),
    ("circuits", {"model": "ioi-attn-1l2h", "site": H, "corrupt": H, "prompt": H}),
    ("sae", {"sae": H, "feature": "-1"}),
    ("runs", {"run": "../../etc"}),
    ("model", {"model": H, "prompt": H}),
]
# an unescaped image or tag in a message: "![" or "<" not preceded by the escaping backslash
RAW = re.compile(r"(?<!\\)!(?<!\\)\[|(?<!\\)<[a-z]")


@pytest.mark.parametrize("page, params", CASES, ids=[c[0] for c in CASES])
def test_hostile_deep_links(page, params, tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("WORKBENCH_RUNS", str(tmp_path / "runs"))
    at = AppTest.from_file(str(MAIN), default_timeout=120)
    for key, value in params.items():
        at.query_params[key] = value
    at.switch_page(f"pages/{page}.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    shown = [str(e.value) for kind in ("error", "warning", "info", "caption", "markdown", "success", "subheader")
             for e in getattr(at, kind)]
    assert not [s for s in shown if RAW.search(s)], [s[:200] for s in shown if RAW.search(s)]
