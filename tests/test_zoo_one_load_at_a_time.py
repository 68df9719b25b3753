"""Loads in one process run one at a time (the app's sessions load in threads; transformers' lazy imports are not
thread-safe: a loaded CI run saw "cannot import name 'AutoTokenizer' from 'transformers'" with two pages loading)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import core.models.zoo as zoo


def test_two_threads_loading_never_overlap(monkeypatch):
    inside, most, lock = [0], [0], threading.Lock()

    def loader(entry, device="cpu", **kwargs):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.2)  # long enough that unserialised threads would overlap
        with lock:
            inside[0] -= 1
        return SimpleNamespace(name=entry.name)

    monkeypatch.setattr(zoo, "resolve", lambda name: SimpleNamespace(name=name, kind="toy"))
    monkeypatch.setattr(zoo, "_loader_function", lambda entry: loader)
    monkeypatch.setattr(zoo, "check_finite_weights", lambda model, name: None)
    got: list[str] = []
    threads = [threading.Thread(target=lambda n=n: got.append(zoo.load(n).name)) for n in ("a", "b", "c")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(got) == ["a", "b", "c"] and most[0] == 1
