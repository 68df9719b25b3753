"""Replay the bad-input catalogue against the `workbench` CLI and classify every outcome.

    python scripts/bad_inputs.py [--json] [--only SUBSTRING] [--skip-slow] [--list] [--per-process]

Each case runs the CLI (workbench.cli.main in one worker process that imported torch once; with
--per-process, `python -m workbench.cli ...` in a subprocess of its own) with its own empty run store
(WORKBENCH_RUNS in a temporary directory), its own working directory and a timeout; the files it reads
(prompt sets, datasets, images, damaged runs, model folders) are made here in a temporary directory. Fast toy models
(ioi-attn-1l2h, vit-synth) carry almost every case; smollm2-135m is loaded by a few (marked slow).

Result classes:

- clear-error      exit 2 and exactly one "error: ..." line on stderr naming the problem (expected)
- ok               exit 0 where success was expected, no NaN/Infinity printed or saved
- traceback        a Python traceback on stderr
- internal-error   exit 1 with "internal error: ..." (an unexpected exception the CLI caught)
- silent-non-finite  exit 0 but NaN/Infinity in the output or in a saved run
- unclear-error    exit 2 but not one line, or the line does not name the problem
- accepted-bad     exit 0 on a bad input (no error at all)
- refused-good     an error on an input that should succeed
- saved-on-error   a clear error, but a run was saved anyway
- left-files       a clear error, but a file was left in the case's folder or where its --out/--table named
- deleted-outside  a file beside the case's store (a user's own) was removed
- changed-outside  the case changed the checkout's committed outputs (results/circuits, data/models, ...)
- timeout / other-exit

The catalogue also generates, for every numeric option of every command (found from the typer app),
the negative / zero / NaN / Infinity / non-integer values and 10^9 / 10^30 (or 1e9 / 1e30) that option must
refuse (a value its callback, with core/options.py's bounds table, accepts is left out).
Issue 41's cases (issue41_cli_cases; store_cases and network_app_cases are engineers D's and F's): error cases
must answer within 30 s; the tally counts those that did not. Everything a case writes goes into this script's
temporary folder (its store, its working directory, files/out/), never the checkout.
Every error case names the words its one error line must hold (the value or file the user gave, the option, what to
do instead); the run is refused when one names none. In the shared worker, what a case writes to the process's real
stdout/stderr (below sys.stdout/sys.stderr) is counted with its output too.
Exit status: 0 only when every case is clear-error or ok; 2 when any is a traceback, internal error, silent
non-finite, exit 0 on bad input, left file, removed or changed file outside, timeout or other failure; 1 when the
rest are unclear errors, good inputs refused, runs saved on an error, setup failures or cases not run (--budget).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import typing
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.damage import edit_json, nan_tensor, symlink  # noqa: E402

TOY = "ioi-attn-1l2h"
P = "N1 and N2 then N2"  # a prompt in the toy's vocabulary (5 tokens = its context)
GOOD_CLASSES = ("clear-error", "ok", "not-run")  # not flagged in the listing (not-run: --budget spent)
PASS_CLASSES = ("clear-error", "ok")  # the only classes an exit status 0 allows
FAILURE_CLASSES = ("traceback", "internal-error", "silent-non-finite", "timeout", "other-exit", "left-files",
                   "deleted-outside", "accepted-bad", "changed-outside")
ANSWER_WITHIN_S = 30  # an error case that takes longer is counted a hang in the tally


@dataclass
class Case:
    name: str
    args: list[str]
    expect: str = "error"  # "error" or "ok"
    words: tuple[str, ...] = ()  # the error line must name these
    group: str = "usual"
    timeout: float = 180
    slow: bool = False
    setup: Any = None  # fn(store: Path) run before the case, in its run store
    stdin: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # extra environment of this case
    result: dict[str, Any] = field(default_factory=dict)


# -- files -------------------------------------------------------------------------------------------

def png(w: int, h: int, bits_zero: bool = True) -> bytes:
    """A real 1-bit PNG of w x h black pixels, built row by row (a 20000 x 20000 one is about 400 KB)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    comp = zlib.compressobj(9)
    row = b"\x00" * (1 + (w + 7) // 8)
    body = b"".join(comp.compress(row) for _ in range(h)) + comp.flush()
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 1, 0, 0, 0, 0))
            + chunk(b"IDAT", body) + chunk(b"IEND", b""))


def make_files(d: Path) -> dict[str, str]:
    import numpy as np
    from PIL import Image
    from safetensors.torch import load_file, save_file

    from core.models.zoo import DATA_DIR

    d.mkdir(parents=True, exist_ok=True)
    f: dict[str, str] = {}

    def jsonl(name: str, rows: list[Any], raw: str | None = None, prefix: bytes = b"") -> None:
        text = raw if raw is not None else "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        (d / name).write_bytes(prefix + text.encode("utf-8"))
        f[name] = str(d / name)

    good = [{"prompt": P, "target": "N1", "foil": "N2"}, {"prompt": "N3 and N4 then N4", "target": "N3",
                                                          "foil": "N4"}]
    jsonl("good.jsonl", good)
    jsonl("u2028.jsonl", [{**r, "note": "a\u2028b\u2029c\u0085d"} for r in good])
    jsonl("bom.jsonl", good, prefix=b"\xef\xbb\xbf")
    jsonl("malformed.jsonl", [], raw='{"prompt": "N1 and N2 then N2", "target": "N1"}\n{not json\n')
    jsonl("empty.jsonl", [], raw="")
    jsonl("notobject.jsonl", [], raw="[1, 2]\n")
    jsonl("notarget.jsonl", [{"prompt": P}])
    jsonl("emptyprompt.jsonl", [{"prompt": "", "target": "N1"}])
    jsonl("multitoken.jsonl", [{"prompt": P, "target": "N1 N2"}])
    jsonl("foilsame.jsonl", [{"prompt": P, "target": "N1", "foil": "N1"}])
    jsonl("nofoil.jsonl", [{"prompt": P, "target": "N1", "corrupt": "N3 and N4 then N4"}])
    jsonl("badcorrupt.jsonl", [{"prompt": P, "target": "N1", "foil": "N2", "corrupt": "N3 and N4"}])
    jsonl("tinyp.jsonl", [{"prompt": P, "target": "N2"}, {"prompt": P, "target": "N1"}])  # p(N2) ~ 1e-30
    jsonl("binary.jsonl", [], raw="")
    (d / "binary.jsonl").write_bytes(b"\xff\xfe\x00garbage\x00\n")
    labels = [{"text": f"N{i} and N{(i + 1) % 20} then N{(i + 1) % 20}", "label": "ab"[i % 2]} for i in range(16)]
    jsonl("dataset.jsonl", labels)
    jsonl("dataset-int-labels.jsonl", [{**r, "label": i % 2} for i, r in enumerate(labels)])
    jsonl("nanfield.jsonl", [], raw=json.dumps(good[0]) + "\n" + json.dumps({**good[1], "weight": 1.5}).replace(
        "1.5", "NaN") + "\n")
    jsonl("dataset1class.jsonl", [{**r, "label": "a"} for r in labels])

    # images
    for name, value in (("nan", float("nan")), ("inf", float("inf")), ("huge", 1e30), ("neg", -1.0)):
        arr = np.full((3, 32, 32), 0.5, dtype=np.float32)
        arr[0, 0, 0] = value
        np.save(d / f"img_{name}.npy", arr)
        f[f"img_{name}.npy"] = str(d / f"img_{name}.npy")
    np.save(d / "img_good.npy", np.full((3, 32, 32), 0.5, dtype=np.float32))
    f["img_good.npy"] = str(d / "img_good.npy")
    np.save(d / "img_batch.npy", np.full((2, 3, 32, 32), 0.5, dtype=np.float32))  # a batch, not one image
    f["img_batch.npy"] = str(d / "img_batch.npy")
    np.save(d / "img_4d1.npy", np.full((1, 3, 32, 32), 0.5, dtype=np.float32))
    f["img_4d1.npy"] = str(d / "img_4d1.npy")
    np.save(d / "img_object.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
    f["img_object.npy"] = str(d / "img_object.npy")
    Image.new("RGB", (32, 32), (200, 30, 30)).save(d / "good.png")
    f["good.png"] = str(d / "good.png")
    Image.new("RGB", (48, 40), (200, 30, 30)).save(d / "wrongsize.png")
    f["wrongsize.png"] = str(d / "wrongsize.png")
    (d / "bomb.png").write_bytes(png(20000, 20000))
    f["bomb.png"] = str(d / "bomb.png")
    (d / "big.png").write_bytes(png(12000, 12000))
    f["big.png"] = str(d / "big.png")
    (d / "notimage.png").write_bytes(b"this is not an image")
    f["notimage.png"] = str(d / "notimage.png")
    (d / "truncated.png").write_bytes((d / "good.png").read_bytes()[:60])
    f["truncated.png"] = str(d / "truncated.png")

    # model folders
    src = DATA_DIR / "models" / TOY
    nan_dir = d / "nan-model"
    shutil.copytree(src, nan_dir)
    t = load_file(str(nan_dir / "model.safetensors"))
    key = next(k for k, v in t.items() if v.is_floating_point() and v.numel() > 1)
    t[key] = t[key].clone()
    t[key].view(-1)[0] = float("nan")
    save_file(t, str(nan_dir / "model.safetensors"))
    f["nan-model"] = str(nan_dir)
    sharp = d / "sharp-model"  # finite weights, logits x 4: a wrong name's p(target) underflows to 0
    shutil.copytree(src, sharp)
    t = load_file(str(sharp / "model.safetensors"))
    t["unembed.W_U"] = t["unembed.W_U"] * 4
    save_file(t, str(sharp / "model.safetensors"))
    f["sharp-model"] = str(sharp)
    for loader in ("this:nothing", "os:system"):
        m = d / f"loader-{loader.split(':')[0]}"
        m.mkdir()
        (m / "config.json").write_text(json.dumps({"workbench": {"loader": loader}}))
        f[f"loader-{loader.split(':')[0]}"] = str(m)
    (d / "emptydir").mkdir()
    f["emptydir"] = str(d / "emptydir")
    (d / "out").mkdir()
    f["outdir"] = str(d / "out")
    shutil.copytree(src, d / "models-copy" / TOY)
    f["model-copy"] = str(d / "models-copy" / TOY)
    (d / "existing.txt").write_text("x")
    f["existing.txt"] = str(d / "existing.txt")
    (d / "oracle.py").write_text("def f(x):\n    return float('nan')\n")
    f["oracle.py"] = str(d / "oracle.py")
    make_saved_files(d, f)
    return f


# -- files the workbench wrote, damaged (issue 29) -------------------------------------------------------------

def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[:20])


def _zero(p: Path) -> None:
    p.write_bytes(b"\0" * p.stat().st_size)


def _garbage(p: Path) -> None:
    p.write_bytes(bytes((i * 97 + 13) % 256 for i in range(300)))


def make_saved_files(d: Path, f: dict[str, str]) -> None:
    """A circuit run (its own store, copied into each case's), a toy SAE with dashboards and damaged copies,
    a tiny model folder with damaged copies."""
    import torch

    import workbench as wb
    from attribution.sae.dashboard import build_dashboards
    from attribution.sae.train import save_sae, training_sae
    from attribution.sae.units import open_dictionary
    from circuits.toy.prompts import task_rows
    from core.models.tiny import save_tiny

    store = d / "circuit-store"
    saved_circuit(store)
    f["circuit-store"] = str(store)

    m = wb.load(TOY)
    hook = "blocks.0.hook_resid_post"
    saes = d / "saes"

    def sae(name: str) -> Path:
        torch.manual_seed(0)
        return save_sae(training_sae("topk", m.arch.d_model, 16, k=4, model=TOY, hook=hook), saes / name,
                        {"model": TOY, "hook": hook, "kind": "topk", "k": 4, "layer": 0,
                         "metrics": {"explained_variance": 0.5, "l0": 4.0}})

    good = sae("good")
    [db] = build_dashboards(m, [open_dictionary(good)], n_tokens=100, ctx=5,
                            texts=[r["prompt"] for r in task_rows(m, 64)])
    db.save(good)
    f["sae-good"] = str(good)
    damage = {
        "cfg-list": lambda p: (p / "cfg.json").write_text("[1, 2]"),
        "d-sae-1e9": lambda p: edit_json(p / "cfg.json", lambda c: c.update(d_sae=10**9)),
        "layer-abc": lambda p: edit_json(p / "workbench.json", lambda i: i.update(layer="abc")),
        "metrics-nan": lambda p: (p / "workbench.json").write_text(
            (p / "workbench.json").read_text().replace('"l0": 4.0', '"l0": NaN')),
        "weights-nan": lambda p: nan_tensor(p / "sae_weights.safetensors", "W_dec"),
        "weights-truncated": lambda p: _truncate(p / "sae_weights.safetensors"),
        "cfg-symlink": lambda p: symlink(p / "cfg.json"),
        "kind-bogus": lambda p: edit_json(p / "workbench.json", lambda i: i.update(kind="bogus")),
        "no-workbench-json-no-hook": lambda p: ((p / "workbench.json").unlink(),
                                                edit_json(p / "cfg.json", lambda c: c["metadata"].pop("hook_name"))),
        "no-workbench-json": lambda p: (p / "workbench.json").unlink(),  # SAELens' own metadata names it
    }
    for name, fn in damage.items():
        fn(sae(name))
        f[f"sae-{name}"] = str(saes / name)
    shutil.rmtree(saes / "good-copy", ignore_errors=True)
    for name, fn in {"truncated": _truncate, "zeroed": _zero, "garbage": _garbage, "symlink": symlink,
                     "nan": lambda p: nan_tensor(p, "density")}.items():
        copy = d / "dash" / name
        shutil.copytree(good, copy)
        fn(copy / "dashboards.safetensors")
        f[f"dash-{name}"] = str(copy)

    from core.models.zoo import DATA_DIR

    for name, fn in {"layers-1e9": lambda p: edit_json(p / "config.json", lambda c: c["model"].update(layers=10**9)),
                     "weights-garbage": lambda p: _garbage(p / "model.safetensors")}.items():
        copy = d / "toy" / name
        shutil.copytree(DATA_DIR / "models" / TOY, copy)
        fn(copy)
        f[f"toy-{name}"] = str(copy)
    tiny = save_tiny(d / "tiny" / "good", name="tiny-bad-inputs")
    for name, fn in {"truncated": lambda p: _truncate(p / "model.safetensors"),
                     "garbage": lambda p: _garbage(p / "model.safetensors"),
                     "layers-1e9": lambda p: edit_json(p / "config.json", lambda c: c["tiny"].update(layers=10**9)),
                     "config-list": lambda p: (p / "config.json").write_text("[1]")}.items():
        copy = d / "tiny" / name
        shutil.copytree(tiny, copy)
        fn(copy)
        f[f"tiny-{name}"] = str(copy)


