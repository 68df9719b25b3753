"""``workbench faithfulness``: disrupt / recover curves of attribution methods on a prompt set."""

from __future__ import annotations

import typer

from core.options import positive_int
from core.prompt_files import read_prompts
from workbench.commands.common import (
    DEVICE_OPTION,
    DTYPE_OPTION,
    JSON_OPTION,
    LIMIT_OPTION,
    PROMPT_SET_MODEL_OPTION,
    PROMPTS_OPTION,
    SAVE_OPTION,
    THREADS_OPTION,
    USE_FOIL_OPTION,
    dtype_spec,
    emit,
    result_console,
)
from workbench.commands.jobs import RAY_ADDRESS_OPTION, WORKERS_OPTION


def register(app: typer.Typer) -> None:
    app.command("faithfulness")(faithfulness)


def parse_params(items: list[str], methods: list[str] | None = None) -> dict[str, dict]:
    """--param ig.steps=32 -> {"integrated_gradients": {"steps": 32}} (values parsed as JSON if they can).
    With ``methods`` (those --methods runs), a parameter for a known method that is not run is refused: it
    would be dropped without a word."""
    from attribution.methods import canonical
    from core.checks import JSONTooDeep, loads_bounded
    from core.errors import MethodError
    from core.options import finite_param

    out: dict[str, dict] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        method, dot, name = key.partition(".")
        if not sep or not dot or not method or not name:
            raise MethodError(f"--param {item!r}: write METHOD.NAME=VALUE, e.g. ig.steps=32")
        try:
            parsed = loads_bounded(value)  # depth-bounded, as every JSON read
        except JSONTooDeep as exc:
            raise MethodError(f"--param {key}: the value is {exc}") from None
        except ValueError:
            parsed = value
        out.setdefault(canonical(method), {})[name] = finite_param("--param", key, parsed)
        run = {canonical(m) for m in methods or []}
        if methods is not None and canonical(method) not in run:
            from attribution.methods import METHODS

            if canonical(method) in METHODS:  # an unknown name is refused as such later, with the known ones
                raise MethodError(f"--param {item!r} is for {method}, which --methods ({', '.join(methods)}) "
                                  f"does not run: add {method} to --methods or drop the parameter")
    return out


def parse_grid(text: str) -> list[float]:
    """"0.1,0.2,1" -> [0.1, 0.2, 1.0]; MethodError unless increasing fractions in [0, 1]."""
    from attribution.faithfulness import check_grid
    from core.errors import MethodError
    from core.options import split_list

    try:
        values = [float(x) for x in split_list("--grid", text)]
    except ValueError:
        raise MethodError(f"--grid {text!r}: write comma-separated fractions, e.g. 0,0.5,1") from None
    return check_grid(values)


def faithfulness(
    model: str = PROMPT_SET_MODEL_OPTION,
    prompts: str = PROMPTS_OPTION,
    methods: str = typer.Option(..., "--methods", help="Comma-separated methods, e.g. dpa,ig,gradient,random "
                                "(activation_patching adds Spearman / recall@10 against it)."),
    level: str = typer.Option("token", "--level", help="token | head | neuron."),
    limit: int = LIMIT_OPTION,
    ablation: str = typer.Option("zero", "--ablation", help="zero | mean (mean over the prompts' positions)"),
    rank: str = typer.Option("signed", "--rank", help="signed (items pushing the target up first) | abs "
                             "(largest influence either way first; unsigned methods are unchanged)."),
    foil: bool = USE_FOIL_OPTION,
    param: list[str] = typer.Option(None, "--param", help="Method parameter METHOD.NAME=VALUE (repeatable), "
                                    "e.g. ig.steps=32, dpa.w_v=1."),
    grid: str = typer.Option(None, "--grid", help="Fractions p, comma-separated (default: the level's grid, "
                             "0 and 1 included, so random scores 0); e.g. 0.1,0.2,...,1 to compare with the "
                             "paper scripts' figures."),
    batch_size: int = typer.Option(32, "--batch-size", help="Ablated forwards per batch.", callback=positive_int),
    threads: int = THREADS_OPTION,
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    save: bool = SAVE_OPTION,
    workers: int = WORKERS_OPTION,
    ray_address: str = RAY_ADDRESS_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Disrupt / recover AUCs, total = recover - disrupt, and seconds per attribution, per method.

    Runs as a job (``workbench jobs list``): with --workers N the prompts are sharded over N Ray workers;
    the numbers are those of one process."""
    from core.errors import MethodError
    from workbench.commands.common import check_device

    if level not in ("token", "head", "neuron"):
        raise MethodError(f"unknown level {level!r}: token, head or neuron")
    if ablation not in ("zero", "mean"):
        raise MethodError(f"unknown ablation {ablation!r}: zero or mean")
    if rank not in ("signed", "abs"):
        raise MethodError(f"unknown rank {rank!r}: signed or abs")
    from core.options import split_list

    names = split_list("--methods", methods)  # empty, "dpa," and "dpa,dpa" refused, naming --methods
    params = parse_params(param, names)  # before resolve_method, which imports each method's engine (torch)
    from attribution.faithfulness import resolve_method

    for name in names:
        resolve_method(name, level)
    fractions = parse_grid(grid) if grid is not None else None  # --grid '' is refused, not the default
    rows = read_prompts(prompts, limit)
    device = check_device(device)

    from core.models.zoo import check_text_model
    from workbench.commands.jobs import run_job
    from workbench.scheduler.specs import FaithfulnessSpec

    check_text_model(model, "faithfulness")  # before the job starts
    spec = FaithfulnessSpec(model=model, device=device, **dtype_spec(dtype), threads=threads, rows=rows,
                            prompts_file=prompts, limit=limit, methods=names, level=level, ablation=ablation,
                            rank=rank, use_foil=foil, params=params, grid=fractions, batch_size=batch_size)
    job, result = run_job(spec, workers, ray_address, save=save)
    out = result.to_json()
    out.pop("curves")
    out["job_id"] = job.id
    if save:
        out["run_id"] = job.run_id

    def human(_):
        print_report(result.markdown())
        if save:
            result_console().print(f"saved run {out['run_id']}")

    emit(out, as_json, human)


# Short headers so that the table fits 80 columns with the method names whole (they are what --methods takes)
SHORT = {"disrupt_auc": "disrupt", "recover_auc": "recover", "total_std": "std", "attribution_seconds": "seconds",
         "recall_at_10": "recall@10", "convergence_gap": "gap"}


def print_report(markdown: str) -> None:
    """The report's title and its table through common.print_table (rich's Markdown cut headers to fit)."""
    import textwrap

    from workbench.commands.common import print_table, result_console

    lines = markdown.splitlines()
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines if line.startswith("| ")]
    title = " ".join(line for line in lines if line and not line.startswith("|"))
    print("\n".join(textwrap.wrap(title, max(40, result_console().width))))
    if rows:
        header = [SHORT.get(c, c) for c in rows[0]]
        print_table(header, rows[1:], whole=("method",), numbers=tuple(h for h in header if h != "method"))
