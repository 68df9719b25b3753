"""``workbench attribute``: one attribution method on one prompt, at one level; saves a run."""

from __future__ import annotations

from typing import Any

import typer

from core.figures import png_option
from core.options import positive_int, token_text
from workbench.commands.common import (
    DEVICE_OPTION,
    DTYPE_OPTION,
    FOIL_OPTION,
    JSON_OPTION,
    LEVEL_OPTION,
    MODEL_ARGUMENT,
    POSITION_OPTION,
    SAVE_OPTION,
    check_prompt,
    console,
    dtype_spec,
    finish,
    result_console,
)
from workbench.commands.jobs import workers_option


def _methods_help() -> str:
    from attribution.methods import levels_help

    return f"Method and the levels it has: {levels_help()}. Alias: ig = integrated_gradients."


def register(app: typer.Typer) -> None:
    app.command("attribute", help="Score tokens, heads, query-key pairs or neurons for a target (minus foil) logit. "
                + _methods_help())(attribute)


def parse_params(items: list[str] | None) -> dict[str, Any]:
    """``k=v`` pairs; numbers and true/false become numbers and booleans."""
    from core.errors import WorkbenchError
    from core.options import finite_param

    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise WorkbenchError(f"--param takes key=value (got {item!r})")
        value: Any = raw
        if raw.lower() in ("true", "false"):
            value = raw.lower() == "true"
        else:
            for cast in (int, float):
                try:
                    value = cast(raw)
                    break
                except ValueError:
                    pass
        out[key.strip()] = finite_param("--param", key.strip(), value)
    return out


def check_method(method: str, level: str) -> str:
    """Validate method and level against the method table without importing any engine."""
    from attribution.methods import LEVEL_AXES, METHODS, canonical, prompt_level
    from core.errors import MethodError

    name = canonical(method)
    level = prompt_level(level)  # "edge": the query-key level's old name
    if name not in METHODS:
        raise MethodError(f"unknown method {method!r}; known: {', '.join(METHODS)} (alias ig)")
    if level not in LEVEL_AXES:
        raise MethodError(f"unknown level {level!r}; levels: {', '.join(LEVEL_AXES)}")
    if level not in METHODS[name].levels:
        raise MethodError(f"method {name} has no {level} level; it has: {', '.join(METHODS[name].levels)}")
    return name


