"""The `microtvm-gen` command line.

One small class per subcommand (name, help, arguments, do_run). Errors of the tool's own
types become one line on stderr and exit code 2, in exactly one place: `main`.
Results go to stdout (text, or JSON with --json). Progress lines go to stdout with the text
results, so an error is the only line on stderr; with --json (stdout is the JSON) they go to
stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from generator import __version__, hints
from generator.errors import InputError, MtgError
from generator.input_files import load_input_file, parse_input_spec
from generator.outpaths import DIRECTORY, FILE, check_output
from generator.progress import progress, use_stream

if TYPE_CHECKING:  # numpy is loaded by the commands that read or print tensors
    import numpy as np

    from generator.run import TensorSpec

EXIT_OK = 0
EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130
# What generate writes: a firmware project (through the template's Project API server) or
# the model as a library (generator/project/library.py).
OUTPUT_FORMATS = ("project", "library", "zephyr-module")


def _fmt_bytes(n: int) -> str:
    return f"{n} B" if n < 10240 else f"{n / 1024:.1f} KiB"


class Command:
    name = ""
    help = ""
    reports = True  # adds --json
    # After an error, TVM objects a failed import left behind log C++ warnings as the process
    # exits; the one-line error has said it all.
    silence_native_exit = False

    def add_parser(self, subparsers) -> None:
        parser = subparsers.add_parser(self.name, help=self.help, description=self.help)
        if self.reports:
            parser.add_argument("--json", action="store_true",
                                help="print the result as JSON on stdout")
        self.do_add_parser(parser)
        parser.set_defaults(command=self)

    def do_add_parser(self, parser: argparse.ArgumentParser) -> None:
        raise NotImplementedError

    def do_run(self, args: argparse.Namespace) -> int:
        raise NotImplementedError

    @staticmethod
    def emit_json(data: dict) -> None:
        print(json.dumps(data, indent=2, sort_keys=True))


class Info(Command):
    name = "info"
    help = ("summarise an MLF archive (.tar or extracted directory), or a model file "
            "(.tflite, .onnx) before export")

    def do_add_parser(self, parser):
        parser.add_argument("archive", type=Path, metavar="FILE",
                            help="the MLF archive, or a .tflite/.onnx model")
        parser.add_argument("--memory", action="store_true",
                            help="an archive's memory on a board (with --board), before "
                                 "generate: weights, activations, I/O, stack, the layers; "
                                 "the code is known after the link ('report')")
        parser.add_argument("--board", help="the board for --memory (see 'boards')")

    def do_run(self, args):
        from generator.export.model_info import is_model_file
        from generator.mlf import read_mlf

        if args.memory or args.board:
            return self.memory_report(args)
        if is_model_file(args.archive):
            return self.model_report(args)

        archive = read_mlf(args.archive)
        if args.json:
            self.emit_json(archive.to_json())
            return EXIT_OK
        print(f"archive   {archive.origin}")
        writers = {m.written_by for m in archive.modules}
        made = (f"exported {archive.export_datetime}" if archive.export_datetime else
                f"written by {writers.pop()}" if len(writers) == 1 and None not in writers
                else "exported unknown")
        print(f"format    MLF version {archive.version}, {archive.style}, {made}")
        for m in archive.modules:
            print(f"module    {m.name}: {m.executor} executor, {m.interface} interface "
                  f"(entry: {m.entry})" + (f", TVM {m.tvm_version}" if m.tvm_version else ""))
            print(f"  target  {'; '.join(m.targets)}")
            for kind, tensors in (("input ", m.inputs), ("output", m.outputs)):
                for t in tensors:
                    shape = "x".join(str(d) for d in t.effective_shape())
                    note = "" if t.shape is not None else " (shape unknown: flat)"
                    print(f"  {kind}  {t.name}: {t.dtype}[{shape}], {t.size_bytes} B{note}")
            largest_op = (f" (largest operator {_fmt_bytes(m.operator_workspace_bytes)})"
                          if m.executor == "graph" and m.operator_workspace_bytes is not None
                          else "")
            print(f"  memory  workspace {_fmt_bytes(m.workspace_size_bytes)}{largest_op}, "
                  f"constants {_fmt_bytes(m.constants_size_bytes)}, "
                  f"{m.workspace_call_sites} TVMBackendAllocWorkspace call sites")
            if m.plan is not None:
                preset = (f", --memory {m.plan.memory_preset}" if m.plan.memory_preset else "")
                over = (f", {m.plan.over_input_calls} calls write over their input"
                        if m.plan.over_input_calls else "")
                if m.plan.inputs_reused:
                    over += (f", {m.plan.in_input_bytes} B more in the input buffers once "
                             "read: set them before every run")
                print(f"  plan    activations {m.plan.pool_bytes} B in one pool "
                      f"({m.plan.tensors} tensors{preset}{over}); lifetime lower bound "
                      f"{m.plan.lower_bound_bytes} B ({m.plan.ratio:.2f}x)")
            for note in m.notes:
                print(f"  note    {note}")
            for p in m.pools:
                where = "declared by the model" if p.internal else "provided by the app"
                print(f"  pool    {p.name}: {_fmt_bytes(p.size_bytes)} ({p.kind}, {where})")
            for op in m.operators:
                args = ", ".join(f"{t.dtype}{list(t.effective_shape())}" for t in op.args)
                print(f"  op      {op.name}({args})")
            for s in m.sources:
                print(f"  source  {s.path}")
            for o in m.objects:
                print(f"  object  {o.path} ({o.arch})")
            if m.params:
                total = sum(p.size_bytes for p in m.params)
                print(f"  params  {len(m.params)} tensors, {_fmt_bytes(total)} in {m.params_file}")
            if m.graph is not None:
                g = m.graph
                print(f"  graph   {m.graph_json}: {g.nodes} nodes, {g.operators} operator calls, "
                      f"{g.storage_ids} storage ids")
                print(f"  storage {g.storage_bytes} B of RAM needed by the graph; "
                      f"params {_fmt_bytes(g.params_in_place_bytes)} used in place from flash"
                      + (f", {_fmt_bytes(g.params_copied_bytes)} copied to RAM"
                         if g.params_copied_bytes else ""))
                if g.sids_disagree:
                    print(f"  note    metadata 'sids' gives other sizes for storage ids "
                          f"{', '.join(map(str, g.sids_disagree))} (a TVM quirk); the graph's "
                          "own shapes are used")
                for problem in g.problems:
                    print(f"  cannot  {problem}")
        return EXIT_OK

    def memory_report(self, args) -> int:
        from generator.export.model_info import is_model_file
        from generator.report.report import archive_report
        from generator.report.text import report_lines

        if not args.memory or not args.board:
            raise InputError("--memory and --board go together (info --memory ARCHIVE "
                             "--board BOARD)")
        if is_model_file(args.archive):
            raise InputError(f"info --memory: {args.archive} is a model file; export it first "
                             "(microtvm-gen export MODEL -o ARCHIVE)")
        report = archive_report(args.archive, args.board)
        if args.json:
            self.emit_json(report.to_json())
        else:
            for line in report_lines(report):
                print(line)
        return EXIT_OK

    def model_report(self, args) -> int:
        """What export would make of a model file (unsupported operators are not an error)."""
        from generator.export.model_info import model_info, report_lines

        info = model_info(args.archive)
        if args.json:
            self.emit_json(info.to_json())
            return EXIT_OK
        for line in report_lines(info):
            print(line)
        return EXIT_OK


class Export(Command):
    name = "export"
    help = "export an ONNX or TFLite model to an MLF archive with TVM 0.27"
    silence_native_exit = True

    def do_add_parser(self, parser):
        parser.add_argument("model", type=Path, help="the model (.onnx or .tflite)")
        parser.add_argument("-o", "--output", type=Path, required=True,
                            help="archive to write (.tar)")
        parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=D1,D2",
                            help="static shape of an input (repeatable), e.g. Input3=1,1,28,28")
        parser.add_argument("--module", default="default",
                            help="module name: symbols are tvmgen_<module>_* (default: default)")
        parser.add_argument("--style", choices=("full-model", "operator"), default="full-model",
                            help="full-model: AOT run function; operator: every kernel "
                                 "callable by name (host-driven timing)")
        parser.add_argument("--force", action="store_true", help="replace an existing archive")
        parser.add_argument("--target", metavar="A,B,c",
                            help="accelerators to offload to, in order, then 'c' (the CPU), "
                                 "e.g. vanilla,c; options as --target-NAME-OPTION=VALUE")
        parser.add_argument("--accelerator", action="append", default=[], metavar="NAME",
                            help="short form: offload to this accelerator (repeatable)")
        parser.add_argument("--board", metavar="BOARD",
                            help="the board the archive is for: without --target, picks the "
                                 "accelerators that are the default on its core (cmsis-nn on "
                                 "DSP/MVE cores when CMSIS_NN_PATH is set)")
        parser.add_argument("--tuning-records", type=Path, metavar="DIR",
                            help="schedule kernels as 'microtvm-gen tune' found fastest (its "
                                 "output directory or records.jsonl); the archive records "
                                 "which candidates")
        parser.add_argument("--memory", choices=("fast", "small"), default="fast",
                            help="fast: every kernel writes its own output (the lifetime "
                                 "bound); small: kernels that can write over their input do "
                                 "(docs/memory.md)")
        parser.add_argument("--ram-budget", type=int, metavar="BYTES",
                            help="the most RAM the model may take (activations, kernel "
                                 "scratch, I/O buffers): the first preset from --memory on "
                                 "that fits, or one line with the smallest figure")
        parser.add_argument("--reuse-input", action="store_true",
                            help="let the model write activations over its input buffers "
                                 "once it has read them (the caller sets the inputs before "
                                 "every run; buffers aligned to 16 bytes)")
        add_accelerator_path(parser)

    def do_run(self, args):
        from generator.accel import registry
        from generator.errors import ExportError
        from generator.export import frontend
        from generator.export.tuning import TuningRecords

        defaults_notes: list[str] = []
        if args.board and args.target is None and not args.accelerator:
            from generator.boards import load_board

            selected, defaults_notes = registry.board_defaults(
                load_board(args.board), args.target_options, args.accelerator_path)
        else:
            selected = registry.select(args.target, args.accelerator, args.target_options,
                                       args.accelerator_path)
        if selected and args.style == "operator":
            raise ExportError("accelerators apply to full-model exports; operator-style "
                              "archives hold CPU kernels for timing")
        if args.tuning_records and args.style == "operator":
            raise ExportError("--tuning-records applies to full-model exports")
        if (args.memory != "fast" or args.ram_budget is not None or args.reuse_input) \
                and args.style == "operator":
            raise ExportError("--memory, --ram-budget and --reuse-input apply to full-model "
                              "exports")
        if args.ram_budget is not None and args.ram_budget <= 0:
            raise ExportError(f"--ram-budget {args.ram_budget}: give a number of bytes above 0")
        tuning = TuningRecords.load(args.tuning_records) if args.tuning_records else None

        check_output(args.output, "-o", FILE, inputs=[args.model])
        if args.output.exists() and not args.force:
            raise ExportError(f"{args.output} exists; pass --force to replace it")
        shapes = frontend.parse_shape_overrides(args.input_shape)
        progress(f"importing {args.model.name} and compiling with TVM")
        if args.style == "operator":
            from generator.export.operators import export_model_operators

            result = export_model_operators(args.model, args.output, shapes, module=args.module)
            if args.json:
                self.emit_json({"archive": str(result.path), "module": result.module,
                                "mlf_version": 8, "style": "operator",
                                "operators": [op.name for op in result.operators],
                                "seconds": round(result.seconds, 3), "notes": result.notes})
                return EXIT_OK
            print(f"exported {result.path}: module '{result.module}', operator style, "
                  f"{len(result.operators)} operators callable by name, "
                  f"{result.seconds:.1f} s")
            for note in result.notes:
                print(f"  note    {note}")
            return EXIT_OK
        from generator.export import export_model

        r = export_model(args.model, args.output, shapes, module=args.module,
                         accelerators=selected, tuning=tuning, memory=args.memory,
                         ram_budget=args.ram_budget, reuse_input=args.reuse_input)
        r.notes.extend(defaults_notes)
        arena = None
        if args.memory != "fast" or args.ram_budget is not None:  # RAM matters: compare
            from generator.export.tflm_arena import tflm_arena

            arena = tflm_arena(args.model)
        r.notes.extend(f"accelerator '{s.name}' is the default on {args.board}"
                       for s in selected if s.origin == "default")
        offloaded = {name: dict(counts) for name, counts in r.offload.by_accelerator().items()}
        if args.json:
            self.emit_json({
                "archive": str(r.path), "module": r.module, "mlf_version": 8,
                "kernels": r.kernels, "calls": r.calls,
                "pool_bytes": r.plan.pool_bytes, "lower_bound_bytes": r.lifetime_bound,
                "memory": r.memory, "over_input_calls": r.over_inputs,
                "reuse_input": r.reuse_input, "in_input_bytes": r.in_input_bytes,
                "kernel_scratch_bytes": r.scratch_bytes,
                "tflm_arena_bytes": arena.total if arena else None,
                "constants_bytes": r.constants_bytes, "seconds": round(r.seconds, 3),
                "inputs": [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype}
                           for t in r.inputs],
                "outputs": [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype}
                            for t in r.outputs],
                "integer_ops": r.quant.integer,
                "float_fallback": [{"operator": op, "reason": why}
                                   for op, why in r.quant.fallback],
                "accelerators": [{"name": s.name, "options": s.options,
                                  "operators": offloaded.get(s.name, {})} for s in selected],
                "cpu_kernel_calls": len(r.cpu_calls),
                "cpu_kernels": r.cpu_calls,
                "refused": [{"accelerator": a, "pattern": p, "reason": why}
                            for a, p, why in r.offload.refused],
                "tuned": [k.to_json() for k in r.tuned],
                "notes": r.notes})
            return EXIT_OK
        print(f"exported {r.path}: module '{r.module}', {r.calls} kernel calls "
              f"({r.kernels} kernels), {r.seconds:.1f} s")
        for kind, tensors in (("input ", r.inputs), ("output", r.outputs)):
            for t in tensors:
                print(f"  {kind}  {t.name}: {t.dtype}{list(t.shape)}")
        ratio = r.plan.pool_bytes / r.lifetime_bound if r.lifetime_bound else 1.0
        over = (f", {r.over_inputs} calls write over their input" if r.over_inputs else "")
        if r.reuse_input:
            over += f", up to {r.in_input_bytes} B in the input buffers once read"
        print(f"  plan    activations {r.plan.pool_bytes} B ({r.memory}{over}) + kernel "
              f"scratch {r.scratch_bytes} B; lifetime lower bound {r.lifetime_bound} B "
              f"({ratio:.2f}x); weights {_fmt_bytes(r.constants_bytes)} in flash")
        if arena is not None:
            print(f"  tflm    TensorFlow Lite Micro's arena {arena.total} B, of which "
                  f"{arena.head} B of activations (its x86-64 build)")
        if r.quant.integer or r.quant.fallback:
            print(f"  int8    {r.quant.summary()}")
            for op, why in r.quant.fallback:
                print(f"  float   {op}: {why}")
        for s in selected:
            taken = offloaded.get(s.name, {})
            listed = ", ".join(f"{k} ×{v}" if v > 1 else k for k, v in taken.items())
            print(f"  accel   {s.name}: {listed or 'nothing matched'}")
        if selected:
            listed = ", ".join(f"{k} ×{v}" if v > 1 else k
                               for k, v in Counter(r.cpu_calls).items())
            print(f"  cpu     {len(r.cpu_calls)} of {r.calls} kernel calls"
                  + (f": {listed}" if listed else ""))
        for accel, pattern, why in r.offload.refused:
            print(f"  refused {accel} {pattern}: {why}")
        if tuning is not None:
            print(f"  tuned   {len(r.tuned)} of {r.kernels} kernels from {tuning.source}")
            for k in r.tuned:
                print(f"  tuned   {k.kernel}: candidate {k.candidate} "
                      f"({k.measured_secs * 1e6:.3f} us measured)")
        for note in r.notes:
            print(f"  note    {note}")
        return EXIT_OK


class Boards(Command):
    name = "boards"
    help = "list the boards this tool can generate projects for"

    def do_add_parser(self, parser):
        parser.add_argument("--connected", action="store_true",
                            help="list the physical boards plugged in (serial ports whose USB "
                                 "ids match a board file)")

    def do_run(self, args):
        from generator.boards import list_boards, load_board

        boards = [load_board(n) for n in list_boards()]
        if args.connected:
            return print_connected(boards, args.json)
        if args.json:
            self.emit_json({"boards": [{"name": b.name, "description": b.description,
                                        "arch": b.arch, "link": b.link, "runner": b.link}
                                       for b in boards]})
        else:
            for b in boards:
                print(f"{b.name:20s} {b.description}")
        return EXIT_OK


def print_connected(boards, as_json: bool) -> int:
    from generator.device.serial_ports import connected_ports

    ports = connected_ports(boards)
    if as_json:
        Command.emit_json({"connected": [p.to_json() for p in ports]})
        return EXIT_OK
    if not ports:
        print("no known board is connected", file=sys.stderr)
    for p in ports:
        print(f"{p.device:16s} {'|'.join(p.boards):28s} {p.usb_id}  "
              f"serial {p.serial_number or '?'}  {p.description}")
    return EXIT_OK


class Generate(Command):
    name = "generate"
    help = "generate a firmware project for a board from an MLF archive"

    def do_add_parser(self, parser):
        parser.add_argument("archive", type=Path, help="the MLF archive")
        parser.add_argument("--format", choices=OUTPUT_FORMATS, default="project",
                            help="project: a whole firmware project for the board; library: "
                                 "the model as a static library with one header, for your own "
                                 "firmware (CMake, Makefile or IDE; --board optional); "
                                 "zephyr-module: the library as a Zephyr module")
        parser.add_argument("--board", help="board name (see 'boards'); for a library, the "
                                            "board it is checked against")
        parser.add_argument("-o", "--output", type=Path, required=True,
                            help="project (or library) directory to create")
        parser.add_argument("--force", action="store_true",
                            help="replace the contents of an existing non-empty directory")
        parser.add_argument("--module", help="module to use when the archive holds several")
        parser.add_argument("--project-type", choices=["standalone", "host-driven"],
                            help="standalone: the firmware runs the model; host-driven: an "
                                 "RPC server for 'serve' (default: host-driven for "
                                 "operator-style archives, standalone otherwise)")
        parser.add_argument("--cmsis-nn", type=Path, metavar="PATH",
                            help="CMSIS-NN source tree, for archives with cmsis-nn BYOC "
                                 "partitions (default: $CMSIS_NN_PATH)")
        parser.add_argument("--share-workspace", action="store_true",
                            help="library: <name>_run works in one workspace every library "
                                 "generated so shares (models that run one after the other)")
        parser.add_argument("--place", metavar="ITEM=REGION,...",
                            help="put the model's activations, scratch, weights or code in the "
                                 "board's memory regions (e.g. activations=DTCM,weights=DDR), "
                                 "or 'auto': hot and small first into the fastest that fits")
        parser.add_argument("--profile", action="store_true",
                            help="the firmware records the timer at each call of the model's "
                                 "run function (for run --profile; off, the marks compile to "
                                 "nothing)")
        parser.add_argument("--template", type=Path, metavar="DIR",
                            help="template directory with a Project API server "
                                 "(default: the built-in CRT template)")
        add_accelerator_path(parser)
        parser.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                            help="a project option of the template (repeatable; 'true'/'false' "
                                 "for booleans)")

    def do_run(self, args):
        from generator.project_api.drive import generate_project

        if not args.archive.exists():
            raise InputError(f"{args.archive}: no such file or directory")
        check_output(args.output, "-o", DIRECTORY,
                     inputs=[args.archive, *([args.template] if args.template else [])])
        with_accelerator_path(args.accelerator_path)
        if args.format != "project":
            return self.library(args)
        if args.board is None:
            raise InputError("generate: --board is required for a project (see 'boards')")
        if args.share_workspace:
            raise InputError("generate: --share-workspace is for --format library and "
                             "zephyr-module")
        options = {"board": args.board, "project_type": args.project_type,
                   "module": args.module, "force": args.force or None,
                   "cmsis_path": str(args.cmsis_nn.resolve()) if args.cmsis_nn else None,
                   "place": args.place, "profile": args.profile or None,
                   **parse_options(args.option)}
        project = generate_project(args.archive, args.output, options, args.template)
        files = sorted(p.relative_to(args.output).as_posix()
                       for p in args.output.rglob("*") if p.is_file())
        module = project["module"]
        if args.json:
            self.emit_json({"project": str(args.output), "board": project["board"],
                            "module": module["name"], "entry": module["entry"],
                            "project_type": project["project_type"],
                            "arena_bytes": module["arena_bytes"], "files": files})
        else:
            print(f"generated {args.output} for {project['board']} "
                  f"({len(files)} files, module '{module['name']}', "
                  f"{project['project_type']}, entry {module['entry']})")
        return EXIT_OK

    def library(self, args) -> int:
        from generator.project.library import generate_library

        refused = [flag for flag, given in (("--project-type", args.project_type),
                                            ("--place", args.place),
                                            ("--profile", args.profile),
                                            ("--template", args.template),
                                            ("--option", args.option)) if given]
        if refused:
            raise InputError(f"generate --format {args.format}: {refused[0]} is for projects")
        lib = generate_library(args.archive, args.output, args.board, args.force, args.module,
                               args.format, args.share_workspace)
        if args.json:
            self.emit_json({"library": str(args.output), "name": lib.name,
                            "format": args.format, "entry": lib.module.entry,
                            "static_bytes": lib.static_bytes,
                            "workspace_bytes": lib.workspace_bytes,
                            "runtime_sources": lib.runtime_sources, "files": lib.files})
        else:
            what = "Zephyr module" if args.format == "zephyr-module" else "library"
            print(f"generated {what} {args.output}: {lib.name}.h, {lib.name}_run(); "
                  f"{len(lib.files)} files, workspace {lib.workspace_bytes:,} B"
                  + (f", {lib.static_bytes:,} B static in the model's code"
                     if lib.static_bytes else "")
                  + (f", runtime {len(lib.runtime_sources)} file(s) shared per firmware"
                     if lib.runtime_sources else ", no runtime"))
        return EXIT_OK


def add_accelerator_path(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--accelerator-path", action="append", default=[], type=Path,
                        metavar="DIR", help="a directory of accelerator plugins (repeatable; "
                        "also MICROTVM_GEN_ACCELERATOR_PATH)")


def with_accelerator_path(paths: list[Path]) -> None:
    """Make --accelerator-path directories visible to this process and the Project API
    servers it starts (they inherit the environment)."""
    from generator.accel.registry import PATH_ENV

    if paths:
        old = os.environ.get(PATH_ENV, "")
        os.environ[PATH_ENV] = os.pathsep.join([*(str(p.resolve()) for p in paths),
                                                *([old] if old else [])])


class Accelerators(Command):
    name = "accelerators"
    help = "list the accelerator plugins found, where from, and their options"

    def do_add_parser(self, parser):
        add_accelerator_path(parser)

    def do_run(self, args):
        from generator.accel import registry

        found = registry.discover(args.accelerator_path)
        if args.json:
            self.emit_json({"accelerators": [{
                "name": f.name, "origin": f.origin, "error": f.error,
                "shadowed_by": f.shadowed_by,
                "description": f.plugin.description if f.plugin else None,
                "options": [{"name": o.name, "type": o.type, "default": o.default,
                             "help": o.help, "choices": list(o.choices), "env": o.env}
                            for o in (f.plugin.options if f.plugin else ())],
                "boards": list(f.plugin.boards) if f.plugin and f.plugin.boards else None,
            } for f in found]})
            return EXIT_USER_ERROR if any(f.error for f in found) else EXIT_OK
        for f in found:
            if f.error:
                print(f"{f.name:12} error: {f.error} ({f.origin})")
                continue
            shadow = f" (shadowed by {f.shadowed_by})" if f.shadowed_by else ""
            print(f"{f.name:12} {f.plugin.description} [{f.origin}]{shadow}")
            for o in f.plugin.options:
                flag = f"--target-{f.name}-{o.name.replace('_', '-')}"
                print(f"{'':12}   {flag}={o.type.upper()}  {o.help} (default {o.default})")
        return EXIT_USER_ERROR if any(f.error for f in found) else EXIT_OK


def parse_options(items: list[str]) -> dict:
    """--option NAME=VALUE items: 'true'/'false' become booleans, digits integers."""
    out: dict = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise InputError(f"--option '{item}': expected NAME=VALUE")
        lowered = value.lower()
        out[name] = (lowered == "true" if lowered in ("true", "false")
                     else int(value) if value.isdigit() else value)
    return out


class Build(Command):
    name = "build"
    help = "build a generated project (CMake + Ninja, the board's toolchain)"

    def do_add_parser(self, parser):
        parser.add_argument("project", type=Path, help="project directory")
        parser.add_argument("--sanitize", action="store_true",
                            help="host board: build with AddressSanitizer and UBSan "
                                 "('run' keeps the setting of the last build)")

    def do_run(self, args):
        from generator.project_api.drive import build_project

        result = build_project(args.project, sanitize=args.sanitize)
        if args.json:
            self.emit_json(result.to_json())
        else:
            s = result.size
            print(f"built {result.elf}" + (" (ASan + UBSan)" if result.sanitize else ""))
            print(f"flash {_fmt_bytes(s.flash)} (code+rodata {_fmt_bytes(s.text)}, "
                  f"data {_fmt_bytes(s.data)}); RAM {_fmt_bytes(s.ram)} static "
                  f"(data {_fmt_bytes(s.data)}, bss {_fmt_bytes(s.bss)})")
            if result.executor == "graph":
                print(f"graph storage {result.storage_bytes_reserved} B reserved, "
                      f"the graph needs {result.storage_bytes_needed} B")
                print(f"workspace arena {_fmt_bytes(result.arena_bytes)} reserved (largest "
                      "operator workspace + alignment)")
            elif result.model_pool_bytes and not result.arena_bytes:
                print(f"activations {_fmt_bytes(result.model_pool_bytes)} in the model code's "
                      "own static pool (in the RAM above); no runtime workspace arena")
            else:
                print(f"workspace arena {_fmt_bytes(result.arena_bytes)} reserved for "
                      f"{_fmt_bytes(result.workspace_size_bytes)} the archive says it needs")
        return EXIT_OK


def samples_of(array: np.ndarray, tensor: TensorSpec, path: Path, batch: bool) -> np.ndarray:
    """An input file's array as the run takes it: with --batch, one sample per row (a raw
    file's bytes cut into samples of the input's size); without, refused with the hint to
    use --batch when it holds several samples' worth."""
    per_sample = max(1, tensor.size_bytes // array.dtype.itemsize)
    count, rest = divmod(array.size, per_sample)
    raw = path.suffix != ".npy"
    if batch and raw:
        if rest:
            raise InputError(f"{path}: {array.size * array.dtype.itemsize} bytes are not a "
                             f"whole number of samples of {tensor.size_bytes} bytes "
                             f"(input '{tensor.name}')")
        return array.reshape(-1, *tensor.shape)
    stacked = raw or (array.ndim > 0 and array.shape[0] == count)
    if not batch and not rest and count > 1 and stacked:
        raise InputError(f"{path}: input '{tensor.name}' needs shape {list(tensor.shape)}, "
                         f"and the file holds {count} of them",
                         hint=hints.batch())
    return array


class Run(Command):
    name = "run"
    help = "run a project on its board: send inputs, print and save outputs (builds if needed)"

    def do_add_parser(self, parser):
        parser.add_argument("project", type=Path, help="project directory")
        parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE",
                            help="an input tensor: .npy, or raw little-endian bytes of the "
                                 "input's dtype (repeat for each input)")
        parser.add_argument("--batch", action="store_true",
                            help="each .npy holds several samples along its first axis; "
                                 "run them all in one session")
        parser.add_argument("--output-dir", type=Path,
                            help="write each output as <its C name>.npy into this directory (the C "
                                 "name is `info`'s, unique and safe as a file name)")
        parser.add_argument("--sanitize", action=argparse.BooleanOptionalAction, default=None,
                            help="host board: (re)build with AddressSanitizer and UBSan, or "
                                 "without (default: as the last build)")
        parser.add_argument("--profile", action="store_true",
                            help="also time each call of the model (a project generated with "
                                 "--profile): per layer and per kernel, kept for 'report'")

    def do_run(self, args):
        import numpy  # for printing the outputs

        from generator.project.record import load_project
        from generator.run import TensorSpec, find_input, run_project

        project = load_project(args.project)
        if args.output_dir is not None:
            check_output(args.output_dir, "--output-dir", DIRECTORY)
        inputs = [TensorSpec.from_json(t) for t in project["module"]["inputs"]]
        arrays = {}
        for spec in args.input:
            name, path = parse_input_spec(spec)
            # By the model's own name (as `info` shows it) or by its C name.
            tensor = find_input(inputs, name, f"--input {name}")
            if tensor.name in arrays:
                raise InputError(f"--input {name}: input '{tensor.name}' is given twice")
            arrays[tensor.name] = samples_of(load_input_file(path, tensor.dtype), tensor, path,
                                             args.batch)
        if args.batch:
            counts = {len(a) for a in arrays.values()}
            if len(counts) != 1:
                raise InputError("--batch: every input file must hold the same number of samples")
            samples = [{k: v[i] for k, v in arrays.items()} for i in range(counts.pop())]
        else:
            samples = [arrays]
        several = len(samples) > 1

        def show(i, outs, res, time, counters) -> None:
            """A sample's lines, printed as it finishes (Ctrl-C keeps what was shown)."""
            prefix = f"[{i}] " if several else ""
            for name, value in outs.items():
                flat = value.reshape(-1)
                shown = numpy.array2string(flat[:16], separator=",", max_line_width=10**6)
                more = f" ... ({flat.size} values)" if flat.size > 16 else ""
                print(f"{prefix}{name} {value.dtype}{list(value.shape)} = {shown}{more}")
            if time.seconds is None:  # a virtual clock (QEMU -icount) counts instructions
                measured = (f"{time.count:,} {time.unit} ({time.ticks:,} ticks of the "
                            f"{time.tick_hz:,} Hz timer under QEMU -icount)")
            else:
                measured = (f"{time.seconds * 1e3:.3f} ms ({time.count:,} {time.unit} at "
                            f"{time.tick_hz:,} Hz)")
            print(f"{prefix}run time {measured}, workspace peak "
                  f"{_fmt_bytes(res.workspace_peak)}")
            for accel, counts in counters.items():
                listed = ", ".join(f"{k} {v:,}" for k, v in counts.items())
                print(f"{prefix}accelerator {accel}: {listed}")
            sys.stdout.flush()

        report = run_project(args.project, samples, args.output_dir, progress=progress,
                             sanitize=args.sanitize, on_sample=None if args.json else show,
                             batch=args.batch, profile=args.profile)
        profiled = self.keep_profile(args.project, project, report) if report.profiles else []
        if args.json:
            self.emit_json({**report.to_json(),
                            **({"profile": [t.to_json() for t in profiled]} if profiled else {})})
        else:
            self.print_summary(report)
            if profiled:
                from generator.report.profile import profile_lines

                for line in profile_lines(report.timings[-1].unit, profiled):
                    print(line)
        if report.interrupted:
            print(f"microtvm-gen: interrupted after {len(report.outputs)} of "
                  f"{report.requested} samples; their outputs are kept", file=sys.stderr)
            return EXIT_INTERRUPTED
        return EXIT_OK

    @staticmethod
    def keep_profile(project_dir: Path, project: dict, report) -> list:
        """The last sample's time per call, saved for `report`."""
        from generator.report.profile import call_times, save_profile

        times = call_times(project_dir, project["module"]["name"], report.profiles[-1])
        save_profile(project_dir, report.timings[-1].unit, times)
        return times

    @staticmethod
    def print_summary(report) -> None:
        """What follows the samples' lines: memory, graph storage, files written."""
        print(f"flash {_fmt_bytes(report.flash_bytes)}, RAM {_fmt_bytes(report.ram_bytes)} "
              f"static (board {report.board})")
        if report.storage_bytes:
            print(f"graph storage {report.storage_used} B used of {report.storage_bytes} B "
                  "reserved")
        for path in report.output_files:
            print(f"wrote {path}")


