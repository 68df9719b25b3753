"""Measurements of the seed papers' findings on the shipped checkpoints (see
shared/specs/toy_tasks.md). Each function loads its models, measures, and returns plain numbers;
tests/test_circuits_findings.py pins them and the app can show them."""

from __future__ import annotations

from typing import Any

from circuits.tools import ablation, composition, fourier, patching
from circuits.toy.analysis import ablate_task
from circuits.toy.train import evaluate
from core.models import zoo
from core.models.toy_tasks import get_task


def _load(name: str):
    return zoo.load(name)  # the core loader, not the facade (layers point down)


def _task(model):
    info = model.info["task"]
    return get_task(info["task"], **info["params"])


def ioi_heads(name: str = "ioi-attn-1l2h") -> dict[str, Any]:
    """Test accuracy, and accuracy with each head ablated (zero, mean, resample)."""
    m = _load(name)
    t = _task(m)
    b = t.batch("test")
    out: dict[str, Any] = {"accuracy": evaluate(m, b, t)["accuracy"]}
    heads = [f"head:{layer}.{h}" for layer in range(m.arch.n_layers) for h in range(m.arch.n_heads)]
    for method in ("zero", "mean", "resample"):
        r = ablate_task(m, b, t, heads, method, reference=t.batch("train").tokens)
        out[method] = {c: s["accuracy"] for c, s in zip(r.components, r.scores, strict=False)}
    return out


def ioi_composition(name: str = "ioi-attn-2l1h") -> dict[str, float]:
    """Q-, K- and V-composition of L0H0 into L1H0, and the path-patching effect of L0H0 through
    each of L1H0's inputs (corrupted = IO and S swapped)."""
    m = _load(name)
    t = _task(m)
    b = t.batch("test")
    bad = t.corrupt(b)
    out = {f"{k}_comp": float(composition.composition_scores(m, k).scores[0, 0, 1, 0]) for k in "qkv"}
    for via in "qkv":
        r = patching.path_patch(
            m, b.tokens, bad.tokens, b.meta["io"], b.meta["s"], sender=(0, 0), receivers=[(1, 0)], via=via
        )
        out[f"path_{via}"] = r["effect"]
    return out


def carry_redistribution(name: str, method: str = "mean") -> dict[str, float]:
    """Accuracy with the attention layer or the FFN ablated; drops relative to the intact model,
    also on sum digits that take a carry."""
    m = _load(name)
    t = _task(m)
    b = t.batch("test", 1000, seed=0)
    ref = t.batch("train", 1000, seed=1).tokens
    base = evaluate(m, b, t)
    out = {"accuracy": base["accuracy"], "token_accuracy": base["token_accuracy"]}
    carry_mask = b.mask.clone()
    carry_mask[:, 2 * t.digits + 1 :] &= b.meta["carries"]
    for comp in ("attn:0", "mlp:0"):
        hooks = ablation.ablation_hooks(m, [comp], method, reference=ref)
        ev = evaluate(m, b, t, hooks)
        key = comp.split(":")[0]
        out[f"{key}_accuracy"] = ev["accuracy"]
        out[f"{key}_drop"] = base["accuracy"] - ev["accuracy"]
        out[f"{key}_digit_drop"] = base["token_accuracy"] - ev["token_accuracy"]
        out[f"{key}_carry_drop"] = _digit_acc(m, b, carry_mask) - _digit_acc(m, b, carry_mask, hooks)
    # per-digit drops are the primary measure: whole-sum accuracy falls to ~0 under either ablation
    out["attn_over_ffn"] = out["attn_digit_drop"] / max(out["mlp_digit_drop"], 1e-6)
    out["sum_attn_over_ffn"] = out["attn_drop"] / max(out["mlp_drop"], 1e-6)
    out["carry_attn_over_ffn"] = out["attn_carry_drop"] / max(out["mlp_carry_drop"], 1e-6)
    return out


def _digit_acc(m, b, mask, hooks=()) -> float:
    import torch

    with torch.no_grad():
        logits = m.run_with_hooks(b.tokens, fwd_hooks=list(hooks))
    return float((logits.argmax(-1) == b.targets)[mask].float().mean())


def modadd_fourier(name: str) -> dict[str, Any]:
    m = _load(name)
    t = _task(m)
    r = fourier.fourier_analysis(m)
    return {
        "accuracy": evaluate(m, t.batch("test"), t)["accuracy"],
        "per_neuron": r.per_neuron,
        "subspace": r.subspace,
        "key_freqs": r.key_freqs,
    }


def markov_stages(name: str = "markov-3h") -> dict[str, Any]:
    """Per-head lag attention along training (metrics.json) and at the end."""
    import json
    from pathlib import Path

    m = _load(name)
    t = _task(m)
    metrics = json.loads(Path(m.info["metrics_file"]).read_text())
    dyn = metrics.get("dynamics", [])
    top_lag = t.lags[max(range(len(t.lags)), key=lambda i: t.weights[i])]

    def best(lag_att):
        return [t.lags[max(range(len(row)), key=row.__getitem__)] for row in lag_att[0]]

    stages = [{"step": d["step"], "best_lag": best(d["lag_attention"])} for d in dyn]
    final = best(t.lag_attention(m))
    return {
        "stages": stages,
        "final_best_lag": final,
        "top_lag": top_lag,
        "competition_steps": [s["step"] for s in stages if sum(x == top_lag for x in s["best_lag"]) >= 2],
        "test_loss": metrics["test"]["loss"],
        "optimal_loss": metrics["test"].get("optimal_loss"),
    }


def icl_fit(name: str = "icl-regression") -> dict[str, float]:
    import json
    from pathlib import Path

    m = _load(name)
    metrics = json.loads(Path(m.info["metrics_file"]).read_text())
    return {"test_loss": metrics["test"]["loss"], "baseline_loss": metrics["test"]["baseline_loss"]}