def damaged_circuit(files: dict[str, str], change):
    """A case setup: the saved circuit run copied into the case's store, then damaged by change(run_dir)."""

    def setup(store: Path) -> None:
        shutil.copytree(files["circuit-store"], store, symlinks=True)
        change(store / circuit_run_id(store))

    return setup


def equal_counterfactuals(run: Path) -> None:
    rows = [json.loads(line) for line in (run / "prompts.jsonl").read_text().splitlines() if line]
    (run / "prompts.jsonl").write_text("".join(json.dumps({**r, "corrupt": r["prompt"]}) + "\n" for r in rows))


BAD_JOB = "20260101-120000-sleep-abcdef"


def job_record(**change: Any):
    """A case setup: one job record in the case's store, a sound one changed by ``change`` (a key set to
    None is removed; "raw" replaces the whole file's text)."""

    def setup(store: Path) -> None:
        jobs = store / ".jobs"
        jobs.mkdir(parents=True, exist_ok=True)
        rec = {"id": BAD_JOB, "kind": "sleep", "label": "sleep 1 s", "spec": {"kind": "sleep"}, "state": "done",
               "created": "2026-01-01T12:00:00.000+00:00", "started": None, "finished": None, "done": 2,
               "total": 2, "eta_s": None, "estimate_s": None, "workers": 1, "ray_address": None, "run_id": None,
               "error": None, "log": [], "driver": {"host": "elsewhere", "pid": 1}, "key": ""}
        good = {**rec, "id": "20260101-110000-sleep-000000"}
        (jobs / f"{good['id']}.json").write_text(json.dumps(good))
        raw = change.pop("raw", None)
        for k, v in change.items():
            if v is None:
                rec.pop(k, None)
            else:
                rec[k] = v
        (jobs / f"{BAD_JOB}.json").write_text(raw if raw is not None else json.dumps(rec))

    return setup


def start_http_server() -> str:
    """A plain HTTP server on 127.0.0.1 for the Ray cases (it accepts TCP but is no Ray head)."""
    import http.server
    import threading

    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"127.0.0.1:{server.server_address[1]}"


# -- run-store damage (each case gets its own store) ----------------------------------------------------

def _fake_run(store: Path, run_id: str, meta: Any, raw: str | None = None) -> Path:
    run = store / run_id
    run.mkdir(parents=True)
    (run / "meta.json").write_text(raw if raw is not None else json.dumps(meta))
    return run


DAMAGED = "20250101-120000-attribute-abc123"


def meta_list(store: Path) -> None:
    _fake_run(store, DAMAGED, [1, 2])


def meta_created_dict(store: Path) -> None:
    _fake_run(store, DAMAGED, {"id": DAMAGED, "created": {"x": 1}, "kind": "attribute"})


def meta_invalid(store: Path) -> None:
    _fake_run(store, DAMAGED, None, raw="{not json")


def garbage_index(store: Path) -> None:
    store.mkdir(parents=True, exist_ok=True)
    (store / "index.sqlite").write_text("garbage")


def symlinked_run(store: Path) -> None:
    outside = store.parent / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "meta.json").write_text(json.dumps({"id": DAMAGED, "created": "2025-01-01T12:00:00+00:00",
                                                   "kind": "attribute", "secret": "outside the store"}))
    store.mkdir(parents=True, exist_ok=True)
    (store / DAMAGED).symlink_to(outside, target_is_directory=True)


def saved_circuit(store: Path) -> None:
    # one torch thread: a toy's circuit on a loaded machine took minutes with every core's threads spinning
    env = dict(os.environ, WORKBENCH_RUNS=str(store), OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, "-m", "workbench.cli", "circuit", "discover", "--model", TOY, "--prompts",
                    "task", "--edges", "5", "--no-evaluate", "--limit", "8", "--json"], env=env, cwd=ROOT,
                   capture_output=True, timeout=300, check=True)


def circuit_run_id(store: Path) -> str:
    return next(p.name for p in store.iterdir() if "circuit" in p.name and not p.name.startswith("."))


# -- the catalogue -------------------------------------------------------------------------------------

