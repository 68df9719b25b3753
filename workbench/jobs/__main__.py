"""``python -m workbench.jobs ROOT JOB_ID``: the driver process of one job started by ``submit``."""

import os
import sys

from workbench.jobs.runner import drive_recorded

if __name__ == "__main__":
    drive_recorded(sys.argv[1], sys.argv[2])
    sys.stdout.flush()
    os._exit(0)  # do not wait on Ray's shutdown hooks: the job's record is final
