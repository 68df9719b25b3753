"""``workbench attribute-set --backend tl|nnsight|bridge``: the job spec's ``backend`` field (typed, checked without
torch; records without it are TransformerLens' and keep their keys), the same scores on nnsight as on the default
backend over a tiny random Llama, and a bad backend one ``error:`` line with exit 2 before anything heavy loads."""

from __future__ import annotations

import json

import pytest
from backend_checks import fresh_cli_refusals
from cli_helpers import assert_bad, run_cli

from workbench.scheduler.specs import AttributeSetSpec, SpecError, parse

ROWS = [{"prompt": "When Mary and John went to the store, John gave a drink to", "target": " Mary", "foil": " John"},
        {"prompt": "When Tom and Anna went to the park, Anna gave a ball to", "target": " Tom", "foil": " Anna"}]


@pytest.fixture(scope="module")
def prompts(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("prompts") / "ioi.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return str(path)


def _set(model, prompts, *extra: str) -> list[str]:
    return ["attribute-set", "--model", str(model), "--prompts", prompts, "--no-save", "--json", *extra]


def test_spec_backend_field():
    spec = AttributeSetSpec(model="m", rows=ROWS, backend="tl")
    assert spec.backend == "transformer_lens" and "backend" not in spec.to_dict()  # as records were before
    old = {"kind": "attribute_set", "model": "m", "rows": ROWS, "method": "dpa", "level": "token"}  # no backend
    assert AttributeSetSpec.from_dict(old).backend == "transformer_lens"
    assert AttributeSetSpec.from_dict(old).key() == spec.key()  # an old record's work is found again
    nn = AttributeSetSpec(model="m", rows=ROWS, backend="nnsight")
    assert nn.to_dict()["backend"] == "nnsight" and nn.key() != spec.key()
    assert parse(nn.to_dict()) == nn
    with pytest.raises(SpecError) as err:
        AttributeSetSpec(model="m", rows=ROWS, backend="nnsite")
    assert "\n" not in str(err.value) and "unknown backend 'nnsite'" in str(err.value)


@pytest.mark.parametrize("method,level", [("gradient", "head"), ("dpa", "token")])
def test_nnsight_gives_the_default_backends_scores(tiny_llama_dir, prompts, monkeypatch, capsys, one_thread,
                                                   method, level):
    def scores(*extra: str) -> tuple[list[dict[str, float]], dict]:
        code, out, err = run_cli(monkeypatch, capsys, *_set(tiny_llama_dir, prompts, "--method", method, "--level",
                                                            level, "--top", "1000", *extra))
        assert code == 0, err
        res = json.loads(out)
        # every item of every prompt (--top above their count), keyed by the item's coordinates
        return [{tuple(v for k, v in item.items() if k != "score"): item["score"] for item in p["top"]}
                for p in res["prompts"]], res

    ref, ref_json = scores()
    got, got_json = scores("--backend", "nnsight")
    assert "backend" not in ref_json and got_json["backend"] == "nnsight"
    assert len(ref) == len(ROWS) and all(r.keys() == g.keys() for r, g in zip(ref, got, strict=True))
    for r, g in zip(ref, got, strict=True):
        scale = max(abs(v) for v in r.values())
        assert scale > 0 and max(abs(v) for v in g.values()) > 0
        assert max(abs(g[k] - r[k]) for k in r) <= 1e-4 * scale


def test_bad_backend_is_one_line(tiny_llama_dir, prompts, monkeypatch, capsys):
    code, _, err = run_cli(monkeypatch, capsys, *_set(tiny_llama_dir, prompts, "--backend", "nnsite"))
    assert_bad(code, err, "unknown --backend 'nnsite'", "tl, nnsight or bridge")
    code, _, err = run_cli(monkeypatch, capsys, *_set(tiny_llama_dir, prompts, "--backend", "bridge",
                                                      "--workers", "2"))
    assert_bad(code, err, "runs in this process", "--workers")


def test_refusals_before_torch(tiny_gpt2_dir, prompts, tmp_path):
    """In a fresh interpreter: an unknown backend, and DPA on GPT-2's nnsight backend (config.json says it), are
    exit 2 with neither torch nor nnsight imported."""
    cases = [_set("tiny-llama", prompts, "--backend", "nnsite"),
             _set(tiny_gpt2_dir, prompts, "--backend", "nnsight", "--method", "dpa")]
    got, errors, stderr = fresh_cli_refusals(cases, tmp_path)
    assert got == {"codes": [2, 2], "heavy": []}, (got, stderr)
    assert len(errors) == 2 and "nnsite" in errors[0] and "dpa does not run on the nnsight backend" in errors[1]


def test_the_job_loads_the_asked_backend(tiny_llama_dir, prompts, monkeypatch, capsys, one_thread):
    """The job's worker loads the spec's backend (the scores alone cannot tell: they are the same)."""
    from workbench.scheduler import kinds

    code, _, err = run_cli(monkeypatch, capsys, *_set(tiny_llama_dir, prompts, "--method", "gradient",
                                                      "--backend", "bridge"))
    assert code == 0, err
    assert [(key[-1], m.backend) for key, m in kinds._MODELS.items()] == [("bridge", "bridge")]
