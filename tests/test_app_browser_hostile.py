"""Hostile text in headless Chromium: a prompt in the URL and a crafted run's metadata (model, method, prompt,
target, tokens) holding HTML and Markdown images pointing at another host are shown as text: the page makes no
request that leaves the app's origin (issue 41, class 10)."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

import pytest
from test_app_browser import app_in_chromium, settle

from app.serving import CHROMIUM

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed"),
]

OTHER = "http://127.0.0.2:9"  # another origin: nothing there, every request to it is a leak


def hostile(tag: str) -> str:
    return (f'<img src="{OTHER}/{tag}-html.png"> ![x]({OTHER}/{tag}-md.png) <script src="{OTHER}/{tag}.js">'
            f"</script> [link]({OTHER}/{tag}-link) :red[{tag}] $x^2$ `tick")


def crafted_run(store: Path) -> str:
    """An attribution run on the toy model whose stored text fields all carry hostile text."""
    import os

    os.environ["WORKBENCH_RUNS"] = str(store)
    import workbench as wb

    m = wb.load("ioi-attn-1l2h")
    run = wb.attribute(m, "N1 and N2 then N2", target=" N1").save()
    meta = json.loads((run.path / "meta.json").read_text())
    meta["model"] = hostile("model")
    meta["method"] = hostile("method")
    meta["args"].update(prompt=hostile("prompt"), target=hostile("target"))
    meta["summary"].update(prompt=hostile("sprompt"), model=hostile("smodel"))
    (run.path / "meta.json").write_text(json.dumps(meta))
    result = json.loads((run.path / "result.json").read_text())
    result.update(model=hostile("rmodel"), prompt=hostile("rprompt"), target=hostile("rtarget"),
                  tokens=[hostile(f"tok{i}") for i in range(len(result["tokens"]))])
    (run.path / "result.json").write_text(json.dumps(result))
    return run.id


def test_hostile_text_never_leaves_the_app(tmp_path, monkeypatch, tiny_llama_dir):
    store = tmp_path / "runs"
    monkeypatch.setenv("WORKBENCH_RUNS", str(store))
    run_id = crafted_run(store)
    with app_in_chromium(tmp_path, 1200, env={"WORKBENCH_RUNS": str(store)}) as (page, port):
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        base = f"http://127.0.0.1:{port}"
        q = urllib.parse.quote
        tiny = q(str(tiny_llama_dir))  # a real tokenizer: the hostile prompt is tokenized and its tokens shown
        # (page URL, a marker of the hostile text the page must show as text)
        urls = [(f"/circuits?model={tiny}&prompt={q(hostile('url-prompt'))}&target=%20the", None),
                (f"/attribution?model={tiny}&prompt={q(hostile('attr-prompt'))}&target={q(hostile('t'))}", None),
                (f"/attribution?model={tiny}&prompt={q(hostile('attr-prompt'))}&position=2", None),
                (f"/lens?model={tiny}&prompt={q(hostile('lens-prompt'))}", None),
                (f"/model?model={q(hostile('model-name'))}", "model-name-html.png"),
                (f"/runs?run={run_id}", "prompt-html.png"),
                (f"/runs?run={q(hostile('run-id'))}", "run-id-html.png")]
        for url, marker in urls:
            page.goto(base + url, timeout=60_000)
            settle(page)
            page.wait_for_timeout(500)
            body = page.locator("body").inner_text()
            assert "Traceback" not in body, (url, body[:2000])
            assert marker is None or marker in body, (url, body[:3000])
        outside = [u for u in requests if not u.startswith((base, "data:", "blob:", "about:"))
                   and not u.startswith(base.replace("127.0.0.1", "localhost"))]
        assert not outside, outside[:10]
