"""Running the CLI on one mutated archive inside a sandboxed worker, and judging the run.

A worker process (started by scripts/fuzz_archives.py) imports the CLI once, arms an audit
hook that records every write-like file operation outside its output directory, limits its
address space, and then runs `info --json`, `info` and `generate` in-process through
`generator.cli.main` for each archive index it is sent. Each run is classified:

ok, refused (exit 2, one line on stderr), traceback (any other exception, or an exit code
not in {0, 2}), hang (over the per-archive timeout), escape (a file written, created,
renamed or removed outside the output directory, or a process started), memory (peak RSS
over the limit, or MemoryError), bad-json (`info --json` printed NaN/Infinity or no JSON),
unclean (exit 2 with other than one line on stderr), leftover (a refused `generate` left
files in its output directory). A `generate` that succeeded must have written a strict
project.json.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import json
import os
import random
import resource
import shutil
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from tests.fuzz.archive_mutator import Mutated, Seed, load_seed, mutate

GIB = 1 << 30
DEFAULT_ENTRY = "generator.cli:main"
WARM_UP_MAX_BYTES = 512 * 1024  # seeds larger than this are not run at worker start
# Worst first: an archive's outcome is the worst of its runs.
OUTCOMES = ("escape", "hang", "crash", "memory", "traceback", "bad-json", "leftover",
            "unclean", "refused", "ok")
FAILURES = ("escape", "hang", "crash", "memory", "traceback")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PATH_EVENTS = {"os.mkdir", "os.rename", "os.remove", "os.rmdir", "os.symlink", "os.link",
                "os.truncate", "os.chmod", "os.chown", "os.utime", "shutil.rmtree",
                "shutil.move", "shutil.copyfile", "shutil.copytree", "os.chdir"}
SERVER_PROGRAMS = ("launch_microtvm_api_server.sh", "microtvm_api_server.py")
_SPAWN_EVENTS = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.fork",
                 "os.spawn", "os.forkpty"}


@dataclass
class WorkerConfig:
    seeds: list[tuple[str, str]]  # (label, path)
    sandbox: str
    master_seed: int
    boards: list[str]
    timeout: float = 20.0
    memory_limit: int = GIB  # peak RSS above this is a finding
    address_space: int = 3 * GIB  # RLIMIT_AS headroom above the worker's size at start
    repo: str = ""
    # "module:function" called with the argument list; the tests point it at functions that
    # misbehave on purpose to check the classification.
    entry: str = DEFAULT_ENTRY
    # Every Nth archive also runs `generate` through the CLI (a Project API server process).
    cli_generate_every: int = 0


@dataclass
class Run:
    command: str  # "info --json", "info", "generate <board>"
    outcome: str
    exit_code: int | None
    seconds: float
    peak_rss: int
    signature: str = ""  # what kind of failure, where (file:line)
    detail: str = ""  # traceback text, stderr, or the escaping operations


@dataclass
class ArchiveResult:
    index: int
    seed: str
    kinds: list[str]
    suffix: str
    size: int
    outcome: str
    seconds: float
    peak_rss: int
    runs: list[Run] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: bytes | None = None  # the archive, for non-ok outcomes
    restart: bool = False  # the worker will exit after this one (memory grew)

    def worst_run(self) -> Run | None:
        bad = [r for r in self.runs if r.outcome not in ("ok", "refused")]
        return min(bad, key=lambda r: OUTCOMES.index(r.outcome)) if bad else None


def worst(outcomes: list[str]) -> str:
    return min(outcomes, key=OUTCOMES.index) if outcomes else "ok"


def make_archive(seeds: list[Seed], master_seed: int, index: int) -> tuple[Seed, Mutated]:
    """The archive number `index` of a run with `master_seed` (deterministic)."""
    rng = random.Random(f"{master_seed}:{index}")
    seed = seeds[rng.randrange(len(seeds))]
    return seed, mutate(seed, rng)


def board_for(boards: list[str], index: int) -> str:
    return boards[index % len(boards)]


class ArchiveTimeout(BaseException):
    """Raised by the alarm in the worker's main thread (BaseException: code under test that
    catches Exception does not swallow it)."""


# ---- measuring ----------------------------------------------------------------------------

def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    hwm = _status_kb("VmHWM")
    if hwm:
        return hwm * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Guard:
    """The audit hook: write-like operations outside `allowed` while armed."""

    def __init__(self, allowed: Path, servers: Path | None = None) -> None:
        self.allowed = str(allowed.resolve())
        # Project API servers of the templates may be started (the CLI's generate does).
        self.servers = str(servers.resolve()) + os.sep if servers else None
        self.armed = False
        self.escapes: list[str] = []
        sys.addaudithook(self._hook)

    def _outside(self, path) -> bool:
        if isinstance(path, int) or path is None:
            return False
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        full = os.path.normpath(os.path.abspath(os.fspath(path)))
        return not (full == self.allowed or full.startswith(self.allowed + os.sep))

    def _hook(self, event: str, args: tuple) -> None:
        if not self.armed:
            return
        if event == "open":
            path, _mode, flags = (tuple(args) + (None, None))[:3]
            if isinstance(flags, int) and flags & _WRITE_FLAGS and self._outside(path):
                self.escapes.append(f"open for writing {path!r}")
        elif event in _PATH_EVENTS:
            if event in ("os.remove", "os.rmdir") and len(args) > 1 and args[1] is not None:
                return  # relative to a directory fd (shutil.rmtree's walk): its own event
            targets = args[:2] if event in ("os.rename", "os.link", "os.symlink",
                                            "shutil.move", "shutil.copyfile",
                                            "shutil.copytree") else args[:1]
            for t in targets:
                if self._outside(t):
                    self.escapes.append(f"{event} {t!r}")
        elif event in _SPAWN_EVENTS:
            argv = args[1] if event == "subprocess.Popen" and len(args) > 1 else None
            program = os.fspath(argv[0]) if isinstance(argv, list | tuple) and argv else ""
            if not (self.servers and os.path.abspath(program).startswith(self.servers)
                    and program.endswith(SERVER_PROGRAMS)):
                self.escapes.append(f"{event} {args[:2]!r}")


def _snapshot(root: Path, skip: Path | None) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if here == skip:
            dirnames[:] = []
            continue
        for name in dirnames + filenames:
            p = here / name
            if p == skip:
                continue
            try:
                st = p.lstat()
            except OSError:  # removed meanwhile
                continue
            out[str(p)] = (st.st_size, st.st_mtime_ns)
    return out


# ---- classification -----------------------------------------------------------------------

def _location(tb_summary: traceback.StackSummary, repo: str) -> str:
    """file:line of the deepest frame in the tool's own code (generator/), else the last."""
    frames = [f for f in tb_summary if not f.filename.endswith("archive_runner.py")]
    own = [f for f in frames if f"{os.sep}generator{os.sep}" in f.filename
           and (not repo or f.filename.startswith(repo))]
    frame = own[-1] if own else (frames[-1] if frames else None)
    if frame is None:
        return "?"
    name = frame.filename
    if repo and name.startswith(repo):
        name = name[len(repo):].lstrip(os.sep)
    return f"{name}:{frame.lineno}"


