#!/usr/bin/env python3
"""Run a training script exactly as ``python SCRIPT ARGS`` would, with its stacks on a signal.

The supervisor starts the job as ``python tf_runbook_job.py STACKS_FILE SIGNUM SCRIPT ARGS``.
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

Standard library only, and it imports nothing of the runbook: the job's own modules are
never shadowed.
"""

from __future__ import annotations

import faulthandler
import os
import runpy
import signal
import sys
import threading
import traceback
from types import TracebackType

USAGE = "usage: tf_runbook_job.py STACKS_FILE SIGNUM SCRIPT [ARGS...]"


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


def run(script: str, args: list[str]) -> None:
    path = os.path.abspath(script)
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.realpath(script))
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit:
        raise
    except KeyboardInterrupt as exc:
        exc.with_traceback(script_traceback(exc.__traceback__, path))
        traceback.print_exception(type(exc), exc, exc.__traceback__)
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        raise SystemExit(130) from None
    except BaseException as exc:  # noqa: BLE001 - reported as the interpreter would
        exc.with_traceback(script_traceback(exc.__traceback__, path))
        sys.excepthook(type(exc), exc, exc.__traceback__)
        raise SystemExit(1) from None


def main(argv: list[str]) -> None:
    if len(argv) < 3 or not argv[1].lstrip("-").isdigit():
        print(USAGE, file=sys.stderr)
        raise SystemExit(2)
    stacks_file, signum, script, *args = argv
    keep = register_stacks(stacks_file, int(signum))  # noqa: F841 - kept open while the job runs
    run(script, args)


if __name__ == "__main__":
    main(sys.argv[1:])
