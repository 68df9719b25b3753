"""Probes page on a tiny random word-level model: the Run button starts a job, a later session opens the
job's stored result without running anything; curves, similarity, PCA, steering, bad uploads."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from job_helpers import fake_submit  # noqa: E402

from app.testing import array, chart, open_page, problems  # noqa: E402

pytestmark = pytest.mark.skipif(
    not (Path(__file__).resolve().parents[1] / "attribution" / "probes" / "probe.py").exists(),
    reason="the probes engine is not in this checkout",
)

GOOD = "good great fine nice".split()
BAD = "bad awful poor dull".split()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    from core.models.tiny import save_tiny

    return save_tiny(tmp_path_factory.mktemp("probe-model") / "tiny", name="tiny-probe")


def dataset() -> bytes:
    rows = []
    for i in range(40):
        word, label = (GOOD[(i // 2) % 4], "positive") if i % 2 else (BAD[(i // 2) % 4], "negative")
        rows.append({"text": f"the {['movie', 'meal', 'book', 'show'][i % 4]} was {word}", "label": label})
    return "\n".join(json.dumps(r) for r in rows).encode()


def upload_session(tiny_dir):
    at = open_page("probes", {"probe_model": str(tiny_dir), "probe_source": "upload"})
    assert any("Upload a JSONL" in i.value for i in at.info)
    return at.file_uploader(key="probe_upload").upload("sentiment.jsonl", dataset(), "application/json").run()


@pytest.fixture
def page(tiny_dir, monkeypatch):
    from workbench.scheduler import JobBoard, run

    made = fake_submit(monkeypatch)
    at = upload_session(tiny_dir)
    assert not problems(at)
    assert not at.get("plotly_chart")  # nothing is probed until asked
    at.button(key="_probe_job_start").click().run()
    assert not problems(at)
    assert len(made) == 1 and JobBoard().get(made[0].id).state == "queued"  # a recorded job, shown inline
    spec = made[0].spec
    assert spec["kind"] == "probe" and spec["n"] == 40 and spec["concept"] == "negative" and len(spec["rows"]) == 40
    assert any(made[0].id in str(m.value) for m in at.markdown) and not at.get("plotly_chart")
    # Its driver would run it on Ray; here it runs in this process, into the same store.
    done, _ = run(spec, save=True)
    # A new session opens the stored result at once: no Run button, nothing computed.
    started = time.perf_counter()
    at = upload_session(tiny_dir)
    print(f"second session opened the stored probe result in {time.perf_counter() - started:.2f} s")
    assert not any(b.key == "_probe_job_start" for b in at.button)
    assert any(done.run_id in str(c.value) for c in at.caption)
    return at


def test_probe_curves_and_steering(page):
    at = page
    assert not problems(at)
    spec = chart(at, "probe_curves")
    assert {t.get("name") for t in spec["data"]} >= {"probe accuracy", "control task", "selectivity"}
    assert chart(at, "probe_gdv") and chart(at, "probe_sim") and chart(at, "probe_pca")
    texts = [t.value for t in at.text]
    assert len(texts) == 2 and texts[0] == texts[1]  # strength 0: steered and unsteered agree
    at.slider(key="probe_scale").set_value(2.0).run()
    assert not problems(at)
    plain, steered = [t.value for t in at.text]
    assert plain == texts[0] and steered != plain  # the slider changes the steered side only
    layer = at.select_slider(key="probe_layer").value
    pca = array(chart(at, "probe_pca")["data"][0]["x"]).tolist()
    at.select_slider(key="probe_layer").set_value(1 - layer).run()  # the tiny model has two layers
    assert not problems(at)
    assert array(chart(at, "probe_pca")["data"][0]["x"]).tolist() != pca


def test_unreadable_dataset_is_a_message(tiny_dir):
    at = open_page("probes", {"probe_model": str(tiny_dir), "probe_source": "upload"})
    at.file_uploader(key="probe_upload").upload("junk.jsonl", b"\x00\xff not json", "application/json").run()
    assert not at.exception
    assert any("Cannot read 'junk.jsonl'" in e.value for e in at.error)
    at.file_uploader(key="probe_upload").upload("sentiment.jsonl", dataset(), "application/json").run()
    assert not problems(at)


def test_failed_job_says_why_and_offers_a_rerun(tiny_dir, monkeypatch):
    from workbench.scheduler import JobBoard

    made = fake_submit(monkeypatch)
    at = upload_session(tiny_dir)
    at.button(key="_probe_job_start").click().run()
    board = JobBoard()
    job = board.get(made[0].id)
    job.state, job.error = "failed", "the Ray worker died; nothing was saved"
    board.write(job)
    at.run()
    assert any("the Ray worker died" in e.value for e in at.error)
    assert any(b.key == "_probe_job_start" for b in at.button) and not at.get("plotly_chart")