def catalogue(f: dict[str, str]) -> list[Case]:
    A = ["attribute", TOY, P, "--target", "N1"]
    FA = ["faithfulness", "--model", TOY, "--prompts", f["good.jsonl"], "--methods", "dpa,random"]
    C: list[Case] = []

    def add(name, args, expect="error", words=(), group="usual", **kw):
        C.append(Case(name, list(args), expect, tuple(words), group, **kw))

    # item 5: finite numbers or a clear error
    g = "5 non-finite"
    add("NaN weights in a model", ["attribute", f["nan-model"], P, "--target", "N1", "--json"],
        words=["non-finite weights"], group=g)
    add("--param w_q=nan", A + ["--param", "w_q=nan", "--json"], words=["w_q=nan"], group=g)
    add("--param w_v=-inf", A + ["--param", "w_v=-inf", "--json"], words=["finite"], group=g)
    add("--param w_q=1e999", A + ["--param", "w_q=1e999", "--json"], words=["finite"], group=g)
    add("concepts --scale nan", ["concepts", "--model", TOY, "--dataset", f["dataset.jsonl"], "--scale", "nan"],
        words=["--scale"], group=g)
    add("concepts --scale inf", ["concepts", "--model", TOY, "--dataset", f["dataset.jsonl"], "--scale", "inf"],
        words=["--scale"], group=g)
    for k in ("nan", "inf", "huge", "neg"):
        add(f"vit-explain image with {k} values", ["vit-explain", f[f"img_{k}.npy"], "--json"],
            words=["image"], group=g)
    add("vit-explain a good .npy image", ["vit-explain", f["img_good.npy"], "--json"], "ok", group=g)
    add("vit-explain a good PNG", ["vit-explain", f["good.png"], "--json"], "ok", group=g)
    add("train --lr inf", ["train", "ioi", "--out", "toy-out", "--lr", "inf"], words=["--lr"], group=g)
    add("train --lr 1e30 (diverges)", ["train", "ioi", "--out", "toy-div", "--lr", "1e30", "--steps", "3",
                                       "--json"], words=["diverged"], group=g, timeout=400)
    add("train-vit --lr nan", ["train-vit", "--lr", "nan"], words=["--lr"], group=g)
    add("faithfulness, p(target) ~ 1e-30 (finite, large ratios)",
        ["faithfulness", "--model", TOY, "--prompts", f["tinyp.jsonl"], "--methods", "dpa,random", "--json"],
        "ok", group=g)
    add("faithfulness, p(target) = 0 in float32 (left out, counted)",
        ["faithfulness", "--model", f["sharp-model"], "--prompts", f["tinyp.jsonl"], "--methods",
         "dpa,gradient,random", "--json"], "ok", group=g)
    add("faithfulness, every p(target) = 0", ["faithfulness", "--model", f["sharp-model"], "--prompts",
                                              f["tinyp.jsonl"], "--limit", "1", "--methods", "dpa", "--json"],
        words=["no example has a defined"], group=g)
    add("faithfulness --param ig.steps=NaN", FA + ["--param", "ig.steps=NaN"], words=["ig.steps"], group=g)
    add("recover-heads --oracle returning NaN", ["recover-heads", "--d", "2", "--heads", "1", "--oracle",
                                                 f"{f['oracle.py']}:f", "--json"], group=g)
    add("recover-heads --noise nan", ["recover-heads", "--d", "3", "--heads", "2", "--noise", "nan"],
        words=["--noise"], group=g)

    # item 6: undefined normalisation
    add("patch: identical clean and corrupted", ["patch", TOY, P, P, "--target", "N1", "--foil", "N2"],
        words=["same"], group="6 patch")

    # item 7: the issue's list (parse-time checks)
    g = "7 options"
    add("attribute --top -5", A + ["--top", "-5"], words=["--top"], group=g)
    add("probe --layers 5-2", ["probe", "--model", TOY, "--dataset", f["dataset.jsonl"], "--layers", "5-2"],
        words=["--layers"], group=g)
    add("vit-eval --batch-size 0", ["vit-eval", "--batch-size", "0"], words=["--batch-size"], group=g)
    add("vit-eval --batch-size -1", ["vit-eval", "--batch-size", "-1"], words=["--batch-size"], group=g)
    add("vit-eval --seed -1", ["vit-eval", "--seed", "-1"], words=["--seed"], group=g)
    add("attribute --param steps=inf", A + ["--method", "ig", "--param", "steps=inf"], words=["steps=inf"],
        group=g)
    add("attribute --param steps=-3", A + ["--method", "ig", "--param", "steps=-3"], words=["steps"], group=g)
    add("attribute --param steps=0", A + ["--method", "ig", "--param", "steps=0"], words=["steps"], group=g)
    add("attribute --param steps=1.5", A + ["--method", "ig", "--param", "steps=1.5"], words=["steps"], group=g)
    add("attribute --param nosuch=1", A + ["--param", "nosuch=1"], words=["nosuch"], group=g)
    add("sae features --tokens 0", ["sae", "features", "--sae", "nosae", "--tokens", "0"], words=["--tokens"],
        group=g)
    add("non-UTF-8 prompt argument", ["attribute", TOY, "N1 \udcff\udcfe", "--target", "N1"],
        words=["UTF-8"], group=g)
    add("train-vit --out EXISTING_FILE", ["train-vit", "--out", f["existing.txt"], "--steps", "1"],
        words=["not a directory"], group=g, timeout=300)
    add("train --out EXISTING_FILE", ["train", "ioi", "--out", f["existing.txt"], "--steps", "1"],
        words=["not a directory"], group=g)
    add("recover-heads --d 3 --heads 2 --noise 1e-3", ["recover-heads", "--d", "3", "--heads", "2", "--noise",
                                                       "1e-3", "--json"], group=g, timeout=300)
    add("attribute-set --batch-size -3", ["attribute-set", "--model", TOY, "--prompts", f["good.jsonl"],
                                          "--batch-size", "-3"], words=["--batch-size"], group=g)
    add("sae corpus --chars -1", ["sae", "corpus", "--chars", "-1"], words=["--chars"], group=g)
    add("concepts --n-steer -1", ["concepts", "--model", TOY, "--dataset", f["dataset.jsonl"], "--n-steer",
                                  "-1"], words=["--n-steer"], group=g)
    add("app --port 99999", ["app", "--port", "99999"], words=["--port"], group=g)
    add("app --host not-an-address", ["app", "--host", "999.1.1.300"], words=["--host"], group=g)

    # item 9: images
    g = "9 images"
    add("vit-explain 20000 x 20000 PNG (388 KB)", ["vit-explain", f["bomb.png"], "--json"], words=["limit"],
        group=g)
    add("vit-explain 12000 x 12000 PNG", ["vit-explain", f["big.png"], "--json"], words=["limit"], group=g)
    add("vit-explain not an image", ["vit-explain", f["notimage.png"]], words=["cannot read"], group=g)
    add("vit-explain truncated PNG", ["vit-explain", f["truncated.png"]], words=["truncated.png"], group=g)
    add("vit-explain pickled .npy", ["vit-explain", f["img_object.npy"]], words=["img_object.npy"], group=g)
    add("vit-explain wrong size", ["vit-explain", f["wrongsize.png"], "--model", "vit-synth"],
        words=["48x40", "32x32", "dinov2-small"], group=g)  # without --model the image picks dinov2-small
    add("vit-explain missing file", ["vit-explain", "nosuch.png"], words=["does not exist"], group=g)

    # the run store (items 1-3)
    g = "1-3 run store"
    add("meta.json [1,2]: runs list", ["runs", "list", "--json"], "ok", group=g, setup=meta_list)
    add("meta.json [1,2]: runs list --damaged", ["runs", "list", "--damaged", "--json"], "ok", group=g,
        setup=meta_list)
    add("meta.json [1,2]: runs show", ["runs", "show", DAMAGED], words=[DAMAGED], group=g, setup=meta_list)
    add("meta.json [1,2]: runs rm", ["runs", "rm", DAMAGED], "ok", group=g, setup=meta_list)
    add("created {x:1}: runs list", ["runs", "list"], "ok", group=g, setup=meta_created_dict)
    add("invalid meta.json: runs rm", ["runs", "rm", DAMAGED], "ok", group=g, setup=meta_invalid)
    add("garbage index.sqlite: attribute saves and prints", A + ["--json"], "ok", group=g, setup=garbage_index)
    add("garbage index.sqlite: runs list", ["runs", "list"], "ok", group=g, setup=garbage_index)
    add("symlinked run: runs show", ["runs", "show", DAMAGED], words=[DAMAGED], group=g, setup=symlinked_run)
    add("symlinked run: runs rm", ["runs", "rm", DAMAGED], "ok", group=g, setup=symlinked_run)
    for rid in ("../../etc", "../x", "/etc/passwd", ".", "..", "a/b", ".tmp-x", ""):
        add(f"runs show {rid!r}", ["runs", "show", rid], group=g)
        add(f"runs rm {rid!r}", ["runs", "rm", rid], group=g)
    add("runs show missing id", ["runs", "show", "20250101-000000-x-abcdef"], words=["20250101"], group=g)

    # item 4: loaders
    g = "4 loaders"
    add("config.json loader this:nothing", ["info", f["loader-this"], "--json"], words=["unknown loader"],
        group=g)
    add("config.json loader os:system", ["info", f["loader-os"], "--json"], words=["unknown loader"], group=g)
    add("empty model directory", ["info", f["emptydir"]], group=g)

    # item 8: JSONL
    g = "8 JSONL"
    add("U+2028 in a JSONL row", ["attribute-set", "--model", TOY, "--prompts", f["u2028.jsonl"], "--json",
                                  "--no-save"], "ok", group=g)
    add("BOM JSONL", ["attribute-set", "--model", TOY, "--prompts", f["bom.jsonl"], "--json", "--no-save"], "ok",
        group=g)
    add("malformed JSONL", ["attribute-set", "--model", TOY, "--prompts", f["malformed.jsonl"]],
        words=["malformed.jsonl:2"], group=g)
    add("empty JSONL", ["faithfulness", "--model", TOY, "--prompts", f["empty.jsonl"], "--methods", "dpa"],
        group=g)
    add("JSONL row not an object", ["attribute-set", "--model", TOY, "--prompts", f["notobject.jsonl"]],
        group=g)
    add("JSONL row without target", ["attribute-set", "--model", TOY, "--prompts", f["notarget.jsonl"]],
        words=["target"], group=g)
    add("JSONL empty prompt", ["attribute-set", "--model", TOY, "--prompts", f["emptyprompt.jsonl"]], group=g)
    add("JSONL multi-token target", ["faithfulness", "--model", TOY, "--prompts", f["multitoken.jsonl"],
                                     "--methods", "dpa"], group=g)
    add("JSONL foil = target", ["faithfulness", "--model", TOY, "--prompts", f["foilsame.jsonl"], "--methods",
                                "dpa"], group=g)
    add("binary prompt file", ["attribute-set", "--model", TOY, "--prompts", f["binary.jsonl"]], group=g)
    add("missing prompt file", ["attribute-set", "--model", TOY, "--prompts", "nosuch.jsonl"],
        words=["nosuch.jsonl"], group=g)
    add("prompt file is a directory", ["attribute-set", "--model", TOY, "--prompts", f["emptydir"]], group=g)

    # the usual bad inputs
    g = "usual"
    add("attribute ok", A + ["--foil", "N2", "--json"], "ok", group=g)
    add("unknown model", ["attribute", "nosuch-model", P, "--target", "N1"], words=["nosuch-model"], group=g)
    add("unknown method", A + ["--method", "nosuch"], words=["nosuch"], group=g)
    add("unknown level", A + ["--level", "nosuch"], words=["nosuch"], group=g)
    add("method without that level", A + ["--method", "ig", "--level", "head"], words=["head"], group=g)
    add("empty prompt", ["attribute", TOY, "", "--target", "N1"], words=["empty"], group=g)
    add("whitespace prompt", ["attribute", TOY, "   ", "--target", "N1"], words=["empty"], group=g)
    add("prompt longer than the context", ["attribute", TOY, P + " and N3", "--target", "N1"], group=g)
    add("symbol not in vocabulary", ["attribute", TOY, "When Mary and John", "--target", "N1"], group=g)
    add("multi-token target", ["attribute", TOY, P, "--target", "N1 N2"], group=g)
    add("empty target", ["attribute", TOY, P, "--target", ""], group=g)
    add("foil = target", A + ["--foil", "N1"], group=g)
    add("unknown device", A + ["--device", "tpu"], words=["tpu"], group=g)
    add("cuda absent", A + ["--device", "cuda"], words=["cuda"], group=g)
    add("--param without =", A + ["--param", "w_q"], words=["key=value"], group=g)
    add("info unknown model", ["info", "nosuch-model"], words=["nosuch-model"], group=g)
    add("generate --max-new-tokens 0", ["generate", TOY, P, "--max-new-tokens", "0"], words=["--max-new-tokens"],
        group=g)
    add("ablate head out of range", ["ablate", TOY, "-c", "head:0.7"], words=["out of range"], group=g)
    add("ablate layer out of range", ["ablate", TOY, "-c", "head:3.0"], words=["out of range"], group=g)
    add("ablate MLP of a model without one", ["ablate", TOY, "-c", "mlp:0"], group=g)
    add("ablate bad component syntax", ["ablate", TOY, "-c", "nonsense"], group=g)
    add("ablate unknown method", ["ablate", TOY, "--method", "nosuch"], group=g)
    add("patch: different lengths", ["patch", TOY, P, "N1 and N2", "--target", "N1"], group=g)
    add("patch: unknown site", ["patch", TOY, P, "N3 and N4 then N4", "--target", "N1", "--site", "x"],
        words=["x"], group=g)
    add("probe unknown hook", ["probe", "--model", TOY, "--dataset", f["dataset.jsonl"], "--hook", "nope"],
        words=["nope"], group=g)
    add("probe layer out of range", ["probe", "--model", TOY, "--dataset", f["dataset.jsonl"], "--layers", "9"],
        words=["out of range"], group=g)
    add("probe one-class dataset", ["probe", "--model", TOY, "--dataset", f["dataset1class.jsonl"]], group=g)
    add("probe missing dataset", ["probe", "--model", TOY, "--dataset", "nosuch.jsonl"], group=g)
    add("probe unknown pooling", ["probe", "--model", TOY, "--dataset", f["dataset.jsonl"], "--pooling", "x"],
        group=g)
    add("probe ok", ["probe", "--model", TOY, "--dataset", f["dataset.jsonl"], "--json"], "ok", group=g)
    add("concepts unknown concept", ["concepts", "--model", TOY, "--dataset", f["dataset.jsonl"], "--concept",
                                     "zzz"], words=["zzz"], group=g)
    add("faithfulness unknown level", FA + ["--level", "edge"], group=g)
    add("faithfulness unknown ablation", FA + ["--ablation", "x"], group=g)
    add("faithfulness unknown rank", FA + ["--rank", "x"], group=g)
    add("faithfulness bad grid", FA + ["--grid", "0.5,2"], group=g)
    add("faithfulness grid with nan", FA + ["--grid", "0,nan,1"], group=g)
    add("faithfulness empty methods", ["faithfulness", "--model", TOY, "--prompts", f["good.jsonl"],
                                       "--methods", ","], group=g)
    add("faithfulness method twice", FA[:-1] + ["dpa,dpa"], group=g)
    add("faithfulness --param bad form", FA + ["--param", "steps=3"], group=g)
    add("faithfulness ok", FA + ["--json", "--no-save"], "ok", group=g)
    add("vit-eval unknown dataset", ["vit-eval", "--dataset", "x", "--n", "2"], words=["x"], group=g)
    add("vit-eval non-ViT model", ["vit-eval", "--model", TOY, "--n", "2"], words=["vision"], group=g)
    add("vit-eval unknown method", ["vit-eval", "--methods", "nosuch", "--n", "2"], words=["nosuch"], group=g)
    add("vit-explain unknown method", ["vit-explain", f["good.png"], "--method", "nosuch"], words=["nosuch"],
        group=g)
    add("vit-explain class out of range", ["vit-explain", f["good.png"], "--target", "99"], group=g)
    add("train unknown task", ["train", "nosuch", "--out", "x"], words=["nosuch"], group=g)
    add("train unknown ffn", ["train", "ioi", "--out", "x", "--ffn", "nosuch"], group=g)
    add("train heads not dividing d_model", ["train", "ioi", "--out", "x", "--heads", "3", "--d-model", "32"],
        group=g)
    add("train bad --task-param", ["train", "ioi", "--out", "x", "--task-param", "nonsense"], group=g)
    add("train unknown --task-param", ["train", "ioi", "--out", "x", "--task-param", "zz=1"], group=g)
    add("train-vit unknown dataset", ["train-vit", "--dataset", "x"], group=g)
    add("sae train unknown kind", ["sae", "train", "--model", TOY, "--hook", "blocks.0.hook_resid_post",
                                   "--kind", "x"], group=g)
    add("sae train unknown hook", ["sae", "train", "--model", TOY, "--hook", "nope", "--tokens", "256"],
        words=["nope"], group=g)
    add("sae train too few tokens", ["sae", "train", "--model", TOY, "--hook", "blocks.0.hook_resid_post",
                                     "--tokens", "10"], group=g)
    add("sae eval missing SAE", ["sae", "eval", "--sae", "nosuch-sae"], group=g)
    add("sae features missing SAE", ["sae", "features", "--sae", "nosuch-sae", "--feature", "0"], group=g)
    add("sae features SAE dir is not one", ["sae", "features", "--sae", f["emptydir"], "--feature", "0"], group=g)
    add("recover-heads ok", ["recover-heads", "--d", "2", "--heads", "1", "--json", "--no-save"], "ok", group=g,
        timeout=300)
    add("recover-heads bound below heads", ["recover-heads", "--d", "2", "--heads", "2", "--bound", "1"],
        group=g, timeout=300)
    add("recover-heads --ffn without --d", ["recover-heads", "--ffn"], group=g)
    add("recover-heads unknown model", ["recover-heads", "--model", "nosuch"], group=g)
    add("recover-heads bad oracle spec", ["recover-heads", "--d", "2", "--heads", "1", "--oracle", "nosuch:f"],
        group=g)
    add("icl-readout on a non-ICL model", ["icl-readout", "--model", TOY, "--n", "8", "--n-train", "8"],
        group=g)

    # circuits
    g = "circuits"
    CD = ["circuit", "discover", "--model", TOY]
    add("circuit discover unknown method", CD + ["--prompts", "task", "--method", "nosuch"], words=["nosuch"],
        group=g)
    add("circuit discover corrupt of another length", CD + ["--prompts", f["badcorrupt.jsonl"]], group=g)
    add("circuit discover missing foil", CD + ["--prompts", f["nofoil.jsonl"], "--metric", "logit_diff"],
        group=g)
    add("circuit discover --edges 0", CD + ["--prompts", "task", "--edges", "0"], words=["--edges"], group=g)
    add("circuit discover bad grid", CD + ["--prompts", "task", "--grid", "0,-1"], group=g)
    add("circuit discover unknown ablation", CD + ["--prompts", "task", "--ablation", "x"], group=g)
    add("circuit discover unknown param", CD + ["--prompts", "task", "--param", "zz=1"], group=g)
    add("circuit discover --param steps=nan", CD + ["--prompts", "task", "--method", "eap_ig", "--param",
                                                   "steps=nan"], words=["steps"], group=g)
    add("circuit discover ok", CD + ["--prompts", "task", "--edges", "5", "--limit", "8", "--json", "--no-save"],
        "ok", group=g, timeout=300)
    add("circuit evaluate --keep unknown edge", ["circuit", "evaluate", "--run", "{circuit}", "--keep",
                                                 "L9.H9->L0.H0.q"], group=g, setup=saved_circuit, timeout=400)
    add("circuit evaluate --keep bad syntax", ["circuit", "evaluate", "--run", "{circuit}", "--keep", "nonsense"],
        group=g, setup=saved_circuit, timeout=400)
    add("circuit evaluate missing run", ["circuit", "evaluate", "--run", "nosuch"], group=g)

    # issue 29: every file the workbench reads may be damaged
    g = "29 damaged runs"
    EV = ["circuit", "evaluate", "--run", "{circuit}", "--json"]
    T = "tensors.safetensors"
    run_damage = {
        "tensors truncated": lambda r: _truncate(r / T), "tensors zeroed": lambda r: _zero(r / T),
        "tensors garbage": lambda r: _garbage(r / T), "tensors NaN": lambda r: nan_tensor(r / T),
        "tensors symlinked": lambda r: symlink(r / T),
        "meta args a string": lambda r: edit_json(r / "meta.json", lambda m: m.update(args="abc")),
        "meta n_layers 'abc'": lambda r: edit_json(r / "meta.json", lambda m: m["args"].update(n_layers="abc")),
        "meta n_layers 10^9": lambda r: edit_json(r / "meta.json", lambda m: m["args"].update(n_layers=10**9)),
        "meta timings 'abc'": lambda r: edit_json(r / "meta.json", lambda m: m.update(timings={"scoring": "abc"})),
        "meta edges 'abc'": lambda r: edit_json(r / "meta.json", lambda m: m["args"].update(edges="abc")),
        "faithfulness unknown key": lambda r: edit_json(r / "result.json", lambda x: x.update(faithfulness={
            "k": [1], "normalized": [0.5], "complement": [0.5], "metric_full": 1.0, "metric_empty": 0.0,
            "auc": 0.5, "bogus": 1})),
        "result.json a list": lambda r: (r / "result.json").write_text("[1]"),
        "prompts.jsonl garbage": lambda r: _garbage(r / "prompts.jsonl"),
    }
    for name, fn in run_damage.items():
        add(f"circuit evaluate, {name}", EV, words=["damaged" if "symlink" not in name else "symlink"], group=g,
            setup=damaged_circuit(f, fn))
    add("circuit evaluate, a sound copy", EV, "ok", group=g, setup=damaged_circuit(f, lambda r: None), timeout=400)
    add("circuit evaluate --keep, prompts = counterfactuals", EV + ["--keep", "L0.H0->logits"],
        words=["faithfulness is undefined"], group=g, setup=damaged_circuit(f, equal_counterfactuals), timeout=400)
    add("circuit evaluate, prompts = counterfactuals", EV, words=["faithfulness is undefined"], group=g,
        setup=damaged_circuit(f, equal_counterfactuals), timeout=400)

    g = "29 job records"
    records = {"a JSON list": {"raw": "[1, 2]"}, "missing label": {"label": None}, "driver a list": {"driver": [1]},
               "string ETA": {"eta_s": "soon", "state": "running"}, "spec a string": {"spec": "abc"},
               "unknown key": {"bogus": 1}, "truncated": {"raw": '{"id": "2026'}, "NaN ETA": {"raw": None}}
    for name, change in records.items():
        if name == "NaN ETA":
            change = {"raw": json.dumps({"id": BAD_JOB, "kind": "sleep", "label": "x", "spec": {},
                                         "created": "2026", "eta_s": 1.5}).replace("1.5", "NaN")}
        add(f"jobs list --json, record {name}", ["jobs", "list", "--json"], "ok", group=g, setup=job_record(**change))
        add(f"jobs list, record {name}", ["jobs", "list"], "ok", group=g, setup=job_record(**change))
        add(f"jobs show, record {name}", ["jobs", "show", BAD_JOB], words=[BAD_JOB], group=g,
            setup=job_record(**change))
    add("jobs list --damaged --json", ["jobs", "list", "--damaged", "--json"], "ok", group=g,
        setup=job_record(spec="abc"))

    g = "29 dictionaries"
    root = str(Path(f["sae-good"]).parent)
    add("sae list --root with damaged beside good", ["sae", "list", "--root", root, "--json"], "ok", group=g)
    add("sae list --root missing folder", ["sae", "list", "--root", str(Path(root) / "nosuch")],
        words=["missing"], group=g)
    add("sae list --root a file", ["sae", "list", "--root", f["existing.txt"]], words=["a file"], group=g)
    for name in ("cfg-list", "d-sae-1e9", "layer-abc", "metrics-nan", "weights-nan", "weights-truncated",
                 "cfg-symlink"):
        add(f"sae steer, dictionary {name}", ["sae", "steer", "--sae", f[f"sae-{name}"], "--feature", "0", "--prompt",
                                              "N1 and N2", "--alpha", "1", "--tokens", "1", "--json"], words=[name],
            group=g)
        add(f"feature-graph, dictionary {name}", ["feature-graph", "--model", TOY, "--prompt", P, "--saes",
                                                  f[f"sae-{name}"], "--no-save", "--json"], words=[name], group=g)
    add("sae steer, a sound dictionary", ["sae", "steer", "--sae", f["sae-good"], "--feature", "0", "--prompt",
                                          "N1 and N2", "--alpha", "1", "--tokens", "1", "--json"], "ok", group=g)
    add("sae steer --tokens 1000000", ["sae", "steer", "--sae", f["sae-good"], "--feature", "0", "--prompt", P,
                                       "--alpha", "1", "--tokens", "1000000"], words=["--tokens"], group=g)
    add("sae features, sound dashboards", ["sae", "features", "--sae", f["sae-good"], "--feature", "0", "--json"],
        "ok", group=g)
    for name in ("truncated", "zeroed", "garbage", "symlink", "nan"):
        add(f"sae features, dashboards {name}", ["sae", "features", "--sae", f[f"dash-{name}"], "--feature", "0",
                                                 "--json"], words=["dashboards"], group=g)
    add("sae train --out EXISTING_FILE", ["sae", "train", "--model", TOY, "--hook", "blocks.0.hook_resid_post",
                                          "--tokens", "256", "--out", f["existing.txt"]], words=["not a directory"],
        group=g)
    add("sae train --lr 1e30 (diverges)", ["sae", "train", "--model", TOY, "--hook", "blocks.0.hook_resid_post",
                                           "--tokens", "512", "--width", "16", "--k", "4", "--epochs", "1", "--lr",
                                           "1e30", "--json"], words=["not finite"], group=g, timeout=400)

    g = "29 models and lenses"
    for name in ("truncated", "garbage", "layers-1e9", "config-list"):
        add(f"info, tiny model folder {name}", ["info", f[f"tiny-{name}"], "--json"], group=g)
    for name in ("layers-1e9", "weights-garbage"):
        add(f"attribute, toy checkpoint {name}", ["attribute", f[f"toy-{name}"], P, "--target", "N1", "--json"],
            group=g)
    add("lens of a vision model", ["lens", "vit-synth", "a b", "--no-save", "--json"],
        words=["not for vision models"], group=g)
    add("lens-train of a vision model", ["lens-train", "vit-synth"], words=["not for vision models"], group=g)
    add("circuit discover --param steps=abc", CD + ["--prompts", "task", "--method", "eap_ig", "--param",
                                                   "steps=abc"], words=["steps"], group=g)

    g = "29 Ray"
    FW = ["faithfulness", "--model", TOY, "--prompts", f["good.jsonl"], "--methods", "random", "--json"]
    add("--ray-address where an HTTP server listens", FW + ["--ray-address", f["http"]],
        words=["not as a Ray head"], group=g, timeout=60)
    add("--ray-address ray://", FW + ["--ray-address", "ray://127.0.0.1:10001"], words=["not supported"], group=g)
    add("RAY_ADDRESS=127.0.0.1:1 with --workers 2", FW + ["--workers", "2"], words=["RAY_ADDRESS"], group=g,
        env={"RAY_ADDRESS": "127.0.0.1:1"}, timeout=120)

    # smollm2 (slow: loads the real model)
    g = "smollm2"
    S = ["attribute", "smollm2-135m", "The capital of France is"]
    add("smollm2 multi-token target", S + ["--target", " Parisian city"], group=g, slow=True, timeout=600)
    add("smollm2 foil = target", S + ["--target", " Paris", "--foil", " Paris"], group=g, slow=True,
        timeout=600)
    add("smollm2 ok", S + ["--target", " Paris", "--json", "--no-save"], "ok", group=g, slow=True, timeout=600)
    # issue 41's classes; D's and F's cases go in functions of their own, called here the same way
    for more in (issue41_cli_cases, store_cases, network_app_cases, replacement_graph_cases):
        C.extend(more(f))
    for c in C:  # the words of the cases written without them (the table below)
        if c.expect == "error" and not c.words:
            c.words = WORDS.get(c.name, ())
    return C


