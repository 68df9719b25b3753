"""Dual Path Attribution (DPA): see engine.py; the method table entry is ``dpa_scores``."""

from attribution.dpa.engine import LEVELS, DPATrace, dpa_all, dpa_batch, dpa_scores, memory_estimate
from attribution.dpa.params import COMPLETE, DPAParams

__all__ = ["LEVELS", "COMPLETE", "DPAParams", "DPATrace", "dpa_all", "dpa_batch", "dpa_scores", "memory_estimate"]
