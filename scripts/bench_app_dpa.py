"""Benchmark: the attribution page shows DPA for a fresh 30-token prompt on smollm2-135m, model warm.

Runs the real page through Streamlit's AppTest with the server's thread setting and prints the
time of each page run after the new prompt is entered (goal: under 3 s).

    python scripts/bench_app_dpa.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import torch

    from app.testing import chart, open_page, problems

    torch.set_num_threads(1 if (os.cpu_count() or 2) <= 2 else (os.cpu_count() or 2) // 2)
    base = ("In the small town by the river, the baker opened his shop early every morning, and the "
            "children who walked past on their way to school ")
    endings = ["asked for", "wished for", "looked for", "waited for", "hoped for", "cared for", "paid for"]
    state = {"attr_model": "smollm2-135m", "attr_prompt": "The capital of France is", "attr_methods": ["dpa"]}
    at = open_page("attribution", state, timeout=300)  # loads and warms the model
    times = []
    for end in endings[: args.rounds]:
        started = time.perf_counter()
        at.text_area(key="attr_prompt").set_value(base + end).run()
        times.append(round(time.perf_counter() - started, 2))
        assert not problems(at) and chart(at, "attr_tokens")
    print(json.dumps({"page_seconds": times, "best": min(times), "median": sorted(times)[len(times) // 2],
                      "goal_s": 3.0, "load_avg_1m": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
