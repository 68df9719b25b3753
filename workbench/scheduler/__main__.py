"""``python -m workbench.scheduler ROOT JOB_ID [--warm=OWNER_PID]``: the driver of one job started by ``submit``."""

import os
import sys

from workbench.scheduler.runner import drive_recorded


def _shutdown_ray(seconds: float = 10.0) -> None:
    """Stop this driver's local Ray instance (its raylet, GCS and agents), waiting at most ``seconds``."""
    import threading

    import ray

    if ray.is_initialized():
        done = threading.Thread(target=ray.shutdown, daemon=True)
        done.start()
        done.join(seconds)


if __name__ == "__main__":
    owner = [int(a.split("=", 1)[1]) for a in sys.argv[3:] if a.startswith("--warm=")]
    drive_recorded(sys.argv[1], sys.argv[2], warm=owner[0] if owner else None)
    _shutdown_ray()
    sys.stdout.flush()
    os._exit(0)  # the job's record is final: nothing else to wait for
