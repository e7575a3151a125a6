"""On-device autotuning: MetaSchedule's search, candidates built in batches into one
host-driven firmware, checked against the untuned kernel and timed on the device.

The names below load on first use, so that `generator.tune.records` (the records file,
which `export --tuning-records` reads) comes without the tuner and MetaSchedule."""

from importlib import import_module

_EXPORTS = {"Task": "tasks", "extract_tasks": "tasks", "TuneSummary": "tuner",
            "tune_model": "tuner", "tune_tasks": "tuner"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'generator.tune' has no attribute {name!r}")
    return getattr(import_module(f"generator.tune.{_EXPORTS[name]}"), name)
