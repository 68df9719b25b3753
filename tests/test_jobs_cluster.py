"""A real two-node Ray cluster on this machine (issue 27): ``ray start --head`` on 127.0.0.1 and a second
node ``ray start --address`` as separate processes, one CPU each, so the two shards of a job land one on each
node. Over ``--ray-address`` (as ``workbench ... --workers 2 --ray-address HEAD:PORT`` runs them):

- a sharded faithfulness job and a sharded activation-patching job give exactly one process's numbers;
- the second node is killed mid-job (its raylet and its workers, SIGKILL): the job fails with one clear
  line naming the dead shard, and nothing is saved;
- both nodes are shut down (every process of this cluster, found by its own temp dir, and nothing else).

The README's "Where jobs run" section describes this very setup. The jobs' driver is one subprocess, so this
test process never connects to Ray."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from core.store import RunStore
from workbench.scheduler import JobBoard

RAY = Path(sys.executable).with_name("ray")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not RAY.exists(), reason="ray is not installed")]


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _node_args(name: str) -> list[str]:
    """Ports of one node's own servers: two nodes on one host must not share them. Given explicitly, the
    raylet need not wait for its agents to report theirs (on a busy machine that wait ran out, and the raylet
    died: "The current node timed out during startup")."""
    nm, om, agent, grpc, env_agent, metrics = _free_ports(6)
    return ["--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--resources", json.dumps({name: 1}),
            "--node-manager-port", str(nm), "--object-manager-port", str(om), "--dashboard-agent-listen-port",
            str(agent), "--dashboard-agent-grpc-port", str(grpc), "--runtime-env-agent-port", str(env_agent),
            "--metrics-export-port", str(metrics), "--disable-usage-stats"]


def _start(cmd: list[str], env: dict[str, str], temp_dir: str, node: str, tries: int = 3) -> None:
    """`ray start`, again after a failed try (its processes ended first): on a machine busy enough that the
    node's processes take over 30 s to start, Ray gives up ("timed out during startup"); a later try, its
    files cached, usually makes it."""
    import psutil

    for attempt in range(tries):
        # a session of its own is a scheduling group of its own (Linux autogroups): the node's processes get
        # their fair share of the CPU, not a slice of whatever niced group runs the tests (a node whose agents
        # take over 15 s to start dies: "The current node timed out during startup")
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, start_new_session=True)
        if done.returncode == 0:
            return
        if attempt + 1 == tries or "timed out during startup" not in done.stderr + done.stdout:
            raise AssertionError((cmd[:3], done.stdout[-2000:], done.stderr[-2000:]))
        failed = [p for p in _processes_of(temp_dir) if node in " ".join(p.cmdline())]  # this node's only
        for proc in failed:
            try:
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(failed, timeout=10)


def _processes_of(temp_dir: str) -> list:
    """Every process of this cluster: Ray's processes carry the cluster's temp dir (sessions, sockets, logs)
    in their command lines; nothing else on the machine does."""
    import psutil

    found: dict[int, object] = {}
    for proc in psutil.process_iter(["pid", "cmdline", "name"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            # agents rename themselves (ray::DashboardAgent): theirs are the log files they hold open
            if temp_dir in cmdline or (cmdline.startswith("ray::") and
                                       any(temp_dir in f.path for f in proc.open_files())):
                found[proc.pid] = proc
                found.update({c.pid: c for c in proc.children(recursive=True)})
        except (psutil.Error, TypeError):
            continue
    return list(found.values())


@pytest.fixture
def cluster():
    """(address, kill_node_b): a head and a second node, started by `ray start` and stopped after the test."""
    import psutil

    temp_dir = tempfile.mkdtemp(prefix="wbray", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    (port,) = _free_ports(1)
    # Ray 2.60's `ray start --head` turns token authentication on, and then every node and driver needs the
    # token (RAY_AUTH_TOKEN or ~/.ray/auth_token); this cluster listens on 127.0.0.1 only
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    address = f"127.0.0.1:{port}"
    nodes = {}
    try:
        head = [str(RAY), "start", "--head", "--port", str(port), "--include-dashboard", "false",
                "--temp-dir", temp_dir, *_node_args("node_a")]
        _start(head, env, temp_dir, "")
        nodes["b"] = _node_args("node_b")
        port_b = nodes["b"][nodes["b"].index("--node-manager-port") + 1]
        worker = [str(RAY), "start", "--address", address, "--temp-dir", temp_dir, *nodes["b"]]
        _start(worker, env, temp_dir, f"--node_manager_port={port_b}")

        def kill_node_b() -> list[int]:
            """SIGKILL node B's raylet and every process under it (its workers and agents)."""
            raylets = [p for p in _processes_of(temp_dir)
                       if "raylet" in p.name() and f"--node_manager_port={port_b}" in " ".join(p.cmdline())]
            assert len(raylets) == 1, [p.cmdline() for p in _processes_of(temp_dir)]
            victims = raylets[0].children(recursive=True) + raylets
            for p in victims:
                try:
                    p.kill()
                except psutil.Error:
                    pass
            return [p.pid for p in victims]

        yield address, kill_node_b
    finally:
        for p in _processes_of(temp_dir):
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(_processes_of(temp_dir), timeout=10)
        left = _processes_of(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert not left, f"cluster processes left running: {[p.pid for p in left]}"


DRIVER = textwrap.dedent("""
    import json, sys
    import torch
    torch.set_num_threads(1)  # as a Ray worker runs: bit-identical numbers need equal thread counts
    from core.errors import WorkbenchError
    from workbench.scheduler import run

    address, model, rows_file = sys.argv[1:4]
    rows = [json.loads(line) for line in open(rows_file)]
    out = {}
    faith = {"kind": "faithfulness", "model": model, "rows": rows, "methods": ["random", "atp"],
             "level": "head", "ablation": "mean"}
    for name, spec in (("faith", faith), ("patch", {
            "kind": "attribute", "model": model, "prompt": rows[0]["prompt"], "target": rows[0]["target"],
            "foil": rows[0]["foil"], "method": "activation_patching", "level": "neuron", "position": None,
            "params": {"batch_size": 16}})):
        _, one = run(spec, save=False)
        job, two = run(spec, workers=2, address=address)
        if name == "faith":
            out[name] = [{m: {k: v for k, v in d.items() if k != "attribution_seconds"}  # all but the time
                          for m, d in r.to_json()["methods"].items()} for r in (one, two)]
        else:
            out[name] = [one.scores.tolist(), two.scores.tolist()]
        out[name + "_job"] = {"state": job.state, "run_id": job.run_id, "shards": job.log}
    print(json.dumps(out), flush=True)
    try:  # the second node is killed while this runs
        run({"kind": "sleep", "seconds": 120, "steps": 1200}, workers=2, address=address)
        print(json.dumps({"kill": "finished"}), flush=True)
    except WorkbenchError as exc:
        print(json.dumps({"kill": type(exc).__name__, "error": str(exc)}), flush=True)
""")


def _rows(model_dir: Path, n: int) -> list[dict]:
    import workbench as wb
    from tests.test_jobs import _rows as rows_of

    return rows_of(wb.load(str(model_dir)), n)


def test_two_nodes_give_one_process_numbers_and_a_killed_node_fails_the_job(cluster, tiny_llama_dir, tmp_path):
    address, kill_node_b = cluster
    rows_file = tmp_path / "rows.jsonl"
    rows_file.write_text("".join(json.dumps(r) + "\n" for r in _rows(tiny_llama_dir, 4)))
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, address, str(tiny_llama_dir), str(rows_file)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[1], env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    try:
        first = json.loads(driver.stdout.readline() or "null") or pytest.fail(driver.stderr.read()[-3000:])
        for name in ("faith", "patch"):
            one, two = first[name]
            assert one == two, name  # every number (the faithfulness timings aside) is the one-process one
            job = first[name + "_job"]
            assert job["state"] == "done" and job["run_id"]
            started = [line for line in job["shards"] if "started (pid" in line]
            assert len(started) == 2, job["shards"]
            assert any("each asking for 1 cpus" in line for line in job["shards"])
        board = JobBoard()
        end = time.monotonic() + 60
        while not [j for j in board.list() if j.kind == "sleep"]:  # the driver records it next
            assert time.monotonic() < end, "the sleep job was never recorded"
            time.sleep(0.2)
        sleep = next(j for j in board.list() if j.kind == "sleep")
        while board.get(sleep.id).done < 2 or sum("started (pid" in x for x in board.get(sleep.id).log) < 2:
            assert time.monotonic() < end, board.get(sleep.id).log
            time.sleep(0.2)
        killed = kill_node_b()
        last = json.loads(driver.stdout.readline() or "null") or pytest.fail(driver.stderr.read()[-3000:])
        driver.wait(60)
    finally:
        driver.kill()
        driver.wait()
    assert last["kill"] == "JobFailed" and "shard" in last["error"] and "died" in last["error"], last
    assert "\n" not in last["error"] and killed
    got = board.get(sleep.id)
    assert got.state == "failed" and got.run_id is None and "nothing was saved" in got.error
    assert [r["kind"] for r in RunStore().list() if r["kind"] == "sleep"] == []  # nothing half-written
