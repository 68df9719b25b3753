"""HookedTransformer (the default backend) against TransformerBridge (compatibility mode) on one model.

    nice -n 19 .venv/bin/python scripts/compare_bridge.py [--model smollm2-135m] [--reps 5]

Reports the largest logit difference over a few prompts, whether DPA (every level) and the circuits'
split head inputs run on the bridge, DPA's token-level CPU time on each backend (min over reps, interleaved),
and the same for one gradient. The default moves to the bridge only if the logits agree to 1e-5 and DPA
runs within 1.2x of today's time (issue 18, item 13).
"""

from __future__ import annotations

import argparse
import json
import time
import traceback

PROMPTS = [("The capital of France is", " Paris", None),
           ("When Mary and John went to the store, John gave a drink to", " Mary", " John")]


def attempt(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs), None
    except Exception as exc:  # report, do not stop: the point is to see what fails
        where = traceback.extract_tb(exc.__traceback__)[-1].name
        return None, f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]} (in {where})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()

    import torch

    import workbench as wb
    from attribution import attribute

    torch.set_num_threads(1)
    started = time.perf_counter()
    ht = wb.load(args.model)
    t_ht = time.perf_counter() - started
    started = time.perf_counter()
    br = wb.load(args.model, backend="bridge")
    t_br = time.perf_counter() - started
    out: dict = {"load_seconds": {"transformer_lens": t_ht, "bridge": t_br}}
    diffs = []
    for prompt, _, _ in PROMPTS:
        tokens = ht.to_tokens(prompt)
        diffs.append(float((ht.logits(tokens) - br.logits(tokens)).abs().max()))
    out["max_logit_diff"] = max(diffs)
    prompt, target, foil = PROMPTS[1]
    for level in ("token", "head", "neuron", "qk"):
        res, err = attempt(attribute, br, prompt, target, foil, method="dpa", level=level)
        ref = attribute(ht, prompt, target, foil, method="dpa", level=level)
        out[f"dpa_{level}_on_bridge"] = err or f"max diff {float((res.scores - ref.scores).abs().max()):.2e}"

    def split(m):
        with m.split_inputs():
            _, cache = m.run_with_cache(m.to_tokens(prompt), names_filter=["blocks.0.hook_q_input"])
        return tuple(cache["blocks.0.hook_q_input"].shape)

    out["split_inputs_on_bridge"] = attempt(split, br)[1] or "ok"
    timings = {}
    for name, m in (("transformer_lens", ht), ("bridge", br)):
        for method in ("dpa", "gradient"):
            res, err = attempt(attribute, m, prompt, target, foil, method=method, level="token")
            if err:
                timings[f"{method}:{name}"] = err
                continue
            cpu = []
            for _ in range(args.reps):
                c = time.process_time()
                attribute(m, prompt, target, foil, method=method, level="token")
                cpu.append(time.process_time() - c)
            timings[f"{method}:{name}"] = min(cpu)
    out["cpu_seconds"] = timings
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