def attribute(
    model: str = MODEL_ARGUMENT,
    prompt: str = typer.Argument(..., help="The prompt (the model predicts the token after it)."),
    target: str = typer.Option(None, "--target",
                               help="Target token, one token, leading space included (' Paris'); required "
                               "unless --position is before the last token (then: the prompt's next token).",
                               callback=token_text),
    foil: str = FOIL_OPTION,
    method: str = typer.Option("dpa", "--method", help="Attribution method (see the list above)."),
    level: str = LEVEL_OPTION,
    position: int = POSITION_OPTION,
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    param: list[str] = typer.Option(None, "--param", help="Method parameter key=value (repeatable), "
                                    "e.g. --param w_q=0 --param steps=20."),
    save: bool = SAVE_OPTION,
    top: int = typer.Option(10, "--top", help="Items shown in the human-readable table.", callback=positive_int),
    ray_address: str = typer.Option(None, "--ray-address", help="Run as a job on the Ray cluster at HOST:PORT "
                                    "('local': a local Ray instance; default WORKBENCH_RAY_ADDRESS, else here)."),
    workers: int = workers_option("activation patching's items"),
    png: str = png_option(),
    backend: str = typer.Option("tl", "--backend", help="tl (TransformerLens, the default), nnsight or bridge: "
                                "the same numbers (README's engines x backends); nnsight and bridge run here."),
    remote: bool = typer.Option(False, "--remote", help="Run on NDIF through nnsight (with --backend nnsight; MODEL "
                                "a hub id hosted there; nnsight's API key and NDIF_HOST as nnsight reads them)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Score tokens, heads, query-key pairs or neurons for the target (minus foil) logit. Slow methods (activation
    patching) print their estimated cost, measured on this model and prompt, before they start."""
    from attribution.methods import check_prompt_params
    from core.errors import TokenError
    from workbench.commands.common import check_device

    name = check_method(method, level)
    params = parse_params(param)
    check_prompt_params(name, params)  # a parameter the method does not take: refused before torch loads
    check_prompt(prompt, png)  # a bad --png or an empty prompt fails before any work
    if target is None and position is None:
        raise TokenError("give --target (or --position N before the last token to explain the prompt's next token)")
    backend = _check_backend(model, backend, remote, name)  # before torch: a bad backend or server is one line
    from attribution.cost import SLOW_METHODS
    from workbench.scheduler import resolve_address

    elsewhere = workers > 1 or resolve_address(ray_address) is not None
    if elsewhere and (backend != "transformer_lens" or remote):
        from core.errors import BackendError

        raise BackendError(f"--backend {backend}{' --remote' if remote else ''} runs in this process: drop "
                           "--workers and --ray-address (jobs load the TransformerLens backend)")
    # slow methods run as jobs (here, with one worker) on the default backend: their result is on the board, where
    # the Attribution page asking for the same work finds it instead of computing it again
    if backend == "transformer_lens" and (elsewhere or name in SLOW_METHODS):
        from workbench.commands.jobs import run_job
        from workbench.scheduler.specs import AttributeSpec

        spec = AttributeSpec(model=model, device=check_device(device), **dtype_spec(dtype), prompt=prompt,
                             target=target, foil=foil, method=name, level=level, position=position, params=params)
        job, res = run_job(spec, workers, ray_address, save=save)
        out = {**res.to_json(), "job_id": job.id}
        if save:
            out["run"] = job.run_id
        save_here = False  # the job stored it
    else:
        import workbench as wb
        from attribution import attribute as run_attribute
        from attribution import encode_at
        from attribution.cost import estimate

        m = wb.remote_model(model) if remote else wb.load(model, device=check_device(device), dtype=dtype,
                                                          backend=backend)
        enc = encode_at(m, prompt, target, foil, position)
        if target is None and enc.target is None:
            raise TokenError(f"position {position} is the prompt's last token: give --target")
        cost = estimate(m, enc, name, level)
        if cost is not None:
            console().print(f"estimate: {cost.text()}")
        res = run_attribute(m, prompt, target=target, foil=foil, method=name, level=level, position=position,
                            **params)
        out = res.to_json()  # integrated gradients adds baseline_logit, convergence_delta, converged
        if backend != "transformer_lens" or remote:
            out["backend"] = backend + (" (remote, NDIF)" if remote else "")
        save_here = save

    def human(r: dict[str, Any]) -> None:
        c = result_console()
        c.print(f"{r['method']} · {r['level']} · target {r['target']!r}"
                + (f" vs {r['foil']!r}" if r["foil"] else "")
                + ("" if r["position"] is None else f" · at position {r['position']} {r['tokens'][r['position']]!r}")
                + f" · logit {r['target_logit']:.3f} · {r['seconds']:.3f} s"
                + (f" · {r['backend']} backend" if r.get("backend") else ""))
        if "convergence_delta" in r:
            c.print(f"completeness gap {r['convergence_delta']:.3g} (sum of scores - (f(input) - f(baseline)))"
                    + ("" if r["converged"] else ": NOT converged; try --param baseline=mean --param keep_first=true"))
        print(_top_table(res, top).to_string(index=False))

    finish(out, as_json, human, res, save=save_here, png=png)


def _check_backend(model: str, backend: str, remote: bool, method: str) -> str:
    """The loader's backend name, once the backend, the model and (with ``remote``) NDIF are checked without torch:
    an unknown backend, a method the backend refuses on this model, ``--remote`` off nnsight, a model name that is no
    hub id, and a host that does not answer, or answers but not as NDIF, are each one line."""
    from core.models.backend_check import backend_name, check_backend_engine

    backend = backend_name(backend)
    if not remote:
        from core.models.zoo import check_text_model

        check_text_model(model, "attribute")  # an unknown or vision model: refused before anything loads
        check_backend_engine(model, backend, method)
        return backend
    check_backend_engine(model, backend, method, remote=True)
    from core.errors import BackendError
    from core.models import hub

    if not hub.HUB_ID.match(model):
        raise BackendError(f"--remote takes the hub id of a model hosted on NDIF (ORG/NAME, e.g. "
                           f"meta-llama/Llama-3.1-8B), not {model!r}")
    from core.models.nnsight_ndif import check_ndif

    check_ndif(identify=True)
    return backend


def _top_table(res: Any, k: int):
    """The k highest-|score| items as a table."""
    import pandas as pd

    return pd.DataFrame(res.top(k))