class Serve(Command):
    name = "serve"
    help = ("serve a host-driven project to stock tvm.rpc clients: start the device (or "
            "attach to a board's serial port) and bridge it to a TCP RPC endpoint")

    def do_add_parser(self, parser):
        parser.add_argument("project", type=Path, help="host-driven project directory")
        parser.add_argument("--host", default="127.0.0.1",
                            help="address to listen on (default 127.0.0.1: this machine only)")
        parser.add_argument("--port", type=int, default=9090,
                            help="TCP port (default 9090; 0 picks a free one)")
        parser.add_argument("--key", default="micro",
                            help="RPC key announced to the tracker (default 'micro')")
        parser.add_argument("--tracker", metavar="HOST:PORT",
                            help="register with this RPC tracker (again after each session)")
        parser.add_argument("--sessions", type=int, default=0, metavar="N",
                            help="exit after N client sessions (default: serve until stopped)")
        parser.add_argument("--serial", metavar="PORT",
                            help="attach to a running board on this serial port instead of "
                                 "starting the firmware")
        parser.add_argument("--baud", type=int, default=115200, help="serial baud rate")
        parser.add_argument("--timeout", type=float, default=60.0,
                            help="seconds the device may take to answer one request")
        parser.add_argument("--idle-timeout", type=float, default=60.0, metavar="SECONDS",
                            help="end the session of a client that sends nothing for this "
                                 "long, freeing the device for the next (default 60; 0: never)")
        parser.add_argument("--accept-firmware", action="store_true",
                            help="let clients replace the firmware (remote.upload, then "
                                 "remote.load_module restarts the device from it); QEMU "
                                 "and host boards. Any client can then run code of its choice "
                                 "on the device (host board: on this machine)")

    def do_run(self, args):
        from generator.rpc.serve import ServeOptions, Stopped, serve
        from generator.rpc.tracker import parse_tracker_address

        if not 0 <= args.port <= 65535:
            raise InputError(f"--port {args.port}: not a TCP port")
        if args.sessions < 0 or args.timeout <= 0 or args.idle_timeout < 0:
            raise InputError("--sessions and --idle-timeout must be >= 0 and --timeout > 0")
        options = ServeOptions(
            host=args.host, port=args.port, key=args.key,
            tracker=parse_tracker_address(args.tracker) if args.tracker else None,
            sessions=args.sessions, serial_port=args.serial, baud=args.baud,
            reply_timeout=args.timeout, idle_timeout=args.idle_timeout,
            accept_firmware=args.accept_firmware)

        def announce(bridge) -> None:
            if args.json:
                print(json.dumps({"event": "listening", "host": bridge.host,
                                  "port": bridge.port, "key": options.key}), flush=True)
            else:
                print(f"serving {args.project} on {bridge.host}:{bridge.port} "
                      f"(key '{options.key}')", flush=True)

        try:
            served = serve(args.project, options, announce, progress=progress)
        except OSError as exc:
            raise InputError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from exc
        except Stopped as exc:
            return 128 + exc.signum  # the device is stopped already
        if args.json:
            print(json.dumps({"event": "done", "sessions": served}), flush=True)
        return EXIT_OK