_LANGUAGE = ("vit-synth", "vision model", "language model")
# What the one error line must name for the cases above written without words: what the user typed wrong (the
# value, the file, the option) and what to do instead where the message can say it. Lower case suffices.
WORDS: dict[str, tuple[str, ...]] = {
    "recover-heads --oracle returning NaN": ("oracle", "non-finite"),
    "recover-heads --d 3 --heads 2 --noise 1e-3": ("noise", "--oversample"),
    **{f"runs {verb} {rid!r}": ("no run", rid) for verb in ("show", "rm")
       for rid in ("../../etc", "../x", "/etc/passwd", ".", "..", "a/b", ".tmp-x")},
    "runs show ''": ("run id",), "runs rm ''": ("run id",),
    "empty model directory": ("emptydir", "config.json"),
    "empty JSONL": ("empty.jsonl", "no prompts"),
    "JSONL row not an object": ("notobject.jsonl:1", '"prompt"', '"target"'),
    "JSONL empty prompt": ("emptyprompt.jsonl:1", "empty prompt"),
    "JSONL multi-token target": ("multitoken.jsonl:1", "'n1 n2'", "2 tokens"),
    "JSONL foil = target": ("foilsame.jsonl:1", "foil", "same token"),
    "binary prompt file": ("binary.jsonl", "utf-8"),
    "prompt file is a directory": ("emptydir", "directory"),
    "prompt longer than the context": ("7 tokens", "context of 5"),
    "symbol not in vocabulary": ("'when'", "vocabulary"),
    "multi-token target": ("target", "'n1 n2'", "2 tokens"),
    "empty target": ("--target", "empty"),
    "foil = target": ("foil", "same token"),
    "ablate MLP of a model without one": ("no mlp", "layer 0"),
    "ablate bad component syntax": ("'nonsense'", "head:l.h"),
    "ablate unknown method": ("'nosuch'", "zero", "mean", "resample"),
    "patch: different lengths": ("corrupted", "same number of tokens"),
    "probe one-class dataset": ("dataset1class.jsonl", "one class"),
    "probe missing dataset": ("nosuch.jsonl", "does not exist"),
    "probe unknown pooling": ("pooling 'x'", "last", "mean", "marked"),
    "faithfulness unknown level": ("level 'edge'", "token", "head", "neuron"),
    "faithfulness unknown ablation": ("ablation 'x'", "zero", "mean"),
    "faithfulness unknown rank": ("rank 'x'", "signed", "abs"),
    "faithfulness bad grid": ("grid", "0.5, 2.0"),
    "faithfulness grid with nan": ("grid", "nan"),
    "faithfulness empty methods": ("--methods", "empty"),
    "faithfulness method twice": ("--methods", "dpa", "more than once"),
    "faithfulness --param bad form": ("--param", "steps=3", "method.name=value"),
    "vit-explain class out of range": ("99", "out of range", "0..3"),
    "train unknown ffn": ("ffn 'nosuch'", "dense"),
    "train heads not dividing d_model": ("heads (3)", "d_model (32)"),
    "train bad --task-param": ("--task-param", "'nonsense'", "key=value"),
    "train unknown --task-param": ("'zz'", "ioi"),
    "train-vit unknown dataset": ("dataset 'x'", "synthetic"),
    "sae train unknown kind": ("kind 'x'", "topk"),
    "sae train too few tokens": ("--tokens", "256"),
    "sae eval missing SAE": ("nosuch-sae", "cfg.json"),
    "sae features missing SAE": ("nosuch-sae",),
    "sae features SAE dir is not one": ("emptydir",),
    "recover-heads bound below heads": ("bound", "heads"),
    "recover-heads --ffn without --d": ("--ffn", "--d", "--heads"),
    "recover-heads unknown model": ("'nosuch'", "known"),
    "recover-heads bad oracle spec": ("'nosuch:f'",),
    "icl-readout on a non-ICL model": ("ioi-attn-1l2h", "in-context regression"),
    "circuit discover corrupt of another length": ("prompt 1", "same number of tokens"),
    "circuit discover missing foil": ("prompt 1", "foil", "--metric"),
    "circuit discover bad grid": ("--grid", "0,-1"),
    "circuit discover unknown ablation": ("ablation 'x'", "corrupt"),
    "circuit discover unknown param": ("zz", "parameter"),
    "circuit evaluate --keep unknown edge": ("'l9.h9'",),
    "circuit evaluate --keep bad syntax": ("--keep", "'nonsense'"),
    "circuit evaluate missing run": ("'nosuch'", "no run"),
    "info, tiny model folder truncated": ("model.safetensors", "damaged"),
    "info, tiny model folder garbage": ("model.safetensors", "damaged"),
    "info, tiny model folder layers-1e9": ("config.json", "layers", "1000000000"),
    "info, tiny model folder config-list": ("config.json", "json object"),
    "attribute, toy checkpoint layers-1e9": ("config.json", "layers", "1000000000"),
    "attribute, toy checkpoint weights-garbage": ("model.safetensors", "corrupt"),
    "smollm2 multi-token target": ("' parisian city'", "3 tokens"),
    "smollm2 foil = target": ("foil", "same token"),
    "train --d-model 16384 (memory or hours)": ("16384", "memory"),
    "vit-explain --target 999": ("999", "out of range"),
    **{f"{cmd} on a vision model": _LANGUAGE for cmd in (
        "dla", "attribute", "faithfulness", "circuit discover", "probe", "concepts", "patch", "ablate", "sae train",
        "feature-graph", "sae eval", "sae dashboards", "sae steer neurons:0", "icl-readout")},
    "generate on a vision model": ("vit-synth", "vision model"),
    "recover-heads on a vision model": ("vit-synth", "not a toy attention model"),
    "concepts --sae ~nosuchuser/x": ("--sae", "~nosuchuser/x"),
}


def replacement_graph_cases(f: dict[str, str]) -> list[Case]:
    """Issue 38: transcoder sets and the replacement-model graph (refused before any model loads)."""
    C: list[Case] = []
    FG = ["feature-graph", "--model", "smollm2-135m", "--prompt", "a b", "--no-save"]
    for name, args, words in (
        ("build-set --kind topk", ["sae", "build-set", "--model", "smollm2-135m", "--kind", "topk"], ["transcoder"]),
        ("build-set --name a/b", ["sae", "build-set", "--model", "smollm2-135m", "--name", "a/b"], ["--name"]),
        ("build-set --massive-above 1", ["sae", "build-set", "--model", "smollm2-135m", "--massive-above", "1"],
         ["--massive-above", "at least 2"]),
        ("feature-graph --node-threshold 0", FG + ["--saes", "smollm2-135m-L6-transcoder2304", "--node-threshold",
                                                   "0"], ["--node-threshold"]),
        ("feature-graph --edge-threshold 1.5", FG + ["--saes", "smollm2-135m-L6-transcoder2304",
                                                     "--edge-threshold", "1.5"], ["--edge-threshold"]),
        ("feature-graph --method ig", FG + ["--saes", "smollm2-135m-L6-transcoder2304", "--method", "ig"],
         ["--method"]),
        ("feature-graph set:missing", FG + ["--saes", "set:no-such-set"], ["no dictionary set"]),
    ):
        C.append(Case(name, args, "error", tuple(words), "38 sets", timeout=60))
    return C


