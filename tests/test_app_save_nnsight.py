"""The app's save button after nnsight is imported: nnsight puts a ``.save`` on every Python object (its trace
marker), so a save that asked ``hasattr(obj, "save")`` sent RunDrafts to nnsight and saved nothing."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from core.store import RunStore


def _page() -> None:
    import app.common as C
    from core.store import RunDraft

    C.save_button(lambda: RunDraft(kind="patch", model="m", result={"x": 1.0}), key="save_here")


def test_a_draft_is_saved_once_nnsight_is_loaded():
    import nnsight  # noqa: F401  (the import is what mounts .save on every object)

    assert hasattr(object(), "save")  # the premise: if nnsight stops doing this the test says so
    at = AppTest.from_function(_page, default_timeout=60).run()
    at.button(key="save_here").click().run()
    assert not at.exception and not at.error
    assert [r["kind"] for r in RunStore().list()] == ["patch"]
    assert any("Saved as run" in s.value for s in at.success)