class Flash(Command):
    name = "flash"
    help = "put a project's firmware on its physical board (builds if needed)"

    def do_add_parser(self, parser):
        parser.add_argument("project", type=Path, help="project directory")
        parser.add_argument("--runner", help="flash tool: openocd, pyocd, picotool or uf2; on a "
                                             "Zephyr board one of its west runners (default: "
                                             "the board's)")
        parser.add_argument("--serial-number", metavar="SN",
                            help="the board to flash when several are connected (its debug "
                                 "probe's USB serial number, see 'boards --connected')")
        parser.add_argument("--mount", type=Path,
                            help="uf2 runner: the board's USB drive (default: found by its "
                                 "INFO_UF2.TXT)")
        parser.add_argument("--dry-run", action="store_true",
                            help="print the command that would run, run nothing")

    def do_run(self, args):
        from generator.device.flash import flash_project
        from generator.project_api.drive import flash_project as flash_through_server

        # The plan (runner, argv) is computed here; a real flash goes through the project's
        # Project API server, which runs the same plan.
        result = flash_project(args.project, args.runner, args.serial_number, True, args.mount)
        if not args.dry_run and result.runner is not None:
            flash_through_server(args.project, {"runner": args.runner,
                                                "serial_number": result.serial_number,
                                                "mount": str(args.mount) if args.mount
                                                else None})
            result = replace(result, dry_run=False, flashed=True)
        elif not args.dry_run:  # nothing to flash: the JSON still says what was asked
            result = replace(result, dry_run=False)
        if args.json:
            self.emit_json(result.to_json())
        elif result.runner is None:
            print(result.note)
        elif result.dry_run:
            if result.note:
                # a warning beside a result that may be piped into a shell: on stderr
                print(f"microtvm-gen: {result.note} (the command has no serial number)",
                      file=sys.stderr)
            print(shlex.join(result.argv))
        else:
            where = f" ({result.port})" if result.port else ""
            print(f"flashed {result.board}{where} with {result.runner}: {result.image}")
        return EXIT_OK