def issue41_cli_cases(f: dict[str, str]) -> list[Case]:
    """Issue 41, classes 2, 3, 4, 7, 9, 13 (CLI), 14: absurd sizes, outputs checked first, exit 0 on bad input,
    engines meeting models they do not fit, paths and messages, bench lists, plain toy use. Every error case
    is expected to answer within 30 s (nothing is loaded or computed before the refusal)."""
    C: list[Case] = []
    A = ["attribute", TOY, P, "--target", "N1"]
    FA = ["faithfulness", "--model", TOY, "--prompts", f["good.jsonl"]]
    ST = ["sae", "train", "--model", TOY, "--hook", "blocks.0.hook_resid_post"]
    OUT = f["outdir"]  # a writable folder outside every case's store (what a case writes there is checked)

    def add(name, args, expect="error", words=(), group="41", timeout=30, **kw):
        C.append(Case(name, list(args), expect, tuple(words), group, timeout=timeout, **kw))

    g = "41.2 sizes"
    big, huge = "1000000000", "1" + "0" * 30
    add("generate --max-new-tokens 10^9", ["generate", TOY, P, "--max-new-tokens", big], words=["--max-new-tokens"],
        group=g)
    add("generate past the model's context", ["generate", TOY, "N1 and", "--max-new-tokens", "100"],
        words=["context"], group=g)
    add("dla --top 10^30", ["dla", TOY, P, "--target", "N1", "--top", huge], words=["--top"], group=g)
    add("attribute --top 10^9", A + ["--top", big], words=["--top"], group=g)
    add("attribute --position 10^30", A + ["--position", huge], words=["--position"], group=g)
    for cmd in (["attribute-set", "--model", TOY, "--prompts", f["good.jsonl"]], FA + ["--methods", "dpa"],
                ["vit-eval"], ["train", "ioi", "--out", f"{OUT}/t"], ["sae", "cache", "--model", "smollm2-135m",
                                                                     "--hooks", "blocks.0.hook_resid_post"]):
        add(f"{cmd[0]} --threads 100000", cmd + ["--threads", "100000"], words=["--threads"], group=g)
    add("faithfulness --workers 100000", FA + ["--methods", "dpa", "--workers", "100000"], words=["--workers"],
        group=g)
    add("vit-eval --n 10^12", ["vit-eval", "--n", "1000000000000"], words=["--n"], group=g)
    add("vit-eval --n 100000 (hours)", ["vit-eval", "--n", "100000"], words=["--allow-long"], group=g)
    add("vit-eval --steps 10^9", ["vit-eval", "--steps", big, "--n", "2"], words=["--steps"], group=g)
    add("vit-eval --batch-size 10^9", ["vit-eval", "--batch-size", big], words=["--batch-size"], group=g)
    add("recover-heads --d 100000", ["recover-heads", "--d", "100000", "--heads", "2"], words=["--d"], group=g)
    add("recover-heads --heads 1000000", ["recover-heads", "--d", "3", "--heads", "1000000"], words=["--heads"],
        group=g)
    add("recover-heads --d 1000 (days)", ["recover-heads", "--d", "1000", "--heads", "2"], words=["--allow-long"],
        group=g)
    add("recover-heads --heads 1000 (hours)", ["recover-heads", "--d", "3", "--heads", "1000"],
        words=["--allow-long"], group=g)
    add("recover-heads --bound 10^9", ["recover-heads", "--d", "3", "--heads", "2", "--bound", big],
        words=["--bound"], group=g)
    add("recover-heads --dps 10^9", ["recover-heads", "--d", "3", "--heads", "2", "--dps", big], words=["--dps"],
        group=g)
    add("train --d-model 1000000", ["train", "ioi", "--out", f"{OUT}/t", "--d-model", "1000000"],
        words=["--d-model"], group=g)
    add("train --d-model 16384 (memory or hours)", ["train", "ioi", "--out", f"{OUT}/t", "--d-model", "16384",
                                                     "--heads", "4"], group=g)
    add("train --steps 10^9", ["train", "ioi", "--out", f"{OUT}/t", "--steps", big], words=["--steps"], group=g)
    add("train --steps 10^6 (hours)", ["train", "ioi", "--out", f"{OUT}/t", "--steps", "1000000"],
        words=["--allow-long"], group=g)
    add("train --layers 10^6", ["train", "ioi", "--out", f"{OUT}/t", "--layers", "1000000"], words=["--layers"],
        group=g)
    add("train-vit --steps 10^7 (days)", ["train-vit", "--steps", "10000000"], words=["--allow-long"], group=g)
    add("sae train --width 10^9", ST + ["--width", big, "--tokens", "256"], words=["--width"], group=g)
    add("sae train --tokens 10^12", ST + ["--tokens", "1000000000000"], words=["--tokens"], group=g)
    add("sae train --tokens 10^7 (hours)", ST + ["--tokens", "10000000"], words=["--allow-long"], group=g)
    add("sae train --epochs 1e9", ST + ["--epochs", "1e9"], words=["--epochs"], group=g)
    add("sae corpus --chars 10^12", ["sae", "corpus", "--chars", "1000000000000", "--out", f"{OUT}/c"],
        words=["--chars"], group=g)
    add("sae corpus --samples 10^6", ["sae", "corpus", "--samples", "1000000", "--out", f"{OUT}/c"],
        words=["--samples"], group=g)
    add("sae corpus --samples 50000 (hours)", ["sae", "corpus", "--samples", "50000", "--out", f"{OUT}/c"],
        words=["--allow-long"], group=g)
    add("sae steer --tokens 10^9", ["sae", "steer", "--sae", f["sae-good"], "--feature", "0", "--prompt", P,
                                    "--alpha", "1", "--tokens", big], words=["--tokens"], group=g)
    add("sae features --feature 10^30", ["sae", "features", "--sae", f["sae-good"], "--feature", huge],
        words=["--feature"], group=g)
    add("lens-train --fit-seconds 1e300", ["lens-train", "smollm2-135m", "--fit-seconds", "1e300"],
        words=["--fit-seconds"], group=g)
    add("lens-train --tokens 10^12", ["lens-train", "smollm2-135m", "--tokens", "1000000000000"],
        words=["--tokens"], group=g)
    add("lens-train --fit-seconds 7200 (hours)", ["lens-train", "smollm2-135m", "--fit-seconds", "7200"],
        words=["--allow-long"], group=g)
    add("lens-train --kl-seconds 1e9", ["lens-train", "smollm2-135m", "--kl-seconds", "1e9"],
        words=["--kl-seconds"], group=g)
    add("lens --top-k 10^9", ["lens", TOY, P, "--top-k", big], words=["--top-k"], group=g)
    add("vit-explain --target 10^20", ["vit-explain", f["good.png"], "--target", "1" + "0" * 20],
        words=["--target"], group=g)
    add("vit-explain --target 999", ["vit-explain", f["good.png"], "--target", "999"], group=g)
    add("probe --seed 10^30", ["probe", "--model", TOY, "--dataset", f["dataset.jsonl"], "--seed", huge],
        words=["--seed"], group=g)
    add("icl-readout --n 10^9", ["icl-readout", "--n", big], words=["--n"], group=g)
    add("circuit discover --edges 10^30", ["circuit", "discover", "--model", TOY, "--prompts", "task", "--edges",
                                           huge], words=["--edges"], group=g)
    add("bench circuits --boot 10^9", ["bench", "circuits", "--model", TOY, "--boot", big, "--out", f"{OUT}/b.md"],
        words=["--boot"], group=g)
    add("app --max-upload-mb 10^9", ["app", "--max-upload-mb", big], words=["--max-upload-mb"], group=g)
    add("attribute --param steps=10^9 (ig)", A + ["--method", "ig", "--param", f"steps={big}"], words=["steps"],
        group=g)
    add("attribute --param internal_batch_size=10^9", A + ["--method", "ig", "--param",
                                                            f"internal_batch_size={big}"], words=["batch_size"],
        group=g)
    add("faithfulness --param ig.steps=10^9", FA + ["--methods", "ig", "--param", f"ig.steps={big}"],
        words=["ig.steps"], group=g)
    add("circuit discover --param steps=10^9", ["circuit", "discover", "--model", TOY, "--prompts", "task",
                                                "--method", "eap_ig", "--param", f"steps={big}"], words=["steps"],
        group=g)
    add("bench circuits activation_patching:sample=10^9", ["bench", "circuits", "--model", TOY, "--tasks", "ioi",
                                                            "--methods", f"activation_patching:sample={big}",
                                                            "--out", f"{OUT}/b.md"], words=["sample"], group=g)
    add("sae cache --ctx past the model's context", ["sae", "cache", "--model", "smollm2-135m", "--hooks",
                                                     "blocks.0.hook_resid_post", "--ctx", "100000", "--out",
                                                     f"{OUT}/cache"], words=["--ctx", "context"], group=g)
    add("sae cache --batch-size 4096 windows", ["sae", "cache", "--model", "smollm2-135m", "--hooks",
                                                "blocks.0.hook_resid_post", "--batch-size", "4096"],
        words=["--batch-size"], group=g)
    add("lens-train --batch-windows 10^5", ["lens-train", "smollm2-135m", "--batch-windows", "100000"],
        words=["--batch-windows"], group=g)
    add("faithfulness --batch-size 10^5", FA + ["--methods", "dpa", "--batch-size", "100000"],
        words=["--batch-size"], group=g)
    add("icl-readout --iters 10^6", ["icl-readout", "--iters", "1000000"], words=["--iters"], group=g)
    add("recover-heads --dps 100000", ["recover-heads", "--d", "2", "--heads", "1", "--dps", "100000"],
        words=["--dps"], group=g)
    add("icl-readout --n 10^6 --n-train 10^6 (hours)", ["icl-readout", "--n", "1000000", "--n-train", "1000000"],
        words=["--allow-long"], group=g)
    add("recover-heads --oversample 10^6", ["recover-heads", "--d", "3", "--heads", "2", "--oversample",
                                            "1000000"], words=["--oversample"], group=g)
    add("train-vit --batch-size 65536", ["train-vit", "--batch-size", "65536", "--steps", "1"],
        words=["--batch-size"], group=g)
    add("train-vit --batch-size 4096 (hours)", ["train-vit", "--batch-size", "4096"], words=["--allow-long"],
        group=g)
    add("train --batch-size 10^6", ["train", "ioi", "--out", f"{OUT}/t", "--batch-size", "1000000"],
        words=["--batch-size"], group=g)
    add("sae train --k above the width", ST + ["--tokens", "256", "--width", "16", "--k", "1000"], words=["--k"],
        group=g)
    add("recover-heads --layer 10^6 of a toy", ["recover-heads", "--model", TOY, "--layer", "1000000"],
        words=["layer"], group=g)

    g = "41.3 outputs"
    outs = {  # command -> (args before --out, the option, a file (True) or a folder (False))
        "bench circuits": (["bench", "circuits", "--model", TOY, "--tasks", "ioi"], "--out", True),
        "train": (["train", "ioi"], "--out", False),
        "train-vit": (["train-vit", "--steps", "1"], "--out", False),
        "sae train": (ST + ["--tokens", "256"], "--out", False),
        "sae cache": (["sae", "cache", "--model", "smollm2-135m", "--hooks", "blocks.0.hook_resid_post"], "--out",
                      False),
        "sae corpus": (["sae", "corpus", "--chars", "1000"], "--out", False),
        "lens-train --out": (["lens-train", "smollm2-135m"], "--out", False),
        "lens-train --table": (["lens-train", "smollm2-135m"], "--table", True),
    }
    for name, (args, opt, is_file) in outs.items():
        suffix = ".md" if is_file else ""
        add(f"{name} {opt} /nonexistent/dir/x", args + [opt, f"/nonexistent/dir/x{suffix}"],
            words=[opt, "does not exist"], group=g)
        add(f"{name} {opt} /proc/x", args + [opt, f"/proc/x{suffix}"], words=[opt, "/proc"], group=g)
        add(f"{name} {opt} /sys/x", args + [opt, f"/sys/x{suffix}"], words=[opt, "/sys"], group=g)
        add(f"{name} {opt} under a file", args + [opt, f"{f['existing.txt']}/x{suffix}"],
            words=[opt, "not a directory"], group=g)
        if is_file:
            add(f"{name} {opt} a directory", args + [opt, f["emptydir"]], words=[opt], group=g)
        else:
            add(f"{name} {opt} an existing file", args + [opt, f["existing.txt"]], words=[opt, "not a directory"],
                group=g)
        add(f"{name} {opt} ''", args + [opt, ""], words=[opt], group=g)
        add(f"{name} {opt} ~nosuchuser/x", args + [opt, f"~nosuchuser/x{suffix}"], words=[opt, "home"], group=g)
        add(f"{name} {opt} a 300-byte name", args + [opt, f"{OUT}/{'a' * 300}{suffix}"], words=[opt, "too long"],
            group=g)

    # a refusal after the work started (training diverged) leaves no partial output where --out named
    add("train diverges with --out: nothing left", ["train", "ioi", "--out", f"{OUT}/diverged", "--lr", "1e30",
                                                    "--steps", "3"], words=["diverged"], group=g, timeout=120)
    add("sae train diverges with --out: nothing left", ST + ["--tokens", "512", "--width", "16", "--k", "4",
                                                             "--epochs", "1", "--lr", "1e30", "--out",
                                                             f"{OUT}/sae-diverged"], words=["not finite"], group=g,
        timeout=120)

    g = "41.3 export"  # engineer A's command: its outputs go through the same check
    E = ["export", "{circuit}", "--format", "graph-json"]
    sound = damaged_circuit(f, lambda r: None)
    add("export --out in a missing folder", E + ["--out", "/nonexistent/dir/g.json"], words=["--out"], group=g,
        setup=sound)
    add("export --out /proc/g.json", E + ["--out", "/proc/g.json"], words=["/proc"], group=g, setup=sound)
    add("export --out a folder", E + ["--out", f["emptydir"]], words=["--out"], group=g, setup=sound)
    add("export --out an existing file without --force", E + ["--out", f["existing.txt"]], words=["--out"],
        group=g, setup=sound)
    add("export unknown --format", ["export", "{circuit}", "--format", "nosuch", "--out", f"{OUT}/g.json"],
        words=["nosuch"], group=g, setup=sound)
    add("export --format mib", ["export", "{circuit}", "--format", "mib", "--out", f"{OUT}/g-mib.json", "--json"],
        "ok", group=g, setup=sound, timeout=60)

    g = "41.4 exit 0 on bad input"
    add("info --backend bogus", ["info", TOY, "--backend", "bogus"], words=["--backend", "bogus"], group=g)
    add("info --backend ''", ["info", TOY, "--backend", ""], words=["--backend"], group=g)
    add("info --backend nnsight on a toy", ["info", TOY, "--backend", "nnsight"], words=["--backend"], group=g)
    add("prompt file row with a NaN field (attribute-set)", ["attribute-set", "--model", TOY, "--prompts",
                                                             f["nanfield.jsonl"]], words=["nanfield.jsonl:2", "NaN"],
        group=g)
    add("prompt file row with a NaN field (faithfulness)", FA[:-1] + [f["nanfield.jsonl"], "--methods", "dpa"],
        words=["nanfield.jsonl:2"], group=g)
    for methods in ("dpa,", ",dpa", "dpa,,random", "", " "):
        add(f"faithfulness --methods {methods!r}", FA + ["--methods", methods], words=["--methods"], group=g)
    for grid in ("", "0,,1", ","):
        add(f"faithfulness --grid {grid!r}", FA + ["--methods", "dpa", "--grid", grid], words=["--grid"], group=g)
    add("faithfulness --methods dpa,dpa", FA + ["--methods", "dpa,dpa"], words=["dpa"], group=g)
    add("concepts, integer labels", ["concepts", "--model", TOY, "--dataset", f["dataset-int-labels.jsonl"]],
        words=["label"], group=g)
    add("probe, integer labels", ["probe", "--model", TOY, "--dataset", f["dataset-int-labels.jsonl"]],
        words=["label"], group=g)
    add("probe --hook ''", ["probe", "--model", TOY, "--dataset", f["dataset.jsonl"], "--hook", ""],
        words=["--hook"], group=g)
    add("probe --hook 'a,,b'", ["probe", "--model", TOY, "--dataset", f["dataset.jsonl"], "--hook",
                                "blocks.0.hook_resid_post,,blocks.0.hook_resid_pre"], words=["--hook"], group=g)
    add("vit-explain a batch .npy (2,3,32,32)", ["vit-explain", f["img_batch.npy"]], words=["shape"], group=g)
    add("vit-explain a (1,3,32,32) .npy", ["vit-explain", f["img_4d1.npy"]], words=["shape"], group=g)
    SS = ["--feature", "0", "--prompt", "N1 and N2", "--alpha", "1", "--tokens", "1", "--json"]
    add("sae steer, workbench.json names an unknown kind", ["sae", "steer", "--sae", f["sae-kind-bogus"]] + SS,
        words=["bogus"], group=g)
    add("sae steer, no workbench.json and no hook in cfg.json",
        ["sae", "steer", "--sae", f["sae-no-workbench-json-no-hook"]] + SS, words=["hook"], group=g)
    add("sae steer, no workbench.json (SAELens metadata names model and hook)",
        ["sae", "steer", "--sae", f["sae-no-workbench-json"]] + SS, "ok", group=g, timeout=120)
    add("sae list --root with an unknown kind beside good", ["sae", "list", "--root",
                                                              str(Path(f["sae-good"]).parent), "--json"], "ok",
        group=g, timeout=120)

    g = "41.7 engines and models"
    add("bench circuits on a vision model", ["bench", "circuits", "--model", "vit-synth", "--out", f"{OUT}/b.md"],
        words=["vision"], group=g)
    for hook in ("blocks.0.attn.hook_pattern", "blocks.0.attn.hook_attn_scores"):
        add(f"sae train --hook {hook}", ST[:-2] + ["--hook", hook, "--tokens", "256"], words=[hook], group=g)
    add("dla on a vision model", ["dla", "vit-synth", "a b", "--target", "a"], group=g)
    add("generate on a vision model", ["generate", "vit-synth", "a b"], group=g)
    add("attribute-set --prompts on a vision model", ["attribute-set", "--model", "vit-synth", "--prompts",
                                                      f["good.jsonl"]], words=["vision"], group=g)
    V = "vit-synth"
    for name, args in (("attribute", ["attribute", V, P, "--target", "N1"]),
                       ("faithfulness", ["faithfulness", "--model", V, "--prompts", f["good.jsonl"], "--methods",
                                         "dpa"]),
                       ("circuit discover", ["circuit", "discover", "--model", V, "--prompts", f["good.jsonl"]]),
                       ("probe", ["probe", "--model", V, "--dataset", f["dataset.jsonl"]]),
                       ("concepts", ["concepts", "--model", V, "--dataset", f["dataset.jsonl"]]),
                       ("patch", ["patch", V, P, "N3 and N4 then N4", "--target", "N1"]),
                       ("ablate", ["ablate", V, "-c", "head:0.0"]),
                       ("sae train", ["sae", "train", "--model", V, "--hook", "blocks.0.hook_resid_post", "--tokens",
                                      "256"]),
                       ("feature-graph", ["feature-graph", "--model", V, "--prompt", P, "--saes", f["sae-good"]]),
                       ("sae eval", ["sae", "eval", "--sae", f["sae-good"], "--model", V]),
                       ("sae dashboards", ["sae", "dashboards", "--sae", f["sae-good"], "--model", V]),
                       ("sae steer neurons:0", ["sae", "steer", "--sae", "neurons:0", "--model", V, "--feature", "0",
                                                "--prompt", "a", "--alpha", "1"]),
                       ("icl-readout", ["icl-readout", "--model", V]),
                       ("recover-heads", ["recover-heads", "--model", V])):
        add(f"{name} on a vision model", args, group=g)

    g = "41.9 paths and messages"
    model_dir = f["model-copy"]
    add("info: a model path through '..' of a missing folder", ["info", f"/no-such-dir/..{model_dir}", "--json"],
        "ok", group=g, timeout=60)
    add("info ~nosuchuser/model", ["info", "~nosuchuser/model"], words=["~nosuchuser/model"], group=g)
    add("concepts --sae ~nosuchuser/x", ["concepts", "--model", TOY, "--dataset", f["dataset.jsonl"], "--sae",
                                         "~nosuchuser/x"], group=g, timeout=60)
    add("vit-explain -dash.png (taken for an option)", ["vit-explain", "-dash.png"], words=["--", "-dash.png"],
        group=g)
    add("vit-explain -- -dash.png (a file that starts with '-')", ["vit-explain", "--json", "--", "-dash.png"],
        "ok", group=g, setup=dash_image(f), timeout=60)
    add("bench circuits --tasks '' (not n-train first)", ["bench", "circuits", "--model", TOY, "--tasks", "",
                                                          "--n-train", "1"], words=["--tasks"], group=g)
    add("bench circuits --methods '' (not n-train first)", ["bench", "circuits", "--model", TOY, "--methods", "",
                                                            "--n-train", "1"], words=["--methods"], group=g)
    add("sae features --sae neurons:abc", ["sae", "features", "--sae", "neurons:abc"], words=["neurons:abc"], group=g)
    add("sae features --sae ''", ["sae", "features", "--sae", ""], words=["--sae"], group=g)
    add("sae steer --sae neurons:x", ["sae", "steer", "--sae", "neurons:x", "--feature", "0", "--prompt", P,
                                      "--alpha", "1"], words=["neurons:x"], group=g)

    g = "41.13 bench lists"
    B = ["bench", "circuits", "--model", TOY, "--out", f"{OUT}/bench.md"]
    for opt, value in (("--tasks", "ioi,ioi"), ("--methods", "random,random"), ("--levels", "edge,edge"),
                       ("--tasks", ""), ("--methods", ""), ("--levels", ""), ("--tasks", "ioi,"),
                       ("--methods", "random,"), ("--tasks", ",")):
        add(f"bench circuits {opt} {value!r}", B + [opt, value], words=[opt], group=g)
    add("bench circuits --out /proc/x.md (before the work)", ["bench", "circuits", "--model", TOY, "--tasks", "ioi",
                                                              "--out", "/proc/x.md"], words=["/proc"], group=g)
    add("bench circuits --out not .md", B[:-1] + [f"{OUT}/bench.txt"], words=["--out"], group=g)
    add("bench circuits --no-save-run without --out", ["bench", "circuits", "--model", TOY, "--no-save-run"],
        words=["--out"], group=g)

    g = "41.14 plain toy use"
    add("generate ioi-attn-1l2h 'N1 and' --max-new-tokens 3", ["generate", TOY, "N1 and", "--max-new-tokens", "3",
                                                               "--json"], "ok", group=g, timeout=60)
    add("dla on the attention-only toy", ["dla", TOY, P, "--target", "N1", "--no-save", "--json"], "ok", group=g,
        timeout=60)
    add("dla on the attention-only toy with a foil", ["dla", TOY, P, "--target", "N1", "--foil", "N2", "--json"],
        "ok", group=g, timeout=60)
    add("bench circuits --tasks 'ioi,' (hung before)", B + ["--tasks", "ioi,"], words=["--tasks"], group=g)
    return C


