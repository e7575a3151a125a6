"""`run --profile`: each call's time, per layer and per kernel, kept beside the build for
`report` (build/profile.json: the last profiled run of that firmware)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from generator.report.layers import METADATA, layers_of, module_metadata
from generator.toolchain import BUILD_DIR, FIRMWARE

PROFILE_FILE = "profile.json"


@dataclass(frozen=True)
class CallTime:
    index: int
    kernel: str
    count: int  # in the run's unit (instructions, cycles, ns, ticks)
    share: float  # of the inference
    macs: int | None

    @property
    def macs_per_unit(self) -> float | None:
        return None if self.macs is None or not self.count else self.macs / self.count

    def to_json(self) -> dict:
        return {**asdict(self), "macs_per_unit": self.macs_per_unit}


def call_times(project_dir: Path, module: str, counts: list[int]) -> list[CallTime]:
    """Each call's time with its layer's kernel and MACs (from the archive's metadata)."""
    layers = layers_of(module_metadata(project_dir / METADATA, module), module)
    total = sum(counts) or 1
    out = []
    for i, count in enumerate(counts):
        layer = layers[i] if i < len(layers) else None
        out.append(CallTime(i, layer.kernel if layer else f"call {i}", count, count / total,
                            layer.macs if layer else None))
    return out


def per_kernel(times: list[CallTime]) -> list[tuple[str, int, int]]:
    """(kernel, calls, total count) for each kernel, the most expensive first."""
    sums: dict[str, list[int]] = {}
    for t in times:
        entry = sums.setdefault(t.kernel, [0, 0])
        entry[0] += 1
        entry[1] += t.count
    return sorted(((k, n, c) for k, (n, c) in sums.items()), key=lambda row: -row[2])


def save_profile(project_dir: Path, unit: str, times: list[CallTime]) -> Path:
    path = project_dir / BUILD_DIR / PROFILE_FILE
    path.write_text(json.dumps({"unit": unit, "calls": [t.to_json() for t in times]},
                               indent=2) + "\n")
    return path


def load_profile(project_dir: Path) -> tuple[str, list[dict]] | None:
    """The last profiled run of the current firmware (None: none, or an older build's)."""
    path = project_dir / BUILD_DIR / PROFILE_FILE
    elf = project_dir / BUILD_DIR / FIRMWARE
    try:
        if path.stat().st_mtime < elf.stat().st_mtime:
            return None
        data = json.loads(path.read_text())
        unit, calls = data["unit"], data["calls"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(unit, str) or not isinstance(calls, list):
        return None
    return unit, [c for c in calls if isinstance(c, dict)]


def profile_lines(unit: str, times: list[CallTime]) -> list[str]:
    total = sum(t.count for t in times)
    lines = [f"profile  {len(times)} calls, {total:,} {unit}",
             f"  {'#':>3} {'kernel':<26} {unit:>13} {'share':>7} {'MACs/' + unit[:5]:>11}"]
    for t in times:
        rate = "" if t.macs_per_unit is None else f"{t.macs_per_unit:.3f}"
        lines.append(f"  {t.index:>3} {t.kernel[:26]:<26} {t.count:>13,} "
                     f"{100 * t.share:6.1f}% {rate:>11}")
    lines.append("  per kernel:")
    for kernel, calls, count in per_kernel(times):
        lines.append(f"      {kernel[:26]:<26} {count:>13,} {100 * count / (total or 1):6.1f}% "
                     f"({calls} call{'s' if calls > 1 else ''})")
    return lines