class Tune(Command):
    name = "tune"
    help = ("tune a model's kernels on a board: candidate schedules built in batches into one "
            "host-driven firmware, checked against the untuned kernel and timed on the device")

    def do_add_parser(self, parser):
        parser.add_argument("model", type=Path, help="ONNX or TFLite model")
        parser.add_argument("--board", required=True, help="board name (see 'boards')")
        parser.add_argument("--trials", type=int, default=64, metavar="N",
                            help="candidates to measure in all, shared by the tasks by calls "
                                 "per inference (default 64)")
        parser.add_argument("--batch", type=int, default=8, metavar="N",
                            help="candidates per firmware build (default 8)")
        parser.add_argument("-o", "--output", type=Path, required=True,
                            help="directory for log.jsonl and records.jsonl; a rerun "
                                 "continues from them")
        parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=D1,D2",
                            help="static shape of an input (repeatable)")
        parser.add_argument("--seed", type=int, default=0, help="search seed (default 0)")
        parser.add_argument("--search", choices=("model", "random"), default="model",
                            help="how candidates are chosen: 'model' (default: once a task "
                                 "has measurements, an xgboost cost model ranks many drawn "
                                 "candidates and the best are built; random draws without "
                                 "xgboost installed) or 'random'")
        parser.add_argument("--number", type=int, default=10, metavar="N",
                            help="calls per timed repeat (default 10; on QEMU boards, whose "
                                 "time is virtual, 1 is enough)")
        parser.add_argument("--repeat", type=int, default=3, metavar="N",
                            help="timed repeats per candidate (default 3)")
        parser.add_argument("--tracker", metavar="HOST:PORT",
                            help="measure on the servers registered under --key with this "
                                 "stock RPC tracker ('serve --accept-firmware --tracker "
                                 "HOST:PORT --key K' next to each board); each batch's "
                                 "firmware is uploaded to the server that measures it")
        parser.add_argument("--key", default="micro",
                            help="the tracker key of the servers (default 'micro')")
        parser.add_argument("--parallel", type=int, metavar="N",
                            help="batches measured at the same time (default: with --tracker, "
                                 "the servers free under the key at the start; else 1)")

    def do_run(self, args):
        from generator.export import frontend
        from generator.tune import tune_model
        from generator.tune.runner import EvaluatorConfig

        if args.number < 1 or args.repeat < 1:
            raise InputError("--number and --repeat must be at least 1")
        check_output(args.output, "-o", DIRECTORY, inputs=[args.model])
        shapes = frontend.parse_shape_overrides(args.input_shape)
        config = EvaluatorConfig(number=args.number, repeat=args.repeat, seed=args.seed)
        devices, parallel = None, args.parallel or 1
        if args.tracker:
            from generator.rpc.tracker import free_servers, parse_tracker_address
            from generator.tune.session import TrackerDevices

            tracker = parse_tracker_address(args.tracker)
            devices = TrackerDevices(tracker, args.key)
            if args.parallel is None:
                parallel = max(1, free_servers(*tracker, args.key))
            progress(f"measuring on servers under key '{args.key}' at {args.tracker}, "
                     f"{parallel} at a time")
        summary = tune_model(args.model, args.board, args.trials, args.output,
                             batch_size=args.batch, shapes=shapes, progress=progress,
                             seed=args.seed, config=config, devices=devices,
                             parallel=parallel, search=args.search)
        if args.json:
            self.emit_json(summary.to_json())
            return EXIT_OK
        for t in summary.tasks:
            best = "-" if t.best_secs is None else f"{t.best_secs * 1e6:.3f} us"
            ref = "" if t.reference_secs is None else \
                f" (untuned {t.reference_secs * 1e6:.3f} us)"
            print(f"{t.name} x{t.weight}: {t.done}/{t.budget} trials, best {best}{ref}")
        c = summary.counters
        print(f"{c.measured} measured, {c.failed} failed, {c.builds} builds in "
              f"{summary.seconds:.1f} s; log {args.output / 'log.jsonl'}")
        return EXIT_OK


