"""``workbench attribute-set``: one method at one level over a JSONL prompt set; one run for the set."""

from __future__ import annotations

import typer

from core.options import positive_int
from workbench.commands.common import (
    DEVICE_OPTION,
    DTYPE_OPTION,
    JSON_OPTION,
    LEVEL_OPTION,
    LIMIT_OPTION,
    PROMPT_SET_MODEL_OPTION,
    PROMPTS_OPTION,
    SAVE_OPTION,
    THREADS_OPTION,
    USE_FOIL_OPTION,
    dtype_spec,
    finish,
    result_console,
)
from workbench.commands.jobs import RAY_ADDRESS_OPTION, WORKERS_OPTION


def register(app: typer.Typer) -> None:
    app.command("attribute-set")(attribute_set)


def attribute_set(
    model: str = PROMPT_SET_MODEL_OPTION,
    prompts: str = PROMPTS_OPTION,
    method: str = typer.Option("dpa", "--method", help="Attribution method (see `workbench attribute --help`)."),
    level: str = LEVEL_OPTION,
    limit: int = LIMIT_OPTION,
    foil: bool = USE_FOIL_OPTION,
    batch_size: int = typer.Option(16, "--batch-size", help="Prompts per DPA pass (other methods run "
                                   "one prompt at a time).", callback=positive_int),
    param: list[str] = typer.Option(None, "--param", help="Method parameter key=value (repeatable)."),
    top: int = typer.Option(5, "--top", help="Items listed per prompt.", callback=positive_int),
    threads: int = THREADS_OPTION,
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    save: bool = SAVE_OPTION,
    workers: int = WORKERS_OPTION,
    ray_address: str = RAY_ADDRESS_OPTION,
    backend: str = typer.Option("tl", "--backend", help="tl (TransformerLens, the default), nnsight or bridge: "
                                "the same scores (README's engines x backends); nnsight and bridge run here."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Scores for every prompt of a set, each prompt's top items, and seconds per prompt; saves one run.

    Runs as a job (``workbench jobs list``): with --workers N the prompts are sharded over N Ray workers (at
    batch boundaries, so every score is what one process computes)."""
    from attribution.methods import check_prompt_params
    from core.prompt_files import read_prompts
    from workbench.commands.attribute import check_method, parse_params
    from workbench.commands.common import check_device
    from workbench.scheduler import resolve_address

    name = check_method(method, level)
    params = parse_params(param)
    check_prompt_params(name, params)
    from core.models.backend_check import backend_name, check_backend_engine

    backend = backend_name(backend)  # before torch: an unknown backend is one line
    rows = read_prompts(prompts, limit)
    device = check_device(device)
    from core.models.zoo import check_text_model

    check_text_model(model, "attribute-set")  # before the job starts
    check_backend_engine(model, backend, name)  # an engine the backend refuses on this model, from config.json
    if backend != "transformer_lens" and (workers > 1 or resolve_address(ray_address) is not None):
        from core.errors import BackendError

        raise BackendError(f"--backend {backend} runs in this process: drop --workers and --ray-address "
                           "(jobs on Ray workers load the TransformerLens backend)")

    from workbench.commands.jobs import run_job
    from workbench.scheduler.specs import AttributeSetSpec

    spec = AttributeSetSpec(model=model, device=device, **dtype_spec(dtype), threads=threads, rows=rows,
                            prompts_file=prompts, method=name, level=level, use_foil=foil, batch_size=batch_size,
                            params=params, backend=backend)
    job, result = run_job(spec, workers, ray_address, save=save)
    out = result.to_json(top=top)
    out["prompts_file"] = prompts
    if backend != "transformer_lens":
        out["backend"] = backend
    out["job_id"] = job.id
    if save:
        out["run"] = job.run_id

    def human(r):
        c = result_console()
        c.print(f"{r['method']} · {r['level']} · {r['n_prompts']} prompts · {r['seconds']:.2f} s "
                f"({r['seconds_per_prompt']:.3f} s per prompt, batch {r['batch_size']})")
        print_result_table(result.table())

    finish(out, as_json, human)


# The per-prompt table's columns at 80 columns: short headers, numbers rounded; seconds (one batch's share,
# in the header line above) stay in --json and the stored table.
SHOWN = {"prompt": "prompt", "target": "target", "foil": "foil", "n_tokens": "tokens", "target_logit": "logit",
         "top_item": "top item", "top_score": "score"}


def print_result_table(df) -> None:
    from workbench.commands.common import print_table

    cols = [c for c in SHOWN if c in df.columns]

    def cell(v) -> str:
        if isinstance(v, float):
            return f"{v:.3f}"
        return "" if v is None else str(v)

    print_table([SHOWN[c] for c in cols], [[cell(v) for v in row] for row in df[cols].itertuples(index=False)],
                whole=("target", "foil"), numbers=("tokens", "logit", "score"))