# -- issue 41, classes 1, 8, 12, 13 (store and jobs): engineer D's cases ----------------------------------------

def _cwd_of(store: Path) -> Path:
    return store.parent / store.name.replace("runs-", "cwd-")


def plant_foreign(where: str = "cwd"):
    """A case setup: a user's own entries that look like store leftovers (.rm-my-notes/, .tmp-old-build/, a
    .tmp- named as the store names its own, all two days old) in the case's working directory (``cwd``) or in
    the folder WORKBENCH_RUNS names (``store``, not yet a store). In the cwd, run_case reports any of them
    removed as deleted-outside."""

    def setup(store: Path) -> None:
        import socket as _socket

        folder = _cwd_of(store) if where == "cwd" else store
        folder.mkdir(parents=True, exist_ok=True)
        host = re.sub(r"[^A-Za-z0-9.]", "_", _socket.gethostname()) or "host"
        old = time.time() - 2 * 86400
        for name in (".rm-my-notes", ".tmp-old-build", f".tmp-{host}-999999-abcdefgh", ".rm-x-abcdef"):
            (folder / name).mkdir()
            (folder / name / "notes.txt").write_text("mine")
            os.utime(folder / name, (old, old))

    return setup


def runs_file(store: Path) -> None:
    """A case setup: WORKBENCH_RUNS names a file."""
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_text("my notes, not a run store")


def nested_meta(store: Path) -> None:
    _fake_run(store, DAMAGED, None, raw='{"kind": "attribute", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")


def sparse_meta(store: Path) -> None:
    run = _fake_run(store, DAMAGED, {"id": DAMAGED, "kind": "attribute"})
    with open(run / "meta.json", "r+b") as fh:
        fh.truncate(3 * 2**30)  # 3 GB that take no space


def symlinked_index(store: Path) -> None:
    """A case setup: the store's index.sqlite is a symlink to a file of the user's (in the case's cwd)."""
    victim = _cwd_of(store) / "precious.db"
    victim.write_bytes(b"precious bytes")
    store.mkdir(parents=True, exist_ok=True)
    (store / "index.sqlite").symlink_to(victim)


def symlinked_jobs(store: Path) -> None:
    """A case setup: the store's .jobs is a symlink to a folder of the user's (in the case's cwd)."""
    outside = _cwd_of(store) / "outside"
    outside.mkdir()
    store.mkdir(parents=True, exist_ok=True)
    (store / ".jobs").symlink_to(outside, target_is_directory=True)


def nested_costs(store: Path) -> None:
    (store / ".jobs").mkdir(parents=True, exist_ok=True)
    (store / ".jobs" / "costs.json").write_text("[" * 100_000 + "]" * 100_000)


def _mount_tiny(path: Path) -> None:
    import atexit

    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(path)], check=True, capture_output=True,
                   timeout=10)
    atexit.register(subprocess.run, ["umount", "-l", str(path)], capture_output=True, timeout=10)


def full_disk(store: Path) -> None:
    """A case setup: the case's store, and ``disk/`` in its cwd, are 16 kB filesystems (tmpfs; needs root)."""
    _mount_tiny(store)
    _mount_tiny(_cwd_of(store) / "disk")


