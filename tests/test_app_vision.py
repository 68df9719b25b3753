"""Vision page: maps of every chosen method over a sample, the metrics table, uploads good and bad."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` lives at the repository root

from job_helpers import fake_submit  # noqa: E402

from app.testing import array, chart, frame_with, open_page, problems  # noqa: E402

METHODS = ["attention", "rollout"]

pytestmark = pytest.mark.usefixtures("one_thread")


def heat(at) -> list:
    spec = chart(at, "vit_overlay")
    return [array(t["z"]).tolist() for t in spec["data"] if t["type"] == "heatmap"]


def test_maps_and_metrics_follow_the_sample(vit_dir):
    at = open_page("vision", {"vit_model": str(vit_dir), "vit_methods": METHODS})
    assert not problems(at)
    assert len(heat(at)) == len(METHODS)  # one overlaid map per method, side by side
    table = frame_with(at, "deletion_auc")
    assert list(table["method"]) == METHODS and "pointing_game" in table.columns
    before = heat(at)
    at.number_input(key="vit_index").set_value(5).run()
    assert not problems(at)
    assert heat(at) != before
    at.button(key="vit_save").click().run()
    assert any("Saved as run" in s.value for s in at.success)


def test_uploads_good_and_unreadable(vit_dir):
    from PIL import Image

    at = open_page("vision", {"vit_model": str(vit_dir), "vit_methods": METHODS, "vit_source": "upload"})
    assert not problems(at)
    at.file_uploader(key="vit_upload").upload("notes.png", b"this is not an image", "image/png").run()
    assert not at.exception
    assert any("Cannot read 'notes.png' as an image" in e.value for e in at.error)
    buf = io.BytesIO()
    Image.new("RGB", (48, 40), (200, 30, 30)).save(buf, format="PNG")
    at.file_uploader(key="vit_upload").upload("red.png", buf.getvalue(), "image/png").run()
    assert not problems(at)
    assert len(heat(at)) == len(METHODS)
    assert "pointing_game" not in frame_with(at, "deletion_auc").columns  # no mask for an upload


def test_benchmark_runs_as_a_job_and_a_new_session_opens_its_run(vit_dir, monkeypatch):
    import time

    from app.vit_bench import bench_spec
    from workbench.scheduler import JobBoard, run

    made = fake_submit(monkeypatch)
    state = {"vit_model": str(vit_dir), "vit_methods": METHODS, "vit_bench_methods": ["rollout", "random"],
             "vit_bench_n": 6}
    at = open_page("vision", state)
    assert not problems(at)
    with pytest.raises(AssertionError, match="no dataframe"):  # nothing is benchmarked until asked
        frame_with(at, "seconds_per_image")
    at.button(key="_vit_bench_job_start").click().run()
    assert not problems(at)
    spec = bench_spec(str(vit_dir), ["rollout", "random"], "synthetic", 6)
    assert len(made) == 1 and made[0].spec == spec.to_dict() and JobBoard().get(made[0].id).state == "queued"
    assert any(made[0].id in str(m.value) for m in at.markdown)  # the job, shown inline
    # Its driver would run it on Ray; here it runs in this process, into the same store.
    done, _ = run(spec, save=True)
    started = time.perf_counter()
    at = open_page("vision", state)  # a new session: the stored run at once, no Run button
    print(f"a new session opened the stored benchmark in {time.perf_counter() - started:.2f} s")
    assert not problems(at)
    assert not any(b.key == "_vit_bench_job_start" for b in at.button)
    table = frame_with(at, "seconds_per_image")
    assert list(table["method"]) == ["rollout", "random"] and "pointing_game" in table.columns
    assert any(done.run_id in str(c.value) for c in at.caption)
    assert chart(at, "vit_bench_chart")["data"]
    assert len(JobBoard().list()) == 2  # nothing more was started


def test_upload_keeps_the_methods_and_many_maps_wrap(vit_dir):
    """Issue 28: after switching to upload and uploading, the Methods box keeps its methods (Save worked); nine
    methods are drawn four panels a row, each panel 240 px, not squeezed into one row."""
    from PIL import Image

    at = open_page("vision", {"vit_model": str(vit_dir)})
    assert not problems(at)
    chosen = at.multiselect(key="vit_methods").value
    assert len(chosen) >= 5
    at.radio(key="vit_source").set_value("upload").run()
    buf = io.BytesIO()
    Image.new("RGB", (48, 40), (200, 30, 30)).save(buf, format="PNG")
    at.file_uploader(key="vit_upload").upload("red.png", buf.getvalue(), "image/png").run()
    assert not problems(at)
    assert at.multiselect(key="vit_methods").value == chosen
    assert not any("Pick at least one method" in i.value for i in at.info)
    panels = [chart(at, "vit_overlay")] + [chart(at, f"vit_overlay_{r}") for r in range(1, 3)
                                           if any(getattr(c, "key", None) == f"vit_overlay_{r}"
                                                  or (c.proto.id or "").endswith(f"-vit_overlay_{r}")
                                                  for c in at.get("plotly_chart"))]
    maps = [t for p in panels for t in p["data"] if t["type"] == "heatmap"]
    assert len(maps) == len(chosen) and all(len([t for t in p["data"] if t["type"] == "heatmap"]) <= 4
                                            for p in panels)
    assert all(p["layout"]["width"] <= 4 * 240 + 200 for p in panels)
    at.button(key="vit_save").click().run()
    assert any("Saved as run" in s.value for s in at.success)
