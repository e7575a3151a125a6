"""On-device autotuning: MetaSchedule's search, candidates built in batches into one
host-driven firmware, checked against the untuned kernel and timed on the device."""

from generator.tune.tasks import Task, extract_tasks
from generator.tune.tuner import TuneSummary, tune_model, tune_tasks

__all__ = ["Task", "TuneSummary", "extract_tasks", "tune_model", "tune_tasks"]