def _can_mount() -> bool:
    """Whether this machine lets the catalogue mount a tiny tmpfs (root): the full-disk cases run only then."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return False
    probe = Path(tempfile.mkdtemp(prefix="bad-inputs-mount-"))
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(probe)], check=True,
                       capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        subprocess.run(["umount", "-l", str(probe)], capture_output=True, timeout=10)
        shutil.rmtree(probe, ignore_errors=True)
    return True


def store_cases(f: dict[str, str]) -> list[Case]:
    """Issue 41, classes 1, 8, 12, 13 (store and jobs): the store never touches what it did not write
    (WORKBENCH_RUNS empty, relative, a file; foreign .tmp-/.rm- entries), a full disk is one line and leaves
    nothing, hostile store contents (nested or 3 GB meta.json, a symlinked index, a symlinked .jobs) and job
    records (pid 1 without a start time, nested JSON, a nested costs file) are contained. Ctrl-C (exit 130) and
    wb.jobs() twice are in tests/test_hardening_store2.py (a signal and a notebook are not CLI arguments)."""
    import socket as _socket

    C: list[Case] = []
    A = ["attribute", TOY, P, "--target", "N1"]
    FW = ["faithfulness", "--model", TOY, "--prompts", f["good.jsonl"], "--methods", "random", "--no-save", "--json"]

    def add(name, args, expect="error", words=(), group="41.1 store", timeout=30, **kw):
        C.append(Case(name, list(args), expect, tuple(words), group, timeout=timeout, **kw))

    g = "41.1 store"
    for value, why in (("", "empty"), (" ", "empty"), ("runs", "relative"), (".", "relative")):
        for args in (["runs", "list"], ["runs", "list", "--json"], A + ["--json"], ["jobs", "list"]):
            add(f"WORKBENCH_RUNS={value!r}, foreign .tmp-/.rm- in the cwd: {' '.join(args[:2])}", args,
                words=["WORKBENCH_RUNS", why], group=g, env={"WORKBENCH_RUNS": value}, setup=plant_foreign("cwd"))
    add("WORKBENCH_RUNS names a file: runs list", ["runs", "list"], words=["not a directory"], group=g,
        setup=runs_file)
    add("WORKBENCH_RUNS names a file: attribute", A + ["--json"], words=["not a directory"], group=g,
        setup=runs_file)
    add("WORKBENCH_JOBS relative: jobs list", ["jobs", "list"], words=["WORKBENCH_JOBS", "relative"], group=g,
        env={"WORKBENCH_JOBS": "jobs"}, setup=plant_foreign("cwd"))
    add("foreign .tmp-/.rm- in a folder that is no store: runs list", ["runs", "list", "--json"], "ok", group=g,
        setup=plant_foreign("store"))
    add("foreign .tmp-/.rm- in a folder that is no store: attribute saves there", A + ["--json"], "ok", group=g,
        setup=plant_foreign("store"))

    g = "41.12 store contents"
    add("meta.json nested 100000 deep: runs list", ["runs", "list", "--json"], "ok", group=g, setup=nested_meta)
    add("meta.json nested 100000 deep: runs show", ["runs", "show", DAMAGED], words=[DAMAGED, "nested"], group=g,
        setup=nested_meta)
    add("meta.json 3 GB (sparse): runs list", ["runs", "list", "--json"], "ok", group=g, setup=sparse_meta)
    add("meta.json 3 GB (sparse): runs show", ["runs", "show", DAMAGED], words=[DAMAGED, "bytes"], group=g,
        setup=sparse_meta)
    add("index.sqlite a symlink: attribute saves, not through it", A + ["--json"], "ok", group=g,
        setup=symlinked_index)
    add("index.sqlite a symlink: runs list", ["runs", "list"], "ok", group=g, setup=symlinked_index)
    add(".jobs a symlink: a job is not written through it", FW, words=[".jobs", "symlink"], group=g,
        setup=symlinked_jobs)
    add("costs.json nested 100000 deep: a job still runs", FW, "ok", group=g, setup=nested_costs)
    if _can_mount():
        add("full disk (16 kB store): attribute", A + ["--json"], words=["no space left on device at"], group=g,
            setup=full_disk, timeout=60)
        add("full disk (16 kB --out): train", ["train", "ioi", "--out", "disk/ck", "--steps", "5", "--json"],
            words=["no space left on device at", "disk/ck"], group=g, setup=full_disk, timeout=60)
        add("full disk (16 kB store): sae train", ["sae", "train", "--model", TOY, "--hook", "blocks.0.hook_resid_post",
                                                   "--tokens", "512", "--epochs", "1", "--json"],
            words=["no space left on device at"], group=g, setup=full_disk, timeout=60)

    g = "41.8 jobs"
    add("job record: driver pid 1, no start time: jobs list (not running)", ["jobs", "list", "--json"], "ok", group=g,
        setup=job_record(state="running", driver={"host": _socket.gethostname(), "pid": 1}))
    add("job record: driver pid 1, no start time: jobs show", ["jobs", "show", BAD_JOB, "--json"], "ok", group=g,
        setup=job_record(state="running", driver={"host": _socket.gethostname(), "pid": 1}))
    add("job record: running with no driver: jobs cancel", ["jobs", "cancel", BAD_JOB],
        words=["failed", "only a queued or running job"], group=g, setup=job_record(state="running", driver={}))
    add("job record nested 100000 deep: jobs list", ["jobs", "list", "--json"], "ok", group=g,
        setup=job_record(raw="[" * 100_000 + "]" * 100_000))
    add("job record nested 100000 deep: jobs show", ["jobs", "show", BAD_JOB], words=[BAD_JOB, "nested"], group=g,
        setup=job_record(raw="[" * 100_000 + "]" * 100_000))
    return C


def start_silent_server() -> str:
    """A TCP server on 127.0.0.1 that accepts every connection and never answers (a stuck proxy or hub)."""
    import socket as _socket
    import threading

    srv = _socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held: list[Any] = []

    def accept() -> None:
        while True:
            held.append(srv.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    return f"http://127.0.0.1:{srv.getsockname()[1]}"


def network_app_cases(f: dict[str, str]) -> list[Case]:
    """Issue 41, classes 5 and 11 (engineer F): a hub look-up behind a network that never answers is one line
    within seconds (not a 200 s silent hang); `workbench app` refuses to switch its Host check off silently.
    The notebook API's argument checks (class 6) and the app's escaping (class 10) are tests, not CLI cases:
    tests/test_facade_arguments.py, tests/test_app_escape.py, tests/test_app_browser_hostile.py."""
    C: list[Case] = []

    def add(name, args, expect="error", words=(), group="41.5/11 network, app", timeout=30, **kw):
        C.append(Case(name, list(args), expect, tuple(words), group, timeout=timeout, **kw))

    silent = start_silent_server()
    hf_home = tempfile.mkdtemp(prefix="hf-", dir=Path(f["outdir"]).parent)  # an empty HF cache, in this run's folder
    hub = ["info", "someorg/somemodel"]
    add("hub look-up, endpoint never answers", hub, words=["within 5 s", "hf download someorg/somemodel"],
        env={"HF_HOME": hf_home, "HF_ENDPOINT": silent})
    add("hub look-up, proxy never answers", hub, words=["within 2 s", "hf download someorg/somemodel"],
        env={"HF_HOME": hf_home, "HTTPS_PROXY": silent, "https_proxy": silent, "WORKBENCH_HUB_TIMEOUT": "2"})
    add("hub look-up, connection refused", hub, words=["cannot reach", "hf download"],
        env={"HF_HOME": hf_home, "HF_ENDPOINT": "http://127.0.0.1:1"})
    add("hub look-up, HF_HUB_OFFLINE", hub, words=["HF_HUB_OFFLINE", "hf download"],
        env={"HF_HOME": hf_home, "HF_HUB_OFFLINE": "1"})
    add("hub look-up, --json on a silent network", hub + ["--json"], words=["within 2 s"],
        env={"HF_HOME": hf_home, "HF_ENDPOINT": silent, "WORKBENCH_HUB_TIMEOUT": "2"})
    g = "41.11 app hosts"
    add("app --host 0.0.0.0 without --allowed-host", ["app", "--host", "0.0.0.0"],
        words=["--host '0.0.0.0'", "--allowed-host", "--allow-any-host"], group=g)
    add("app --host :: without --allowed-host", ["app", "--host", "::"], words=["--host '::'"], group=g)
    add("app --allowed-host '*'", ["app", "--allowed-host", "*"], words=["--allowed-host '*'", "pattern"], group=g)
    add("app --allowed-host '*.example'", ["app", "--allowed-host", "*.example"],
        words=["--allowed-host '*.example'", "pattern"], group=g)
    add("app --host 0.0.0.0 --allowed-host '*.example'", ["app", "--host", "0.0.0.0", "--allowed-host", "*.example"],
        words=["'*.example'"], group=g)
    add("app --allowed-host 'wb?.lan'", ["app", "--allowed-host", "wb?.lan"], words=["'wb?.lan'"], group=g)
    add("app --allowed-host ''", ["app", "--allowed-host", ""], words=["--allowed-host"], group=g)
    add("app --allowed-host and --allow-any-host", ["app", "--allowed-host", "wb.lan", "--allow-any-host"],
        words=["--allow-any-host", "--allowed-host"], group=g)
    return C


def dash_image(f: dict[str, str]):
    """A case setup: a PNG named '-dash.png' in the case's working directory."""

    def setup(store: Path) -> None:
        cwd = store.parent / store.name.replace("runs-", "cwd-")
        shutil.copy(f["good.png"], cwd / "-dash.png")

    return setup


# Whole-number options for which -1 and 0 are good values (a position counts from the end when negative).
ANY_INT = ("--position",)


class _FakeParam:
    def __init__(self, opts: list[str]) -> None:
        self.opts = opts


def _fake_ctx(path: list[str]) -> Any:
    """What typer hands a callback: the command's names up to the root, no other option given."""
    from types import SimpleNamespace

    ctx = SimpleNamespace(info_name="workbench", parent=None, params={}, resilient_parsing=False,
                          command=SimpleNamespace(params=[]))
    for name in path:
        ctx = SimpleNamespace(info_name=name, parent=ctx, params={}, resilient_parsing=False,
                              command=SimpleNamespace(params=[]))
    return ctx


def generated_numeric_cases() -> list[Case]:
    """Every numeric option of every command with the values it must refuse (found from the typer app)."""

    from workbench.cli import app

    def walk(t, path):
        for ci in t.registered_commands:
            yield path + [ci.name or ci.callback.__name__.replace("_", "-")], ci.callback
        for gi in t.registered_groups:
            yield from walk(gi.typer_instance, path + [gi.name])

    cases = []
    for path, fn in walk(app, []):
        hints = typing.get_type_hints(fn)
        required = _required_options(fn)
        for name, prm in inspect.signature(fn).parameters.items():
            info, h = prm.default, hints.get(name)
            base = typing.get_args(h)[0] if typing.get_origin(h) is list else h
            if not hasattr(info, "param_decls"):
                continue
            flag = next((d for d in info.param_decls or () if d.startswith("--")), "--" + name.replace("_", "-"))
            if getattr(info.callback, "__name__", "") == "nonempty":  # '' is a mistake, never "not given"
                for raw in ("", "  "):
                    cases.append(Case(f"{' '.join(path)} {flag} {raw!r}", path + [f"{flag}={raw}"], "error",
                                      (flag,), "empty text options (generated)", timeout=ANSWER_WITHIN_S))
            if base not in (int, float):
                continue
            # for whole-number options, click's own type check answers every non-integer alike: one suffices
            big = ("1000000000", "1" + "0" * 30) if base is int else ("1e9", "1e30")
            for raw in (("-1", "0", "nan") if base is int else ("-1", "0", "nan", "inf", "-inf", "1e999")) + big:
                if flag in ANY_INT and raw in ("-1", "0"):
                    continue
                try:
                    value = int(raw) if base is int else float(raw)
                except ValueError:
                    value = None  # click refuses it as the wrong type: a bad input too
                if value is not None and info.callback is not None:
                    try:  # the option's own bound (options.BOUNDS is keyed by command and flag)
                        info.callback(_fake_ctx(path), _FakeParam([flag]), value)
                        continue  # a valid value for this option: not a bad input
                    except Exception:  # noqa: BLE001 - typer.BadParameter: the option refuses it
                        pass
                # an option checked in the command's body (no callback) is reached only past click's own check
                # of the required options: those get good values, so the case is about this option
                given = required if info.callback is None and required is not None else []
                cases.append(Case(f"{' '.join(path)} {flag} {raw}", path + given + [f"{flag}={raw}"], "error",
                                  (flag,), "numeric options (generated)", timeout=ANSWER_WITHIN_S))
    return cases


REQUIRED_FILL = {"--model": TOY, "--prompt": P, "--saes": "smollm2-135m-L6-resid-topk2304"}


def _required_options(fn: Any) -> list[str] | None:
    """Good values for a command's required options (None when one has no value in REQUIRED_FILL or a required
    argument is positional)."""
    given: list[str] = []
    for prm in inspect.signature(fn).parameters.values():
        info = prm.default
        if not hasattr(info, "param_decls") or info.default is not ...:
            continue
        flag = next((d for d in info.param_decls or () if d.startswith("--")), None)
        if flag not in REQUIRED_FILL:
            return None
        given += [flag, REQUIRED_FILL[flag]]
    return given


# -- running and classifying -----------------------------------------------------------------------------

PROGRESS_LINE = re.compile(r"\[\s*\d+ s\] |estimate: ")  # a job's progress frames and cost estimate (stderr)
NONFINITE = re.compile(r"(?<![\w.])-?(NaN|Infinity|nan|inf)(?![\w])")


def _strict(text: str) -> Any:
    def bad(c):
        raise ValueError(c)

    return json.loads(text, parse_constant=bad)


def store_non_finite(store: Path) -> str | None:
    """A NaN/Infinity in any saved run of this store (result.json, meta.json, tensors)."""
    found = all_non_finite(store)
    return found[0] if found else None


def all_non_finite(store: Path) -> list[str]:
    """Every file of this store holding a NaN/Infinity (what a case's setup planted is found here too)."""
    found: list[str] = []
    if not store.exists():
        return found
    if not store.is_dir():
        return found
    for p in store.rglob("*.json"):
        if p.name == "config.json" or ".plotly" in p.name:
            continue
        try:
            if p.stat().st_size > 256 * 2**20:  # a planted 3 GB sparse meta.json is not read
                continue
            _strict(p.read_text())
        except RecursionError:  # a planted deeply nested file holds no number
            continue
        except ValueError as exc:
            if "NaN" in str(exc) or "Infinity" in str(exc):
                found.append(f"{p.relative_to(store)}: {exc}")
        except OSError:
            pass
    for p in store.rglob("*.safetensors"):
        try:
            import torch
            from safetensors.torch import load_file

            for k, v in load_file(str(p)).items():
                if v.is_floating_point() and not bool(torch.isfinite(v).all()):
                    found.append(f"{p.relative_to(store)}: {k}")
                    break
        except Exception:  # noqa: BLE001 - unreadable tensors are another case's business
            pass
    return found


def runs_in(store: Path) -> set[str]:
    if not store.is_dir():
        return set()
    return {p.name for p in store.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name != "saes"}


WORKER_DIED = "the worker process died"
_STARTUP: list[float] = []


def startup_seconds() -> float:
    """What a process of its own spends importing before a command starts (measured once)."""
    if not _STARTUP:
        t = time.time()
        subprocess.run([sys.executable, "-c", "import torch, transformer_lens, workbench.cli"], cwd=ROOT,
                       capture_output=True, timeout=300)
        _STARTUP.append(time.time() - t)
    return _STARTUP[0]


STARTUP_S = 60  # a case in a process of its own first imports torch and TransformerLens (~10 s, more when loaded)
SENTINEL = "keep-me.txt"  # a user's file beside the work: no case may remove it
OUTPUT_OPTIONS = ("--out", "--table")


def named_outputs(args: list[str]) -> list[Path]:
    """The paths a case names after --out/--table (``--out=X`` too)."""
    found = []
    for i, a in enumerate(args):
        if a in OUTPUT_OPTIONS and i + 1 < len(args) and args[i + 1]:
            found.append(Path(args[i + 1]))
        elif a.split("=", 1)[0] in OUTPUT_OPTIONS and "=" in a and a.split("=", 1)[1]:
            found.append(Path(a.split("=", 1)[1]))
    return found


def run_case(case: Case, work: Path, i: int, batch: Batch | None = None) -> dict[str, Any]:
    store = work / f"runs-{i}"
    cwd = work / f"cwd-{i}"
    cwd.mkdir()
    (cwd / SENTINEL).write_text("a file the user keeps here")
    outputs_before = {p: _exists(p) for p in (q if q.is_absolute() else cwd / q for q in named_outputs(case.args))}
    if case.setup:
        try:
            case.setup(store)
        except Exception as exc:  # noqa: BLE001
            return {"class": "setup-failed", "detail": f"{type(exc).__name__}: {exc}"[:300]}
    kept = {p.name for p in cwd.iterdir()}  # the user's own files (SENTINEL, and what a setup planted there)
    before = runs_in(store)
    planted = set(all_non_finite(store))  # damage a setup made on purpose is not the command's output
    args = [a.replace("{circuit}", circuit_run_id(store)) if "{circuit}" in a else a for a in case.args]
    env = {**os.environ, "WORKBENCH_RUNS": str(store), "PYTHONPATH": str(ROOT), "COLUMNS": "200", **case.env}
    env.pop("WORKBENCH_DEBUG", None)
    started = time.time()
    # a case with its own environment gets its own process: libraries read some settings once, at import
    answer = batch.run(args, store, cwd, case.timeout, case.env) if batch is not None and not case.env else None
    if answer is not None and answer["rc"] is None:
        return {"class": "timeout", "rc": None, "seconds": answer["seconds"],
                "detail": f"no answer in {case.timeout:.0f} s"}
    if answer is not None and answer["err"] != WORKER_DIED:
        out, err, rc = answer["out"], answer["err"], answer["rc"]
    else:  # its own process (also when the shared worker died: the case is judged, not the worker)
        started = time.time()
        try:
            proc = subprocess.run([sys.executable, "-m", "workbench.cli", *args], cwd=cwd, env=env,
                                  capture_output=True, timeout=case.timeout + STARTUP_S,
                                  input=(case.stdin or "").encode(), )
        except subprocess.TimeoutExpired:
            return {"class": "timeout", "rc": None, "seconds": round(time.time() - started, 1),
                    "detail": f"no answer in {case.timeout:.0f} s"}
        out = proc.stdout.decode("utf-8", "replace")
        err = proc.stderr.decode("utf-8", "replace")
        rc = proc.returncode
        started += startup_seconds()  # the answer's time, not the imports every process of its own pays first
    seconds = round(max(0.0, time.time() - started), 1)
    result = classify(case, args, out, err, rc, store, before, planted)
    if result["class"] == "clear-error":  # refused: nothing may be left behind, in its folder or where --out named
        left = sorted(p.name for p in cwd.iterdir() if p.name not in kept)
        made = [str(p) for p, existed in outputs_before.items() if not existed and _exists(p)]
        if left or made:
            result = {"class": "left-files", "rc": rc, "detail": f"left {left + made} after: {result['detail']}"}
    if not kept <= {p.name for p in cwd.iterdir()} or not (work / SENTINEL).exists():
        result = {"class": "deleted-outside", "rc": rc, "detail": f"a file outside the store was removed; "
                  f"{result.get('detail', '')}"}
    return {**result, "seconds": seconds}


