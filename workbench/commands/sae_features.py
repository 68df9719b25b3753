"""`workbench sae list|dashboards|features|steer`: dictionaries, their feature dashboards, search and
steering. (`sae train|eval|corpus` live in sae.py; these commands join the same `sae` group.)

A unit source (``--sae``) is a dictionary directory, a dictionary's name under data/saes, or
``neurons:LAYER`` with ``--model`` (the MLP neurons of that layer)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from core.options import finite_float, nonempty, nonneg_int, positive_int, token_text
from workbench.commands.common import (
    BF16_OPTION,
    DEVICE_OPTION,
    DTYPE_OPTION,
    JSON_OPTION,
    WINDOWS_BATCH_OPTION,
    emit,
    print_table,
    result_console,
)

SAE_OPTION = typer.Option(..., "--sae", help="Dictionary directory, its name under data/saes, or neurons:LAYER.")
MODEL_OPTION = typer.Option(None, "--model", callback=nonempty,
                            help="Model (default: the dictionary's own; needed for neurons:LAYER).")


def register(app: typer.Typer) -> None:  # noqa: ARG001 - the commands join sae.py's group
    from workbench.commands.sae import sae_app

    sae_app.command("list")(list_dictionaries)
    sae_app.command("dashboards")(dashboards)
    sae_app.command("features")(features)
    sae_app.command("steer")(steer)


def load_threads() -> None:
    """Two torch threads at most; one on a machine already busier than its cores (spinning threads
    then cost far more than they give)."""
    import os

    import torch

    busy = os.getloadavg()[0] > (os.cpu_count() or 1)
    torch.set_num_threads(1 if busy else min(2, torch.get_num_threads()))


def check_unit_spec(spec: str) -> str:
    """RangeError naming --sae for an empty source or a ``neurons:LAYER`` whose LAYER is not a layer number."""
    from core.errors import RangeError

    if not spec.strip():
        raise RangeError("--sae is empty: give a dictionary directory, its name under data/saes, or neurons:LAYER")
    if spec.startswith("neurons:") and not spec.split(":", 1)[1].strip().isdigit():
        raise RangeError(f"--sae {spec}: LAYER in neurons:LAYER must be a layer number (counting from 0)")
    return spec


def model_of(spec: str, model: str | None) -> str:
    """The model a unit source belongs to, without loading it (a dictionary's workbench.json/cfg)."""
    from core.errors import RangeError

    if model:
        return model
    if spec.startswith("neurons:"):
        raise RangeError("neurons:LAYER needs --model")
    from attribution.sae.units import resolve

    name = resolve(spec).model
    if not name:
        raise RangeError(f"{spec} does not say its model: give --model")
    return name


def _load(spec: str, model: str | None, device: str, dtype: str = "float32"):
    """(HookedModel, unit source), checked against each other."""
    import workbench
    from attribution.sae.units import check_model_fits, resolve
    from workbench.commands.common import check_device

    load_threads()
    from core.models.zoo import check_text_model

    name = model_of(spec, model)
    check_text_model(name, "a dictionary")
    m = workbench.load(name, device=check_device(device), dtype=dtype)
    d = resolve(spec, m)
    check_model_fits(d, m)
    return m, d


def dashboards_of(spec: str, model: str | None) -> Any:
    """The stored dashboards of a unit source, opened without loading the model."""
    from attribution.sae.dashboard import Dashboards
    from attribution.sae.units import neurons_root, resolve

    if spec.startswith("neurons:"):
        from attribution.sae.dashboard import FILE
        from core.errors import ModelFileError

        layer = spec.split(":", 1)[1]
        name = model_of(spec, model)
        directory = neurons_root() / f"{Path(name).name}-L{layer}-neurons"
        if not (directory / FILE).exists() and not (directory / FILE).is_symlink():
            # before advising a build, the reason a build would fail (a layer without MLP neurons): one line
            from core.errors import RangeError

            try:
                _load(spec, name, "cpu")
            except RangeError as exc:
                raise RangeError(f"--sae {spec}: {exc}") from None
            raise ModelFileError(f"no dashboards of {spec} for {name} yet: build them with "
                                 f"`workbench sae dashboards --sae {spec} --model {name}`")
        return Dashboards.load(directory)
    from attribution.sae.explore import open_dashboards

    db = open_dashboards(resolve(spec))
    if db.meta.get("stale"):
        print(f"warning: the dashboards of {spec} predate its current weights; rebuild them with "
              f"`workbench sae dashboards --sae {spec}`", file=sys.stderr)
    return db


def list_dictionaries(
    root: str = typer.Option(None, "--root", help="Directory of dictionaries (default data/saes).", callback=nonempty),
    model: str = typer.Option(None, "--model", help="Only dictionaries of this model.", callback=nonempty),
    as_json: bool = JSON_OPTION,
) -> None:
    """Every shipped or trained dictionary with its held-out metrics (damaged entries are skipped
    with a warning on stderr)."""
    import warnings

    from attribution.sae.explore import summaries

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = summaries(root, model)
    for w in caught:
        if "dictionary" in str(w.message):  # the damaged entries list_dictionaries skipped
            print(f"warning: {w.message}", file=sys.stderr)

    def human(rows):
        def f(r, k, spec=".3f"):
            return "-" if r.get(k) is None else format(r[k], spec)

        numbers = ("EV", "EV-top2", "L0", "dead", "ΔCE", "dash")
        # hook and kind on a second line under the name: the name (what --sae takes) stays whole at 80 columns
        print_table(["name", *numbers],
                    [[f"{r['name']}\n  {r['hook']} · {r['kind']}", f(r, "explained_variance"),
                      f(r, "explained_variance_no_top2"), f(r, "l0", ".1f"), f(r, "dead_fraction", ".1%"),
                      f(r, "ce_loss_delta"), "yes" if r["dashboards"] else "-"] for r in rows],
                    whole=("name",), numbers=numbers)

    emit(rows, as_json, human)


def dashboards(
    sae: list[str] = typer.Option(..., "--sae", help="Dictionary directory or name, or neurons:LAYER; repeat "
                                  "for several (one shared forward pass)."),
    model: str = MODEL_OPTION,
    tokens: int = typer.Option(65_536, "--tokens", help="Held-out tokens (position 0 of each window left out).",
                               callback=positive_int),
    ctx: int = typer.Option(128, "--ctx", help="Window length.", callback=positive_int),
    batch_size: int = WINDOWS_BATCH_OPTION,
    bf16: bool = BF16_OPTION,
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Precompute and store the dashboards of every feature of each dictionary (or neuron of a layer):
    histogram, density, top and quantile contexts, logit effects, labels, token index. Stored as
    dashboards.safetensors in the dictionary's directory (neurons: data/neurons/<model>-L<layer>-neurons)."""
    import time

    import workbench
    from attribution.sae.explore import build
    from attribution.sae.units import resolve
    from core.errors import RangeError
    from workbench.commands.common import check_device

    if ctx < 2:
        raise RangeError("--ctx must be at least 2 (position 0 is never scored)")
    names = {model_of(s, model) for s in sae}
    if len({Path(n).name for n in names}) > 1:
        raise RangeError(f"dictionaries of different models in one build: {', '.join(sorted(names))}")
    load_threads()
    from core.models.zoo import check_text_model

    name = model or names.pop()
    check_text_model(name, "sae dashboards")
    m = workbench.load(name, device=check_device(device), dtype=dtype)
    units = [resolve(s, m) for s in sae]
    started = time.time()
    last = [0.0]

    def progress(done: int, total: int) -> None:
        if time.time() - last[0] > 5 or done == total:
            last[0] = time.time()
            print(f"dashboards: {done}/{total} tokens ({time.time() - started:.0f} s)", file=sys.stderr, flush=True)

    out = build(m, units, n_tokens=tokens, ctx=ctx, batch_size=batch_size, bf16=bf16, on_progress=progress)
    rows = [{"name": db.meta["name"], "path": db.meta["path"], "units": db.n_units, "n_tokens": db.meta["n_tokens"],
             "live": int((db.tensors["count"] > 0).sum()), "seconds": round(time.time() - started, 1)} for db in out]
    emit({"dashboards": rows, "seconds": round(time.time() - started, 1)}, as_json)


def features(
    sae: str = SAE_OPTION,
    token: str = typer.Option(None, "--token", help='Features that fire on this exact token (e.g. " John").',
                              callback=nonempty),
    label: str = typer.Option(None, "--label", help="Features whose label contains this text.", callback=nonempty),
    feature: int = typer.Option(None, "--feature", help="One feature's full dashboard.", callback=nonneg_int),
    limit: int = typer.Option(50, "--limit", help="At most this many rows.", callback=positive_int),
    model: str = MODEL_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Search a dictionary's stored dashboards: features that fire on a token (feature, label, max
    activation over the token's held-out occurrences), by label text, or one feature's dashboard."""
    from core.errors import RangeError

    check_unit_spec(sae)  # the source first: a bad --sae is named as such
    if sum(x is not None for x in (token, label, feature)) != 1:
        raise RangeError("give exactly one of --token, --label or --feature")
    db = dashboards_of(sae, model)
    if feature is not None:
        card = db.card(feature)
        emit(card, as_json, _print_card)
        return
    from attribution.sae.explore import find_features

    rows = find_features(db, token=token, label=label, limit=limit)

    def human(rows):
        c = result_console()
        for r in rows:
            sim = f"sim {r['score']:.2f}  " if r.get("score") is not None else ""
            c.print(f"{r['feature']:>6}  {r['max_activation']:8.3f}  {sim}{r.get('explanation') or r['label']}",
                    highlight=False, markup=False)
        if not rows:
            c.print("no features")

    emit(rows, as_json, human)


def _print_card(card) -> None:
    from attribution.sae.render import context_text

    c = result_console()
    c.print(f"feature {card['feature']}  {card['label']}", markup=False, highlight=False)
    if card.get("explanation"):
        sim = "–" if card["score"] is None else f"{card['score']:.2f}"
        c.print(f"explanation: {card['explanation']}  (simulation score {sim})", markup=False, highlight=False)
    c.print(f"density {card['density']:.5f}  max {card['max_activation']:.3f}  mean {card['mean_activation']:.3f}")
    c.print("raises: " + " ".join(repr(t) for t, _ in card["top_logits"][:8]), markup=False, highlight=False)
    c.print("lowers: " + " ".join(repr(t) for t, _ in card["bottom_logits"][:8]), markup=False, highlight=False)
    for ctx in card["contexts"]:
        c.print(f"{ctx['group']:>22} {ctx['activation']:8.3f}  {context_text(ctx)}", markup=False, highlight=False)


def steer(
    sae: str = SAE_OPTION,
    feature: int = typer.Option(..., "--feature", help="Feature (or neuron) id.", callback=nonneg_int),
    prompt: str = typer.Option(..., "--prompt", help="Prompt to continue."),
    alpha: float = typer.Option(None, "--alpha", help="Add alpha times the decoder direction (activation units).",
                                callback=finite_float),
    clamp: float = typer.Option(None, "--clamp", help="Clamp the feature's activation to this value.",
                                callback=finite_float),
    ablate: bool = typer.Option(False, "--ablate", help="Clamp the feature to 0."),
    target: str = typer.Option(None, "--target", help="Token whose probability change is reported.",
                               callback=token_text),
    new_tokens: int = typer.Option(20, "--tokens", help="Greedy tokens to generate.", callback=nonneg_int),
    model: str = MODEL_OPTION,
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Steer with one feature (add alpha x its decoder direction where the dictionary writes, or
    clamp it; --ablate clamps to 0) from position 1 on: greedy continuations with and without, and the
    target's logit and probability change at the prompt's last position."""
    from attribution.sae.steer import steer as run_steer
    from core.errors import RangeError

    check_unit_spec(sae)
    if sum([alpha is not None, clamp is not None, ablate]) != 1:
        raise RangeError("give exactly one of --alpha, --clamp or --ablate")
    from attribution.sae.steer import check_new_tokens

    check_new_tokens(new_tokens)  # before the model loads
    m, d = _load(sae, model, device, dtype)
    res = run_steer(m, d, feature, prompt, alpha=alpha, value=0.0 if ablate else clamp, target=target,
                    n_new=new_tokens)
    out = res.to_json()

    def human(o):
        from attribution.sae.render import visible

        c = result_console()
        how = "ablated (clamped to 0)" if o["mode"] == "ablate" else f"{o['mode']} {o['strength']:+g}"
        c.print(f"{o['dictionary']} feature {o['feature']}: {how} "
                f"(its activation at the last position: {o['clean_activation']:.3f})", markup=False)
        for name, key in (("clean:  ", "clean_text"), ("steered:", "steered_text")):  # one line each
            c.print(f"{name} {visible(o['prompt'])}|{visible(o[key])}", markup=False, highlight=False, soft_wrap=True)
        if o["target"] is not None:
            c.print(f"target {o['target']!r}: p {o['target_prob_clean']:.4f} -> {o['target_prob_steered']:.4f}, "
                    f"logit change {o['logit_change']:+.3f}", markup=False)

    emit(out, as_json, human)
