#!/usr/bin/env python3
"""Run a training script exactly as ``python SCRIPT ARGS`` would, with its stacks on a signal.

The supervisor starts the job as
``python tf_runbook_job.py STACKS_FILE SIGNUM END_FILE SCRIPT ARGS``.
Before the script runs, ``faulthandler`` is registered for the real-time signal SIGNUM:
on that signal every thread's Python stack is appended to STACKS_FILE, written from the
signal handler itself, without the GIL, so that a main thread blocked in a TensorFlow
collective (in C++, the GIL released) is shown too, and the job goes on. The file's first
line names the main thread, which the parser of the stacks (tf_causes.parse_stacks) looks
for.

Then the script runs as the interpreter would run it: ``__name__ == "__main__"``,
``__file__`` the script's path, ``sys.argv`` = [SCRIPT, ARGS...], ``sys.path[0]`` the
script's directory (not this file's), and its exit status and traceback as its own: an
uncaught exception prints the script's frames only and exits 1, ``sys.exit(n)`` exits n,
Ctrl-C ends the process by SIGINT.

How the script's Python ended is written into END_FILE (JSON, atomically) for the
supervisor, which takes the job's cause from it rather than from the log (tf_causes):
``{"raised": {"type": "tensorflow.python.framework.errors_impl.UnavailableError",
"message": ...}}`` for an uncaught exception (its qualified class: a class of the job's own
named like one of TensorFlow's is told apart), ``{"exit": N}`` for ``sys.exit(N)`` or the
script's end. A job that ends in C (``os._exit``, TensorFlow's own abort) or by a signal
leaves no END_FILE.

Held until the go (issue 42): started by a supervisor armed with ``--preimport``, the
environment names a gate (``TF_RUNBOOK_JOB_GATE``: a pipe's read end) and modules to import
first (``TF_RUNBOOK_JOB_PREIMPORT``, e.g. ``tensorflow``). Both are taken out of the
environment; the modules are imported (one that fails to import is left to the script's
own import to report), then the wrapper waits for the gate's byte before the script runs.
The gate closed without it (no go: the launch was refused or stopped) ends the wrapper,
status 0, with no END_FILE and nothing of the script run. The interpreter's start and
TensorFlow's import so happen while the launch arms the other hosts, not after the go.

Standard library only, and it imports nothing of the runbook: the job's own modules are
never shadowed.
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib
import json
import os
import runpy
import signal
import sys
import threading
import traceback
from types import TracebackType

USAGE = "usage: tf_runbook_job.py STACKS_FILE SIGNUM END_FILE SCRIPT [ARGS...]"
MAX_MESSAGE = 1000
# The held start (tf_supervisor.py's JOB_GATE_ENV, JOB_PREIMPORT_ENV, JOB_GATE_OPEN).
GATE_ENV = "TF_RUNBOOK_JOB_GATE"
PREIMPORT_ENV = "TF_RUNBOOK_JOB_PREIMPORT"
GATE_OPEN = b"g"


def qualified_name(kind: type) -> str:
    """A class as Python's traceback names it: ``module.QualName``, the module left out
    for builtins (``MemoryError``)."""
    module = getattr(kind, "__module__", None) or ""
    name = getattr(kind, "__qualname__", None) or kind.__name__
    return name if module in ("builtins", "") else f"{module}.{name}"


def write_end(path: str, record: dict) -> None:
    """END_FILE, written whole or not at all (a temporary file renamed over it)."""
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
        os.replace(temporary, path)
    except (OSError, TypeError, ValueError):
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def exit_status(code: object) -> int:
    """The status ``raise SystemExit(code)`` ends the interpreter with."""
    if code is None:
        return 0
    if isinstance(code, int) and not isinstance(code, bool):
        return code & 0xFF
    return 1


def register_stacks(path: str, signum: int) -> object:
    """Dump every thread's stack into ``path`` on ``signum`` (the job goes on); the open
    file is returned and must be kept."""
    handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open for the job's whole life
    ident = threading.main_thread().ident or 0
    handle.write(f"tf-runbook stacks of pid {os.getpid()}, main thread 0x{ident:016x}\n")
    handle.flush()
    faulthandler.register(signum, file=handle, all_threads=True, chain=False)
    return handle


def script_traceback(tb: TracebackType | None, script: str) -> TracebackType | None:
    """The traceback from the script's first frame on: this wrapper's and runpy's go."""
    first = tb
    while first is not None and first.tb_frame.f_code.co_filename != script:
        first = first.tb_next
    return first or tb


def run(script: str, args: list[str], end_file: str) -> None:
    path = os.path.abspath(script)
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.realpath(script))
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        write_end(end_file, {"exit": exit_status(exc.code)})
        raise
    except KeyboardInterrupt as exc:
        exc.with_traceback(script_traceback(exc.__traceback__, path))
        traceback.print_exception(type(exc), exc, exc.__traceback__)
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        raise SystemExit(130) from None
    except BaseException as exc:  # noqa: BLE001 - reported as the interpreter would
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        write_end(end_file, {"raised": {"type": qualified_name(type(exc)), "message": message[:MAX_MESSAGE]}})
        exc.with_traceback(script_traceback(exc.__traceback__, path))
        sys.excepthook(type(exc), exc, exc.__traceback__)
        raise SystemExit(1) from None
    write_end(end_file, {"exit": 0})


def hold_until_go(environ: dict) -> bool:
    """With a gate in ``environ`` (taken out of it, with the modules to import first):
    import those modules, then wait for the gate's byte. False when the gate closed
    without it (no go); True when it opened, or with no gate at all."""
    gate = environ.pop(GATE_ENV, "")
    modules = environ.pop(PREIMPORT_ENV, "")
    if not gate.isdigit():
        return True
    for name in filter(None, (item.strip() for item in modules.split(","))):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001, S110 - the script's own import reports what is wrong
            pass
    fd = int(gate)
    try:
        while True:
            try:
                data = os.read(fd, 1)
                break
            except InterruptedError:
                continue
    except OSError:
        data = b""
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    return data == GATE_OPEN


def main(argv: list[str]) -> None:
    if len(argv) < 4 or not argv[1].lstrip("-").isdigit():
        print(USAGE, file=sys.stderr)
        raise SystemExit(2)
    stacks_file, signum, end_file, script, *args = argv
    keep = register_stacks(stacks_file, int(signum))  # noqa: F841 - kept open while the job runs
    if not hold_until_go(os.environ):
        sys.stdout.flush()
        os._exit(0)  # no go: nothing of the script ran, and no interpreter's exit handlers either
    run(script, args, end_file)


if __name__ == "__main__":
    main(sys.argv[1:])
