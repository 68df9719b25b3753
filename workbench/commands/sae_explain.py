"""`workbench sae explain`: readable explanations of every feature of a dictionary, chosen and scored on
fresh held-out text (attribution/sae/explain.py), stored beside its dashboards."""

from __future__ import annotations

import sys
from typing import Any

import typer

from core.options import nonempty, positive_int
from workbench.commands.common import BF16_OPTION, DEVICE_OPTION, JSON_OPTION, WINDOWS_BATCH_OPTION, emit


def register(app: typer.Typer) -> None:  # noqa: ARG001 - the command joins sae.py's group
    from workbench.commands.sae import sae_app

    sae_app.command("explain")(explain)


def explain(
    sae: list[str] = typer.Option(..., "--sae", help="Dictionary directory or name, or neurons:LAYER; repeat for "
                                  "several (one shared forward pass). Its dashboards must be built."),
    model: str = typer.Option(None, "--model", help="Model (default: the dictionary's own; needed for neurons).",
                              callback=nonempty),
    windows: int = typer.Option(256, "--windows", help="Fresh held-out windows: half to choose each rule on, "
                                "half to score it on.", callback=positive_int),
    batch_size: int = WINDOWS_BATCH_OPTION,
    bf16: bool = BF16_OPTION,
    render_only: bool = typer.Option(False, "--render-only", help="Only rewrite the stored explanations' wording "
                                     "from their rules (no forward pass; scores kept)."),
    device: str = DEVICE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Give every feature a readable explanation (a token category or token set, in a context, and what it
    promotes) with its simulation score: the correlation of the explanation's simulated activations with
    the true ones on held-out text it was not chosen on. Stored as explanations.json.gz beside the
    dashboards; the app and `workbench sae features` show them."""
    import time

    import workbench
    from attribution.sae.explanation_store import save_explanations
    from attribution.sae.explanations import build_explanations
    from attribution.sae.units import resolve
    from core.errors import RangeError
    from workbench.commands.common import check_device
    from workbench.commands.sae_features import dashboards_of, load_threads, model_of

    names = {model_of(s, model) for s in sae}
    if len(names) > 1:
        raise RangeError(f"dictionaries of different models in one build: {', '.join(sorted(names))}")
    dbs = [dashboards_of(s, model) for s in sae]  # first: a missing dashboard fails before the model loads
    load_threads()
    from core.models.zoo import check_text_model

    name = model or names.pop()
    check_text_model(name, "sae explain")
    m = workbench.load(name, device=check_device(device))
    units = [resolve(s, m) for s in sae]
    started = time.time()
    if render_only:
        emit({"rendered": [reword(m, d, db) for d, db in zip(units, dbs, strict=True)],
              "seconds": round(time.time() - started, 1)}, as_json)
        return
    last = [0.0]

    def progress(stage: str, done: int, total: int) -> None:
        if time.time() - last[0] > 5 or done == total:
            last[0] = time.time()
            print(f"explain: {stage} {done}/{total} ({time.time() - started:.0f} s)", file=sys.stderr, flush=True)

    out = build_explanations(m, units, dbs, n_windows=windows, batch_size=batch_size, bf16=bf16,
                             on_progress=progress)
    rows = []
    for d, data in zip(units, out, strict=True):
        path = save_explanations(d.path, data)
        rows.append({"name": data["name"], "path": str(path), **data["summary"],
                     "explain_seconds": data["explain_seconds"], "forward_seconds": data["forward_seconds"]})
    emit({"explanations": rows, "windows": out[0]["n_windows"], "seconds": round(time.time() - started, 1)}, as_json)


def reword(m: Any, d: Any, db: Any) -> str:
    """Re-render one dictionary's stored explanations from their rules; the path written."""
    from attribution.sae.explanation_store import load_explanations, save_explanations
    from attribution.sae.explanations import fire_lists, words
    from core.errors import ModelFileError

    data = load_explanations(d.path, db.n_units)
    if data is None:
        raise ModelFileError(f"{d.name} has no explanations to re-render: build them with `workbench sae explain`")
    fire, _ = fire_lists(db)
    need = {i for fs in fire for i in fs}
    for e in data["features"]:
        for part in (e.get("rule") or {}).get("token"), (e.get("rule") or {}).get("context"):
            need.update((part or {}).get("ids", []))
    words(db, data["features"], {int(i): m.decode([int(i)]) for i in need}, fire)
    return str(save_explanations(d.path, data))
