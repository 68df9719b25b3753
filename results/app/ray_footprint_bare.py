"""Processes and RSS a local Ray instance holds, idle after ray.init, under a configuration given as argv[1]:
``default`` (Ray's own) or ``lean`` (workbench.scheduler.worker.LEAN_RAY). Run: python ray_footprint_bare.py lean"""
import json
import os
import sys
import time

import psutil
import ray

mode = sys.argv[1]
me = psutil.Process()

def tree():
    # the instance's processes: every process started since ray.init whose command line names ray, + children
    procs = []
    for p in psutil.process_iter(["pid", "cmdline", "create_time", "memory_info", "ppid"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            if p.info["create_time"] >= T0 - 1 and p.pid != me.pid and (
                    "ray" in cmd or "raylet" in cmd or "gcs_server" in cmd):
                procs.append((p.pid, p.info["memory_info"].rss, cmd[:90]))
        except psutil.Error:
            pass
    return procs

T0 = time.time()
base = me.memory_info().rss
kw = dict(num_cpus=os.cpu_count() or 1, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
if mode == "lean":
    kw["_system_config"] = {"prestart_worker_first_driver": False, "enable_worker_prestart": False,
                            "enable_metrics_collection": False}
ray.init(**kw)
out = {"mode": mode, "driver_rss_before_mb": base / 2**20}
for wait in (3, 10):
    time.sleep(wait - (time.time() - T0 - 0) if wait > time.time() - T0 else 0)
    procs = tree()
    out[f"after_{wait}s"] = {"processes": len(procs), "rss_mb": round(sum(r for _, r, _ in procs) / 2**20, 1),
                            "driver_rss_mb": round(me.memory_info().rss / 2**20, 1),
                            "names": sorted(c.split()[0].rsplit("/", 1)[-1] for _, _, c in procs)}
@ray.remote(num_cpus=1)
def one():
    return os.getpid()
t = time.time()
ray.get(one.remote())
out["first_task_s"] = round(time.time() - t, 2)
time.sleep(2)
procs = tree()
out["after_one_task"] = {"processes": len(procs), "rss_mb": round(sum(r for _, r, _ in procs) / 2**20, 1)}
ray.shutdown()
time.sleep(2)
out["after_shutdown_processes"] = len(tree())
print(json.dumps(out, indent=1))