class Pipeline(Command):
    name = "pipeline"
    help = ("split a model over several processing elements (PEs), one firmware per stage, "
            "and stream inputs through them")

    def do_add_parser(self, parser):
        parser.add_argument("model", type=Path, help="a .tflite or .onnx model")
        parser.add_argument("--board", help="the board of every PE (with --pes N)")
        parser.add_argument("--pes", metavar="N|B1,B2,...",
                            help="how many PEs (of --board), or one board per stage in order; "
                                 "BOARD+ACCELERATOR: a PE whose stage offloads to it (not "
                                 "needed to --resume a pipeline)")
        parser.add_argument("--depth", type=int, metavar="D",
                            help="stages per pipeline (default: one per PE; with more PEs "
                                 "than the model has stages, the fastest depth, replicated)")
        parser.add_argument("--profile", type=Path, metavar="PROJECT",
                            help="balance by this project's last run --profile of the whole "
                                 "model (its build/profile.json, or the file); default: an "
                                 "estimate from MACs and bytes")
        parser.add_argument("--split-layers", action=argparse.BooleanOptionalAction,
                            default=True,
                            help="compute a pointwise convolution's rows on two PEs where a "
                                 "layer boundary leaves the stages unbalanced (TFLite models; "
                                 "default on)")
        parser.add_argument("--pe-ram", type=int, metavar="BYTES",
                            help="each PE's RAM, if less than its board file's")
        parser.add_argument("--pe-flash", type=int, metavar="BYTES",
                            help="each PE's flash, if less than its board file's")
        parser.add_argument("--link-cost", metavar="RX,TX[,PER_INPUT]",
                            help="instructions a PE spends per byte it receives and sends over "
                                 "its link, and per input (default: measured on "
                                 "qemu-mps2-an385)")
        parser.add_argument("--plan-only", action="store_true",
                            help="print the plan and its predictions; write nothing")
        parser.add_argument("-o", "--output", type=Path, metavar="DIR",
                            help="the pipeline's directory (plan, stage archives, projects)")
        parser.add_argument("--force", action="store_true", help="replace a non-empty DIR")
        parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE",
                            help="a stream of inputs: a .npy of samples along its first axis "
                                 "(or raw bytes); streamed through the pipeline once built")
        parser.add_argument("--output-dir", type=Path,
                            help="write each output, stacked over the inputs, as "
                                 "<its C name>.npy")
        parser.add_argument("--resume", action="store_true",
                            help="reuse DIR as it is and skip the inputs whose outputs an "
                                 "earlier run saved there")
        parser.add_argument("--timeout", type=float, default=60.0, metavar="S",
                            help="a PE that does not answer within S seconds stops the "
                                 "pipeline (default 60)")
        parser.add_argument("--tracker", metavar="HOST:PORT",
                            help="PEs from this stock RPC tracker ('serve --accept-firmware "
                                 "--tracker ... --key K' devices): each stage runs host-driven "
                                 "there")
        parser.add_argument("--key", default="micro",
                            help="the tracker key of the PEs (default 'micro')")
        add_accelerator_path(parser)

    def do_run(self, args):
        from generator.pipeline import command

        if not args.plan_only and args.output is None:
            raise InputError("pipeline: -o DIR is needed (or --plan-only)")
        if args.output is not None:
            check_output(args.output, "-o", DIRECTORY, inputs=[args.model])
        if args.output_dir is not None:
            check_output(args.output_dir, "--output-dir", DIRECTORY)
        with_accelerator_path(args.accelerator_path)
        return command.run(args, self.emit_json)


