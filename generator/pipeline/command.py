"""`microtvm-gen pipeline`: plan, generate and build a pipeline, then stream inputs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from generator.boards import load_board
from generator.errors import InputError, ProjectError
from generator.input_files import load_input_file, parse_input_spec
from generator.pipeline import layout
from generator.pipeline.plan import (
    LINK_COST,
    LinkCost,
    PipelinePlan,
    ProcessingElement,
    processing_element,
)
from generator.pipeline.planning import Request, Splits, make_plan
from generator.pipeline.stream import StreamReport, Tracker, run_stream, stages_of
from generator.progress import progress
from generator.rpc.tracker import parse_tracker_address
from generator.run import find_input

EXIT_OK, EXIT_INTERRUPTED = 0, 130


def _pe(text: str, args: argparse.Namespace) -> ProcessingElement:
    """BOARD or BOARD+ACCELERATOR[+...]: a PE of that board whose stage offloads to those."""
    board, *accelerators = [part.strip() for part in text.split("+")]
    if not board or not all(accelerators):
        raise InputError(f"--pes '{args.pes}': '{text}' is not BOARD or BOARD+ACCELERATOR")
    return processing_element(load_board(board), args.pe_ram, args.pe_flash,
                              tuple(accelerators))


def _pes(args: argparse.Namespace) -> tuple[list[ProcessingElement], int | None]:
    """--pes N (with --board) or --pes B1,B2,...: the PEs and the count (None for a list)."""
    if args.pes is None:
        raise InputError("--pes is needed: how many PEs (with --board), or their boards")
    text = args.pes.strip()
    if text.isdigit():
        if not args.board:
            raise InputError("--pes N needs --board (or name one board per stage: "
                             "--pes B1,B2,...)")
        return [_pe(args.board, args)], int(text)
    if args.board:
        raise InputError("--pes names the boards; leave out --board")
    if args.depth is not None:
        raise InputError("--depth applies to --pes N")
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise InputError(f"--pes '{args.pes}': a count, or board names separated by commas")
    return [_pe(n, args) for n in names], None


def _plan(args: argparse.Namespace) -> tuple[Splits, PipelinePlan]:
    pes, count = _pes(args)
    if args.tracker and any(pe.accelerators for pe in pes):
        raise InputError("--tracker: stages run host-driven there, as operator archives, "
                         "which carry no offloading; leave out +ACCELERATOR")
    return make_plan(Request(args.model, pes, count, args.depth, args.profile,
                             _link_cost(args.link_cost), args.split_layers,
                             tuple(args.accelerator_path)))


def _link_cost(text: str | None) -> LinkCost:
    """--link-cost RX,TX[,PER_INPUT] (instructions), else the measured default."""
    if text is None:
        return LINK_COST
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) not in (2, 3) or min(values) < 0:
        raise InputError(f"--link-cost '{text}': RX,TX[,PER_INPUT], instructions per byte "
                         "received and sent (and per input)")
    return LinkCost(values[0], values[1], values[2] if len(values) == 3 else 0.0)


def print_plan(plan: dict) -> None:
    unit = plan["unit"]
    print(f"{plan['model']}: {plan['depth']} stage(s) x {plan['replicas']} replica(s) on "
          f"{plan['pes_used']} of {plan['pes']} PEs; costs in {unit}")
    print(f"  {'stage':>5}  {'calls':>7}  {'board':<18} {'cost':>12} {'link B':>7} "
          f"{'time':>12} {'RAM':>8} {'of':>9} {'weights':>8}")
    for s in plan["stages"]:
        first, end = s["calls"]
        board = "+".join((s["board"], *s.get("accelerators", [])))
        print(f"  {s['index']:>5}  {first:>3}-{end - 1:<3}  {board:<18} {s['cost']:>12,} "
              f"{s['link_bytes']:>7,} {s['time']:>12,} {s['ram_bytes']:>8,} "
              f"{s['pe_stage_ram']:>9,} {s['weight_bytes']:>8,}")
    link = plan["link"]
    print(f"  predicted: one inference every {plan['period']:,} per replica, latency "
          f"{plan['latency']:,}; throughput {plan['speedup']:.2f}x one PE's "
          f"({plan['single_pe_time']:,} each; link {link['rx_per_byte']:g} per byte in, "
          f"{link['tx_per_byte']:g} out, {link['per_input']:g} per input)")


def _arrays(args: argparse.Namespace, stages: list) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {}
    for spec in args.input:
        name, path = parse_input_spec(spec)
        tensor = find_input(stages[0].inputs, name, f"--input {name}")
        if tensor.name in arrays:
            raise InputError(f"--input {name}: input '{tensor.name}' is given twice")
        array = load_input_file(path, tensor.dtype)
        per_sample = max(1, tensor.size_bytes // array.dtype.itemsize)
        if array.size % per_sample:
            raise InputError(f"{path}: {array.size} values are not a whole number of samples "
                             f"of input '{tensor.name}' ({list(tensor.shape)})")
        arrays[tensor.name] = array.reshape(-1, *tensor.shape)
    return arrays


def print_stream(report: StreamReport) -> None:
    for pe in report.pes:
        per = f"{pe.per_input:,.0f} instructions per input" if pe.per_input is not None \
            else "instructions not counted"
        print(f"  PE {pe.pe} stage {pe.stage} ({pe.board}): {pe.inputs} inputs, {per} "
              f"(run {pe.run_count // max(1, pe.inputs):,} {pe.unit}, link "
              f"{(pe.received_bytes + pe.sent_bytes) // max(1, pe.inputs):,} B)")
        for accel, counts in pe.counters.items():
            print(f"    accelerator {accel}: "
                  + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
    if report.period is not None:
        print(f"  measured: one inference every {report.period:,.0f} instructions per "
              f"replica, latency {report.latency:,.0f}")
    if report.skipped:
        print(f"  skipped {len(report.skipped)} inputs done by an earlier run")


def _write_outputs(report: StreamReport, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for i, spec in enumerate(report.output_specs):
        path = out_dir / f"{spec.c_name}.npy"
        np.save(path, np.stack([outs[i] for outs in report.outputs]))
        written.append(path)
    return written


def run(args: argparse.Namespace, emit_json: Callable[[dict], None]) -> int:
    root = args.output
    reuse = args.resume and root is not None and (root / layout.PLAN_FILE).is_file()
    if args.resume and not args.input:
        raise InputError("--resume continues a stream: give its --input files")
    if reuse:
        plan = layout.load_plan(root)
        if plan.get("model") != args.model.name:
            raise ProjectError(f"{root} is a pipeline of {plan.get('model')}, not of "
                               f"{args.model.name}")
    else:
        splits, planned = _plan(args)
        plan = planned.to_json()
        if args.plan_only:
            if args.json:
                emit_json({"plan": plan})
            else:
                print_plan(plan)
            return EXIT_OK
        layout.create(splits, planned, root, args.force, progress,
                      host_driven=args.tracker is not None)
    if not args.input:
        if args.json:
            emit_json({"plan": plan, "directory": str(root)})
        else:
            print_plan(plan)
            print(f"wrote {root}")
        return EXIT_OK
    tracker = Tracker(parse_tracker_address(args.tracker), args.key, args.model) \
        if args.tracker else None
    staged = stages_of(root, tracker, args.timeout)
    arrays = _arrays(args, staged[1])

    def show(index: int, outputs: list[np.ndarray]) -> None:
        if not args.json:
            shown = ", ".join(np.array2string(o.reshape(-1)[:12], separator=",")
                              for o in outputs)
            print(f"[{index}] {shown}")
            sys.stdout.flush()

    report = run_stream(root, arrays, args.resume, args.timeout, progress, show, tracker,
                        staged)
    written = _write_outputs(report, args.output_dir) if args.output_dir and report.outputs \
        else []
    if args.json:
        emit_json({**report.to_json(), "output_files": [str(p) for p in written]})
    else:
        print_plan(report.plan)
        print_stream(report)
        for path in written:
            print(f"wrote {path}")
    if report.interrupted:
        print(f"microtvm-gen: interrupted; the outputs of {len(report.outputs)} inputs are "
              f"kept in {root / layout.RESULTS_DIR} (rerun with --resume)", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK
