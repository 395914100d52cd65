# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The worker interpreter as the preflight probe sees it on a host: where
``tf_worker_python`` is (looked up), whether it runs as Python 3, and the versions it
reports; commands run through a ``Runner`` (the module's ``run_command``, bounded in time)."""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from typing import Any, Callable

# Runs a command (argv) for at most ``timeout`` seconds and gives (rc, stdout, stderr);
# raises OSError when the command cannot start, TimeoutError when its time ran out.
Runner = Callable[[list[str], float], tuple[int, str, str]]


# The options of reading an interpreter's versions, as ``tf_preflight_versions``'s own and as
# the suboptions of ``tf_preflight_host``'s ``versions`` (the host look reads them in its run).
VERSIONS_SPEC: dict[str, dict[str, Any]] = {
    "python": {"type": "str", "required": True},
    "code": {"type": "str", "default": ""},
}


def command_runner(module: Any) -> Runner:
    """The run_command of ``module`` (an AnsibleModule) as a Runner: arguments passed as
    given (no ``~`` or ``$`` expansion, no shell), the command killed once ``timeout``
    seconds have passed."""

    def run(argv: list[str], timeout: float) -> tuple[int, str, str]:
        expired = threading.Event()
        timers: list[threading.Timer] = []

        def arm(process: Any) -> None:
            def kill() -> None:
                expired.set()
                process.kill()

            timer = threading.Timer(timeout, kill)
            timer.daemon = True
            timers.append(timer)
            timer.start()

        try:
            rc, out, err = module.run_command(
                argv, expand_user_and_vars=False, handle_exceptions=False, before_communicate_callback=arm
            )
        finally:
            for timer in timers:
                timer.cancel()
                timer.join()  # no thread left when the host look forks its listener
        if expired.is_set():
            raise TimeoutError(f"{argv[0]} timed out after {timeout:g} seconds")
        return rc, out, err

    return run


def interpreter_state(python: str) -> dict[str, Any]:
    """Where ``python`` (tf_worker_python) is on this host, looked up, not run: a command
    name is looked for on PATH (the supervisor is started with this environment); ``~``
    expanded by the option's type."""
    if not python:
        return {}
    if "/" not in python:
        return {"path": python, "found": shutil.which(python) or ""}
    path = python
    is_file = os.path.isfile(path)
    # access() says yes to root for any file: an execute bit must be set too.
    executable = is_file and os.access(path, os.X_OK) and bool(os.stat(path).st_mode & 0o111)
    return {"path": path, "exists": os.path.exists(path), "is_file": is_file, "executable": executable}


# What the worker interpreter is run with, where its versions are not read: it answers with
# its version, and a Python 2 can still be named.
PYTHON3_CODE = "import sys; sys.stdout.write('python %d.%d.%d' % tuple(sys.version_info[:3]))"
PYTHON_ANSWER = re.compile(r"python (\d+)\.(\d+)\.(\d+)")


def interpreter_file(state: dict[str, Any]) -> str:
    """The file the lookup found for tf_worker_python, "" where it found none (the lookup's
    own problem then names why)."""
    if "found" in state:
        return state["found"] or ""
    return state["path"] if state.get("executable") else ""


def interpreter_python3(python: str, run: Runner, timeout: float = 30) -> tuple[str, str]:
    """(its version, "") when ``python`` runs as Python 3, else ("", why not)."""
    out, fault = run_interpreter(python, PYTHON3_CODE, run, timeout)
    if fault:
        return "", fault
    said = out.strip()
    answer = PYTHON_ANSWER.fullmatch(said)
    if answer is None:
        return "", f"it printed {said[-200:]!r} for its version" if said else "it printed nothing for its version"
    version = ".".join(answer.groups())
    return (version, "") if answer.group(1) == "3" else ("", f"it is Python {version}")


def run_interpreter(python: str, code: str, run: Runner, timeout: float) -> tuple[str, str]:
    """(what ``code`` printed under the worker interpreter ``python``, "") or ("", why it
    did not run), run with ``run`` for at most ``timeout`` seconds."""
    try:
        rc, out, err = run([python, "-c", code], timeout)
    except OSError as exc:  # TimeoutError among them, which has no strerror
        return "", f"it cannot be executed: {exc.strerror}" if exc.strerror else str(exc)
    if rc != 0:
        said = (err or out).strip()[-300:]
        return "", said or f"it exited with status {rc}, saying nothing"
    return out, ""


def interpreter_versions(python: str, code: str, run: Runner, timeout: float = 120) -> dict[str, Any]:
    """What ``code`` prints under the worker interpreter ``python`` (run with ``run``, for at
    most ``timeout`` seconds), or why it did not run."""
    out, fault = run_interpreter(python, code, run, timeout)
    if fault:
        return {"error": f"{python} does not run: {fault}"}
    try:
        return dict(json.loads(out))
    except ValueError:
        return {"error": f"{python} printed no versions: {out.strip()[-300:]}"}
