"""The warm local Ray instance the app starts for a job that goes to Ray: processes and RSS before any job,
with the instance idle after its first job (the model's worker kept warm), and after it ends.
Run with absolute WORKBENCH_JOBS / WORKBENCH_RUNS of its own (and WORKBENCH_RAY_PRESTART=1 for Ray's default)."""
import json
import os
import sys
import time

import psutil

os.environ["WORKBENCH_LOCAL_S"] = "0"  # force Ray: this measures the instance, not the placement
sys.path.insert(0, "/work/main")
from workbench.scheduler import JobBoard, submit
from workbench.scheduler.specs import FaithfulnessSpec

T0 = time.time()

def instance():
    procs = []
    for p in psutil.process_iter(["pid", "cmdline", "create_time", "memory_info"]):
        try:
            c = " ".join(p.info["cmdline"] or [])
            if p.info["create_time"] >= T0 - 1 and p.pid != os.getpid() and (
                    "ray" in c or "workbench.scheduler" in c or "raylet" in c):
                procs.append({"pid": p.pid, "rss_mb": round(p.info["memory_info"].rss / 2**20, 1), "cmd": c[:100]})
        except psutil.Error:
            pass
    return procs

def summary(tag):
    ps = instance()
    return {"when": tag, "processes": len(ps), "rss_mb": round(sum(p["rss_mb"] for p in ps), 1),
            "biggest": sorted(((p["rss_mb"], p["cmd"][:70]) for p in ps), reverse=True)[:4]}

out = {"server_rss_mb": round(psutil.Process().memory_info().rss / 2**20, 1), "cores": os.cpu_count(),
       "steps": [summary("before any job")]}
board = JobBoard()
ioi = "When Mary and John went to the store, John gave a drink to"
rows = [{"prompt": ioi, "target": " Mary", "foil": " John"}] * 2
spec = FaithfulnessSpec(model="smollm2-135m", rows=rows, methods=["dpa"], level="token")
t = time.time()
job = submit(spec, board=board, warm_owner=os.getpid())
while board.get(job.id).state in ("queued", "running"):
    time.sleep(0.5)
job = board.get(job.id)
out["job"] = {"state": job.state, "seconds": round(time.time() - t, 1), "log": job.log[-6:], "error": job.error}
out["steps"].append(summary("just after the first job (model worker warm)"))
time.sleep(20)
out["steps"].append(summary("idle 20 s later"))
print(json.dumps(out, indent=1))