def _strict_json(text: str) -> str | None:
    """None if `text` is one strict JSON document, else why not."""
    def refuse(const: str):
        raise ValueError(f"non-standard constant {const}")
    try:
        json.loads(text, parse_constant=refuse)
    except (ValueError, RecursionError) as exc:
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return None


def _read_or_empty(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


class Sandbox:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.inputs = root / "in"
        self.out = root / "out"
        self.tmp = root / "tmp"
        self.cwd = root / "cwd"
        shutil.rmtree(root, ignore_errors=True)
        for d in (self.inputs, self.out, self.tmp, self.cwd):
            d.mkdir(parents=True)

    def clear(self) -> None:
        for d in (self.out, self.tmp, self.cwd, self.inputs):
            for child in d.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink()


class Worker:
    """State of one worker process."""

    def __init__(self, config: WorkerConfig, worker_id: int) -> None:
        self.config = config
        self.sandbox = Sandbox(Path(config.sandbox) / f"w{worker_id}")
        os.environ["TMPDIR"] = str(self.sandbox.tmp)
        import tempfile
        tempfile.tempdir = str(self.sandbox.tmp)
        os.chdir(self.sandbox.cwd)
        self.seeds = [load_seed(label, Path(path).read_bytes()) for label, path in config.seeds]
        module, _, function = config.entry.partition(":")
        if config.entry == DEFAULT_ENTRY:
            from generator import cli
            # The parser is the same for every run; building it is a fifth of a refusal's
            # time. main() itself runs as it is.
            cli.build_parser = functools.cache(cli.build_parser)
            self.main = cli.main
            self._warm_up()
        else:
            self.main = getattr(importlib.import_module(module), function)
        self.guard = Guard(self.sandbox.out,
                           Path(config.repo) / "templates" if config.repo else None)
        self.baseline_vm = _status_kb("VmSize") * 1024
        limit = self.baseline_vm + config.address_space
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        self.can_reset_peak = _reset_peak()
        signal.signal(signal.SIGALRM, self._alarm)

    def _alarm(self, signum, frame):
        raise ArchiveTimeout()

    def _warm_up(self) -> None:
        """Import everything the commands import lazily, render templates once."""
        for _label, path in self.config.seeds:
            if Path(path).stat().st_size > WARM_UP_MAX_BYTES:
                continue
            for board in self.config.boards:
                for how, argv in self._commands(Path(path), board):
                    with contextlib.redirect_stdout(io.StringIO()), \
                            contextlib.redirect_stderr(io.StringIO()), \
                            contextlib.suppress(BaseException):
                        (self.main if how == "cli" else self._generate_in_process)(argv)
                    shutil.rmtree(self.sandbox.out / "proj", ignore_errors=True)
        self.sandbox.clear()

    def _commands(self, archive: Path, board: str,
                  cli_generate: bool = False) -> list[tuple[str, list[str]]]:
        """(how, argv): "cli" runs generator.cli.main(argv); "server" runs generate through
        the template's Project API handler in this process (the CLI runs that handler in a
        server process, where a traceback would come back as a one-line error)."""
        generate = ["generate", str(archive), "--board", board, "-o",
                    str(self.sandbox.out / "proj")]
        commands = [("cli", ["info", "--json", str(archive)]), ("cli", ["info", str(archive)]),
                    ("server", generate)]
        return commands + ([("cli", generate)] if cli_generate else [])

    def _generate_in_process(self, argv: list[str]) -> int:
        """`generate ARCHIVE --board B -o DIR` through the template server's method, with the
        CLI's rule for the tool's own errors (one line, exit 2)."""
        from generator.errors import MtgError
        from generator.project_api.handler import ProjectServer
        from generator.resources import templates_dir

        server = ProjectServer(templates_dir() / "crt")
        try:
            server.generate_project(argv[1], None, argv[argv.index("-o") + 1],
                                    {"board": argv[argv.index("--board") + 1]})
        except MtgError as exc:
            print(f"microtvm-gen generate: error: {exc.one_line()}", file=sys.stderr)
            return exc.exit_code
        return 0

    def run_index(self, index: int) -> ArchiveResult:
        seed, mutated = make_archive(self.seeds, self.config.master_seed, index)
        archive = self.sandbox.inputs / f"model{mutated.suffix}"
        archive.write_bytes(mutated.data)
        result = ArchiveResult(index, seed.label, mutated.kinds, mutated.suffix,
                               len(mutated.data), "ok", 0.0, 0, notes=list(mutated.notes))
        start = time.monotonic()
        every = self.config.cli_generate_every
        result.runs = self._run_all(archive, board_for(self.config.boards, index),
                                    cli_generate=bool(every) and index % every == 0)
        result.seconds = time.monotonic() - start
        result.peak_rss = max((r.peak_rss for r in result.runs), default=0)
        result.outcome = worst([r.outcome for r in result.runs])
        if result.outcome not in ("ok", "refused"):
            result.data = mutated.data
        self.sandbox.clear()
        result.restart = _status_kb("VmRSS") * 1024 > 512 << 20
        return result

    def run_file(self, path: Path, board: str) -> list[Run]:
        """Run the commands on an archive file (a saved reproducer)."""
        archive = self.sandbox.inputs / path.name
        archive.write_bytes(path.read_bytes())
        runs = self._run_all(archive, board, cli_generate=True)
        self.sandbox.clear()
        return runs

    def _run_all(self, archive: Path, board: str, cli_generate: bool = False) -> list[Run]:
        runs: list[Run] = []
        signal.setitimer(signal.ITIMER_REAL, self.config.timeout)
        try:
            for how, argv in self._commands(archive, board, cli_generate):
                run = self._run(argv, how)
                runs.append(run)
                if run.outcome == "hang":
                    break  # the archive's time is up
                if argv[:2] == ["info", "--json"] and run.exit_code != 0:
                    break  # generate reads the archive the same way: nothing more to learn
        except ArchiveTimeout:  # the alarm fired outside a command (between two runs)
            runs.append(Run("(between runs)", "hang", None, self.config.timeout, 0,
                            "hang between runs", "the archive's time ran out"))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        return runs

    def _run(self, argv: list[str], how: str = "cli") -> Run:
        sandbox = self.sandbox
        entry = self.main if how == "cli" or self.config.entry != DEFAULT_ENTRY \
            else self._generate_in_process
        watched = [(sandbox.root, sandbox.out)]
        if how == "cli" and argv[0] == "generate":  # a server process does the work there
            watched.append((Path(self.config.repo) / "templates" / "crt", None))
        shutil.rmtree(sandbox.out / "proj", ignore_errors=True)  # each run starts afresh
        before = [_snapshot(root, skip) for root, skip in watched]
        out, err = io.StringIO(), io.StringIO()
        exc_info: BaseException | None = None
        exit_code: int | None = None
        self.guard.escapes = []
        _reset_peak()
        t0 = time.monotonic()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                self.guard.armed = True
                try:
                    exit_code = entry(argv)
                finally:
                    self.guard.armed = False
        except SystemExit as exc:
            exit_code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException as exc:  # noqa: BLE001 - every exception is a finding
            exc_info = exc
        seconds = time.monotonic() - t0
        peak = peak_rss_bytes()
        label = (f"generate {argv[argv.index('--board') + 1]}" if argv[0] == "generate"
                 else " ".join(a for a in argv[:2] if a.startswith(("info", "--json"))))
        if how == "cli" and argv[0] == "generate":
            label = "cli " + label
        run = Run(label, "ok", exit_code, seconds, peak)
        escapes = list(self.guard.escapes)
        for i, ((root, skip), old) in enumerate(zip(watched, before, strict=True)):
            new = _snapshot(root, skip)
            # The sandbox must be exactly as it was; in the template folder (which others
            # may edit meanwhile) only new files count.
            changed = sorted(set(new.items()) ^ set(old.items())) if i == 0 else \
                sorted(set(new) - set(old))
            if changed:
                escapes.append(f"files outside the output directory changed: {changed[:5]}")
        if escapes:
            run.outcome = "escape"
            run.signature = "escape: " + escapes[0][:120]
            run.detail = "\n".join(escapes)
        elif isinstance(exc_info, ArchiveTimeout):
            tb = traceback.extract_tb(exc_info.__traceback__)
            run.outcome = "hang"
            run.signature = f"hang at {_location(tb, self.config.repo)}"
            run.detail = "".join(traceback.format_exception(exc_info))
        elif isinstance(exc_info, MemoryError) or peak > self.config.memory_limit:
            run.outcome = "memory"
            where = (_location(traceback.extract_tb(exc_info.__traceback__), self.config.repo)
                     if exc_info is not None else "peak RSS")
            run.signature = f"memory: {type(exc_info).__name__ if exc_info else 'RSS'} at " \
                            f"{where}"
            run.detail = ("".join(traceback.format_exception(exc_info)) if exc_info else
                          f"peak RSS {peak} bytes") + "\n" + err.getvalue()[-2000:]
        elif exc_info is not None or exit_code not in (0, 2):
            run.outcome = "traceback"
            if exc_info is not None:
                tb = traceback.extract_tb(exc_info.__traceback__)
                run.signature = f"{type(exc_info).__name__} at {_location(tb, self.config.repo)}"
                run.detail = "".join(traceback.format_exception(exc_info))
            else:
                run.signature = f"exit code {exit_code}"
                run.detail = err.getvalue()[-4000:]
        elif exit_code == 2:
            lines = err.getvalue().splitlines()
            if len(lines) != 1:
                run.outcome = "unclean"
                run.signature = f"unclean: exit 2 with {len(lines)} lines on stderr"
                run.detail = err.getvalue()[-4000:]
            elif argv[0] == "generate" and (sandbox.out / "proj").exists():
                run.outcome = "leftover"
                run.signature = "leftover: a refused generate left its output directory"
                run.detail = lines[0]
            else:
                run.outcome = "refused"
                run.detail = lines[0][:300]
        elif argv[:2] == ["info", "--json"] or argv[0] == "generate":
            why = _strict_json(out.getvalue() if argv[0] == "info" else
                               _read_or_empty(sandbox.out / "proj" / "project.json"))
            if why:
                run.outcome = "bad-json"
                run.signature = f"bad-json: {why.split(':')[0]} {why.split(' ')[-1][:40]}"
                run.detail = why
        return run


def worker_main(conn, config: WorkerConfig, worker_id: int) -> None:
    """Entry point of a worker process: answer archive indices until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the parent, which stops us
    try:
        worker = Worker(config, worker_id)
    except BaseException:  # noqa: BLE001 - report why the worker could not start
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ready", worker.can_reset_peak))
    while True:
        try:
            index = conn.recv()
        except EOFError:
            return
        if index is None:
            return
        try:
            result = worker.run_index(index)
        except BaseException:  # noqa: BLE001 - a bug of the fuzzer itself: stop the run
            conn.send(("error", f"archive #{index}:\n{traceback.format_exc()}"))
            return
        conn.send(("result", result))
        if result.restart:
            return