class Report(Command):
    name = "report"
    help = ("what a built project holds: memory by region (weights, each kernel's code, "
            "runtime, libc, activations, I/O, stack), the model's layers, the stack bound")

    def do_add_parser(self, parser):
        parser.add_argument("project", type=Path, metavar="DIR",
                            help="a built project, or a --format library output (with --board)")
        parser.add_argument("--board", help="for a library: the board whose compiler and "
                                            "flags your firmware uses")
        parser.add_argument("--html", type=Path, metavar="FILE",
                            help="also write one self-contained HTML page: both pictures and "
                                 "the tables")
        parser.add_argument("--svg", type=Path, metavar="FILE",
                            help="also write the memory map to FILE and the per-layer picture "
                                 "beside it (FILE's name with .layers.svg)")

    def do_run(self, args):
        from generator.report.files import layers_svg_path, write_pictures
        from generator.report.library import is_library, library_report
        from generator.report.report import project_report
        from generator.report.text import report_lines

        outputs = [(args.html, "--html"), (args.svg, "--svg")]
        if args.svg is not None:
            outputs.append((layers_svg_path(args.svg), "--svg"))
        for path, option in outputs:
            if path is not None:
                check_output(path, option, FILE, inputs=[args.project])
        if is_library(args.project):
            report = library_report(args.project, args.board)
        elif args.board is not None:
            raise InputError("--board is for library outputs; a project knows its board")
        else:
            report = project_report(args.project)
        written = write_pictures(report.to_json(), html=args.html, svg=args.svg)
        if args.json:
            self.emit_json({**report.to_json(), "written": [str(p) for p in written]})
            return EXIT_OK
        for line in report_lines(report):
            print(line)
        for path in written:
            print(f"wrote {path}")
        return EXIT_OK


