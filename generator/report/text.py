"""The report as terminal tables."""

from __future__ import annotations

from generator.report.model import Layer, RegionUse, StackBound

SMALL_SHARE = 0.001  # blocks under 0.1 % of a region are listed together


def size_text(n: int | None) -> str:
    if n is None:
        return "?"
    if n < 10240:
        return f"{n:,} B"
    return f"{n / 1024:,.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):,.1f} MiB"


def report_lines(report) -> list[str]:
    out = [f"report   {report.project} ({report.board}, module '{report.module}')"
           + (" - ESTIMATE: the link decides" if report.estimate else "")]
    for region in report.regions:
        out += _region_lines(region)
    out.append(_stack_line(report.stack, report.estimate))
    out += _layer_lines(report.layers)
    out += [f"note     {n}" for n in report.notes]
    return out


def _region_lines(region: RegionUse) -> list[str]:
    stack = sum(b.bytes for b in region.blocks if b.category == "stack")
    head = f"{region.name:<8} {size_text(region.section_bytes)} in sections"
    if stack:
        head += f" + {size_text(stack)} stack"
    if region.size is not None:
        head += (f", {size_text(region.size)} region ({100 * region.used / region.size:.1f} % "
                 f"used, {size_text(region.free)} free)")
    lines = [head]
    whole = max(region.used, 1)
    rows = sorted(region.blocks, key=lambda b: -b.bytes)
    small = [b for b in rows if b.bytes / whole < SMALL_SHARE]
    for block in rows:
        if block in small:
            continue
        lines.append(f"  {block.label:<28} {block.category:<13} {block.bytes:>10,} B "
                     f"{100 * block.bytes / whole:5.1f} %")
    if small:
        blocks = f"{len(small)} block{'s' if len(small) > 1 else ''}"
        lines.append(f"  {blocks + ' under 0.1 %':<43}"
                     f"{sum(b.bytes for b in small):>10,} B")
    return lines


def _stack_line(stack: StackBound, estimate: bool = False) -> str:
    reserved = (f" of {size_text(stack.reserved_bytes)} reserved"
                if stack.reserved_bytes is not None else "")
    if estimate:
        return f"stack    the bound{reserved} is known after the link"
    if stack.bound_bytes is None:
        why = stack.reason.removeprefix("unbounded: ")
        return f"stack    unbounded{reserved}: {why}"
    path = " > ".join(stack.path[:8]) + (" > ..." if len(stack.path) > 8 else "")
    return f"stack    at most {stack.bound_bytes:,} B{reserved} (deepest: {path})"


def _shape(layer: Layer) -> str:
    outs = layer.outputs[:1]
    return ", ".join(f"{t.dtype}{t.shape}".replace(" ", "") for t in outs)


def _layer_lines(layers: list[Layer]) -> list[str]:
    if not layers:
        return []
    macs = [la.macs for la in layers if la.macs is not None]
    lines = [f"layers   {len(layers)} calls, {sum(macs):,} MACs, "
             f"{sum(la.weights_bytes for la in layers):,} B of weights",
             f"  {'#':>3} {'kernel':<24} {'operators':<22} {'output':<22} {'MACs':>11} "
             f"{'weights':>8} {'code':>6}  impl"]
    unit = next((k for la in layers if la.profile for k in la.profile if k != "share"), None)
    if unit is not None:
        lines[-1] += f"{'':<6} {unit:>13}  share"
    for la in layers:
        code = "" if la.code_bytes is None else f"{la.code_bytes:,}"
        mac = "?" if la.macs is None else f"{la.macs:,}"
        line = (f"  {la.index:>3} {la.kernel[:24]:<24} {'+'.join(la.operators)[:22]:<22} "
                f"{_shape(la)[:22]:<22} {mac:>11} {la.weights_bytes:>8,} {code:>6}  "
                f"{la.implementation:<10}")
        if unit is not None and la.profile:
            line += f" {la.profile.get(unit, 0):>13,} {100 * la.profile['share']:5.1f}%"
        lines.append(line.rstrip())
    return lines