def _exists(p: Path) -> bool:
    try:
        return p.exists()
    except OSError:
        return False


def classify(case: Case, args: list[str], out: str, err: str, rc: int | None, store: Path, before: set[str],
             planted: set[str]) -> dict[str, Any]:
    """The class of one case's outcome (see the module's docstring)."""
    # every line of stderr as a terminal shows it (a progress frame redrawn with \r: its last state)
    lines = [ln.rsplit("\r", 1)[-1] for ln in err.strip().splitlines() if ln.rsplit("\r", 1)[-1].strip()]
    # "note:" lines (damaged runs skipped) and progress lines ("looking up X ... (up to 5 s) ...", a job's
    # "[  7 s] faithfulness · 1/1" frames and its "estimate: ..." line) are not errors; any other line is
    error_lines = [ln for ln in lines if not ln.startswith("note:") and not ln.rstrip().endswith("...")
                   and not PROGRESS_LINE.match(ln)]
    saved = runs_in(store) - before
    bad_store = next((x for x in all_non_finite(store) if x not in planted), None)
    detail = (error_lines[-1] if error_lines else out.strip()[:200])[:300]
    if "Traceback (most recent call last)" in err:
        cls = "traceback"
        detail = (lines[-1] if lines else "")[:300]
    elif rc == 1 and "internal error" in err:
        cls = "internal-error"
    elif rc == 0:
        bad_out = None
        if "--json" in args:
            try:
                _strict(out)
            except ValueError as exc:
                bad_out = str(exc)[:100]
        elif NONFINITE.search(out):
            bad_out = NONFINITE.search(out).group(0)
        if bad_out or bad_store:
            cls, detail = "silent-non-finite", f"output: {bad_out}" if bad_out else f"saved: {bad_store}"
        else:
            cls = "ok" if case.expect == "ok" else "accepted-bad"
    elif rc == 2:
        one = len(error_lines) == 1 and error_lines[0].startswith("error:")
        named = all(w.lower() in error_lines[0].lower() for w in case.words) if one else False
        if case.expect == "ok":
            cls = "refused-good"
        elif not one or not named:
            cls = "unclear-error"
        elif saved:
            cls = "saved-on-error"
            detail = f"{detail} (saved {sorted(saved)})"
        elif bad_store:
            cls = "silent-non-finite"
            detail = f"saved: {bad_store}"
        else:
            cls = "clear-error"
    else:
        cls = "other-exit"
        detail = f"exit {rc}: {detail}"
    return {"class": cls, "rc": rc, "detail": detail}


class _Alarm(BaseException):
    pass


def worker() -> int:
    """--worker: run cases in this one process through workbench.cli.main (torch imported once).
    Reads one JSON object a line on stdin ({"args", "store", "cwd", "timeout"}), answers one a line."""
    import contextlib
    import io
    import signal

    # Warm up outside every case's timeout: the first case would otherwise pay these imports.
    import torch  # noqa: F401
    import transformer_lens  # noqa: F401

    import workbench.cli as cli

    def refuse_exec(*a, **k):
        raise RuntimeError("the command would have started Streamlit")

    os.execve = refuse_exec  # `workbench app` must stop at its checks; never replace this worker

    def on_alarm(signum, frame):
        raise _Alarm()

    signal.signal(signal.SIGALRM, on_alarm)
    # The answers go out on a copy of fd 1; during a case fds 1 and 2 point at files of that case, so what is
    # written below Python's sys.stdout/sys.stderr (a handler holding the original stream, C code, a child
    # process) is counted with the case's output, never lost.
    real_out = os.fdopen(os.dup(1), "w")
    for line in sys.stdin:
        job = json.loads(line)
        saved_env = {k: os.environ.get(k) for k in job.get("env", {})}
        os.environ["WORKBENCH_RUNS"] = job["store"]
        os.environ.update(job.get("env", {}))  # after: a case may set WORKBENCH_RUNS itself
        os.chdir(job["cwd"])
        sys.argv = ["workbench", *job["args"]]
        out, err = io.StringIO(), io.StringIO()
        rc: int | None = 0
        started = time.time()
        fd_out, fd_err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        sys.__stdout__.flush()
        sys.__stderr__.flush()
        os.dup2(fd_out.fileno(), 1)
        os.dup2(fd_err.fileno(), 2)
        signal.alarm(max(1, int(job["timeout"])))
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    cli.main()
                except SystemExit as exc:
                    rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except _Alarm:
            rc = None
        except BaseException:  # noqa: BLE001 - escaped main(): what a user would see as a traceback
            import traceback

            err.write(traceback.format_exc())
            rc = 1
        finally:
            signal.alarm(0)
            sys.__stdout__.flush()
            sys.__stderr__.flush()
            for fd, buf in ((fd_out, out), (fd_err, err)):  # what reached the real fds, after Python's own
                fd.seek(0)
                buf.write(fd.read().decode("utf-8", "replace"))
                fd.close()
            os.chdir(ROOT)
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        real_out.write(json.dumps({"rc": rc, "out": out.getvalue(), "err": err.getvalue(),
                                   "seconds": round(time.time() - started, 1)}) + "\n")
        real_out.flush()
    return 0


class Batch:
    """One worker process (started on first use, restarted after a timeout)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def run(self, args: list[str], store: Path, cwd: Path, timeout: float,
            env: dict[str, str] | None = None) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
            env.pop("WORKBENCH_DEBUG", None)
            # its stderr before the first case (the imports' own noise) is not a case's; a case's is all counted
            self.proc = subprocess.Popen([sys.executable, __file__, "--worker"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=ROOT,
                                         text=True)
        self.proc.stdin.write(json.dumps({"args": args, "store": str(store), "cwd": str(cwd),
                                          "timeout": timeout, "env": env or {}}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:  # the worker died (a crash in native code, or it was killed)
            self.proc = None
            return {"rc": -9, "out": "", "err": WORKER_DIED, "seconds": 0}
        answer = json.loads(line)
        if answer["rc"] is None:  # timed out: a fresh worker for the next case
            self.close()
        return answer

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None


# Where a command writes when not told otherwise (bench documents, checkpoints, dictionaries, corpus, lenses,
# neuron dashboards): the checkout's committed files a case must never change. (Not all of results/ and data/:
# others' scripts write there while the catalogue runs.)
WATCHED = ("results/circuits", "data/models", "data/saes", "data/corpus", "data/lenses", "data/neurons")


def snapshot() -> dict[str, tuple[int, int]]:
    """(mtime, size) of every file under WATCHED (what a case must never write)."""
    found = {}
    for top in (ROOT / w for w in WATCHED):
        for p in top.rglob("*") if top.is_dir() else []:
            try:
                st = p.lstat()
            except OSError:
                continue
            if p.is_file():
                found[str(p.relative_to(ROOT))] = (st.st_mtime_ns, st.st_size)
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="Print the results as JSON (one object).")
    ap.add_argument("--only", help="Only cases whose name or group contains this text.")
    ap.add_argument("--skip-slow", action="store_true", help="Skip the cases that load smollm2-135m.")
    ap.add_argument("--no-generated", action="store_true", help="Skip the generated numeric-option cases.")
    ap.add_argument("--list", action="store_true", help="List the cases and exit.")
    ap.add_argument("--keep", action="store_true", help="Keep the temporary directory.")
    ap.add_argument("--batch", action="store_true", help="(the default now) Run the cases in one worker process "
                    "through workbench.cli.main (torch imported once; each case still gets its own run store and "
                    "directory; a case with its own environment, or whose worker died, gets its own process).")
    ap.add_argument("--per-process", action="store_true", help="One `python -m workbench.cli` per case (each "
                    "pays the ~10 s of imports: case timeouts get STARTUP_S more).")
    ap.add_argument("--budget", type=float, default=0, help="Start no case after this many seconds (the rest "
                    "are reported as not-run).")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.worker:
        return worker()

    work = Path(tempfile.mkdtemp(prefix="bad-inputs-"))
    try:  # everything the run makes lives in work/, removed however the run ends (unless --keep)
        return run_catalogue(opts, work)
    finally:
        if not opts.keep:
            unmount_under(work)  # the full-disk cases' tmpfs mounts, or their mount points stay behind
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}", file=sys.stderr)


def unmount_under(folder: Path) -> None:
    """Unmount every filesystem mounted inside ``folder`` (deepest first)."""
    try:
        points = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines() if len(line.split()) > 1]
    except OSError:
        return
    for point in sorted((p for p in points if p.startswith(str(folder) + "/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, timeout=10)


def run_catalogue(opts: argparse.Namespace, work: Path) -> int:
    (work / SENTINEL).write_text("a file beside every case's store")
    files = make_files(work / "files")
    files["http"] = start_http_server()
    cases = catalogue(files) + ([] if opts.no_generated else generated_numeric_cases())
    if opts.only:
        cases = [c for c in cases if opts.only.lower() in (c.name + " " + c.group).lower()]
    if opts.skip_slow:
        cases = [c for c in cases if not c.slow]
    wordless = [c.name for c in cases if c.expect == "error" and not c.words]
    if wordless:  # any one "error:" line would pass such a case: each must name what the user needs to know
        print(f"error: {len(wordless)} error case(s) name no words their error line must hold (WORDS): "
              + "; ".join(wordless[:20]), file=sys.stderr)
        return 2
    if opts.list:
        for c in cases:
            print(f"{c.group:28s} {c.name:55s} workbench {' '.join(c.args)}")
        return 0
    started = time.time()
    batch = None if opts.per_process else Batch()
    for i, case in enumerate(cases):
        if opts.budget and time.time() - started > opts.budget:
            case.result = {"class": "not-run", "detail": f"--budget {opts.budget:.0f} s spent"}
            continue
        watched = snapshot()
        case.result = run_case(case, work, i, batch)
        changed = sorted({p for p, _ in set(snapshot().items()) ^ set(watched.items())})
        if changed:  # the checkout's committed outputs (WATCHED) are not a case's to write
            case.result = {**case.result, "class": "changed-outside", "detail": ", ".join(changed)[:300]}
        r = case.result
        print(f"[{i + 1:3d}/{len(cases)}] {r['class']:18s} {r.get('seconds', 0):6.1f}s  {case.name}"
              + (f"  -> {r.get('detail', '')}" if r["class"] not in GOOD_CLASSES else ""),
              file=sys.stderr, flush=True)
    if batch is not None:
        batch.close()
    counts: dict[str, int] = {}
    for c in cases:
        counts[c.result["class"]] = counts.get(c.result["class"], 0) + 1
    slow = [c for c in cases if c.expect == "error" and c.result.get("seconds", 0) > ANSWER_WITHIN_S]
    failures = [c for c in cases if c.result["class"] not in GOOD_CLASSES]
    mode = "one process per case" if opts.per_process else "one worker process"
    summary = (f"{len(cases)} cases in {time.time() - started:.0f} s ({mode}): "
               + ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
               + f"; tracebacks {counts.get('traceback', 0)}, internal errors {counts.get('internal-error', 0)}, "
                 f"silent non-finite {counts.get('silent-non-finite', 0)}, exits 0 on bad input "
                 f"{counts.get('accepted-bad', 0)}, hangs {counts.get('timeout', 0)} (error cases answered after "
                 f"{ANSWER_WITHIN_S} s: {len(slow)}), files left {counts.get('left-files', 0)}, deleted outside "
                 f"the store {counts.get('deleted-outside', 0)}, checkout changed {counts.get('changed-outside', 0)}")
    if opts.json:
        print(json.dumps({"summary": summary, "counts": counts,
                          "cases": [{"name": c.name, "group": c.group, "command": ["workbench", *c.args],
                                     "expect": c.expect, **c.result} for c in cases]}, allow_nan=False))
    else:
        width = max(len(c.name) for c in cases)
        print(f"{'case':{width}s}  {'result':18s}  command / detail")
        for c in cases:
            cmd = "workbench " + " ".join(a if a and " " not in a else repr(a) for a in c.args)
            print(f"{c.name:{width}s}  {c.result['class']:18s}  {cmd[:110]}")
            if c.result["class"] not in GOOD_CLASSES:
                print(f"{'':{width}s}  {'':18s}  -> {c.result.get('detail', '')}")
        print()
        print(summary)
        if failures:
            print(f"not as expected: {len(failures)}: " + "; ".join(f"{c.name} ({c.result['class']})"
                                                                 for c in failures))
    # strict: every case must be a clear error or ok (unclear errors, good inputs refused, runs saved on an error,
    # cases not run for --budget all fail the run); 2 when the product is broken (FAILURE_CLASSES), else 1
    if any(c.result["class"] in FAILURE_CLASSES for c in cases):
        return 2
    return 1 if any(c.result["class"] not in PASS_CLASSES for c in cases) else 0


if __name__ == "__main__":
    sys.exit(main())