COMMANDS: list[Command] = [Export(), Info(), Boards(), Generate(), Build(), Run(), Serve(),
                           Flash(), Accelerators(), Tune(), Report(), Pipeline()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="microtvm-gen",
        description="Model Library Format archives to firmware for microcontrollers.")
    parser.add_argument("--version", action="version", version=f"microtvm-gen {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def _silence_native_stderr() -> None:
    sys.stderr.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    from generator.accel.registry import split_target_options

    parser = build_parser()
    argv_list = list(sys.argv[1:] if argv is None else argv)
    argv_list, target_options = split_target_options(argv_list)
    args = parser.parse_args(argv_list)
    command = getattr(args, "command", None)
    if target_options and not hasattr(args, "target"):
        parser.error(f"{target_options[0]}: only 'export' takes --target-NAME-OPTION options")
    if hasattr(args, "target"):
        args.target_options = target_options
    if command is None:
        parser.print_help(sys.stderr)
        return EXIT_USER_ERROR
    use_stream("stderr" if getattr(args, "json", False) else "stdout")
    try:
        return command.do_run(args)
    except MtgError as exc:
        print(f"microtvm-gen {command.name}: error: {exc.one_line()}", file=sys.stderr)
        if command.silence_native_exit and argv is None:  # the real program, not a test
            _silence_native_stderr()
        return exc.exit_code
    except KeyboardInterrupt:
        print("microtvm-gen: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
