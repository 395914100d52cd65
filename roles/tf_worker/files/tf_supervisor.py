#!/usr/bin/env python3
"""Run one training worker under the runbook's control, on the worker's own host.

Started by the launch phase through an Ansible async task. It:
- starts the training process in its own session and process group, with TF_CONFIG
  from the worker's ``tf_config.json`` in its environment (never on a command line) and
  the worker directory as its working directory;
- records ``state.json`` (supervisor pid, training pid and process group) before the
  training can do anything, so that a stop finds the run's processes through the run's
  own records and never by name;
- enforces the startup deadline (a line matching the startup pattern must appear in the
  log) and the job deadline, because TensorFlow alone waits up to an hour for a missing
  peer and ignores SIGTERM while doing so;
- on SIGTERM/SIGINT, or a passed deadline, stops the whole process group: SIGTERM, then
  SIGKILL after a grace period;
- writes ``exit.json`` (return code, signal, reason, times) last, atomically, with the time
  it first saw each line of the metrics contract (``worker=...``) in the log, which has no
  timestamps of its own (the run report's timeline reads them through the verdict);
- tells the job its attempt number and checkpoint directory through the environment
  (``TF_RUNBOOK_ATTEMPT``, ``TF_RUNBOOK_CHECKPOINT_DIR``).

Standard library only: it runs under the worker's interpreter before anything else.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

STATE_FILE = "state.json"
EXIT_FILE = "exit.json"
LOG_FILE = "worker.log"
CONFIG_FILE = "tf_config.json"
JOB_ENV_FILE = "job_env.json"
POLL_SECONDS = 0.2
# Lines of the metrics contract (``worker=I ...``) timed in exit.json, and at most how many.
CONTRACT_PREFIX = b"worker="
MAX_TIMED_LINES = 20000


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write JSON so that a reader sees either nothing or the whole document."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(pgid: int, child: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left after ``grace`` seconds."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        child.poll()
        if not group_alive(pgid):
            return
        time.sleep(POLL_SECONDS)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def job_environment(worker_dir: Path, base: dict[str, str]) -> dict[str, str]:
    """``base`` with the worker's ``job_env.json`` (the user's tf_worker_env, its GPUs and
    the job directory on PYTHONPATH, written 0600 by the deploy) laid over it. The file
    never reaches a command line; TF_CONFIG and TF_RUNBOOK_* stay the runbook's own."""
    env = dict(base)
    try:
        text = (worker_dir / JOB_ENV_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return env
    for name, value in json.loads(text).items():
        if name != "TF_CONFIG" and not name.startswith("TF_RUNBOOK_"):
            env[str(name)] = str(value)
    return env


class LogWatcher:
    """Reads the log incrementally and remembers whether the startup pattern appeared."""

    def __init__(self, path: Path, pattern: str) -> None:
        self.path = path
        self.pattern = re.compile(pattern) if pattern else None
        self.offset = 0
        self.tail = ""
        self.matched = self.pattern is None

    def poll(self) -> bool:
        if self.matched:
            return True
        try:
            with open(self.path, "r", encoding="utf-8", errors="replace") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
                self.offset = handle.tell()
        except FileNotFoundError:
            return False
        text = self.tail + chunk
        assert self.pattern is not None
        if self.pattern.search(text):
            self.matched = True
        # Keep the last partial line so that a match split across reads is still seen.
        self.tail = text[-4096:]
        return self.matched


class LineClock:
    """Notes the time at which each contract line first appeared in the log.

    Reads the log incrementally in binary (a partial last line waits for its end) and keeps
    ``[time, line]`` for lines that start with ``worker=``, at most ``limit`` of them.
    """

    def __init__(self, path: Path, limit: int = MAX_TIMED_LINES) -> None:
        self.path = path
        self.limit = limit
        self.offset = 0
        self.partial = b""
        self.lines: list[list[Any]] = []

    def _note(self, raw: bytes, now: float) -> None:
        line = raw.strip()
        if line.startswith(CONTRACT_PREFIX) and len(self.lines) < self.limit:
            # Rounded down to the millisecond: never later than the exit recorded after it.
            self.lines.append([int(now * 1000) / 1000, line.decode("utf-8", errors="replace")])

    def poll(self, now: float | None = None, final: bool = False) -> None:
        now = time.time() if now is None else now
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
                self.offset = handle.tell()
        except FileNotFoundError:
            return
        *complete, self.partial = (self.partial + chunk).split(b"\n")
        self.partial = self.partial[-65536:]
        for raw in complete:
            self._note(raw, now)
        if final and self.partial:
            self._note(self.partial, now)
            self.partial = b""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Supervise one TensorFlow worker.")
    parser.add_argument("--worker-dir", required=True, type=Path)
    parser.add_argument("--python", required=True, help="interpreter that runs the job")
    parser.add_argument("--script", required=True, type=Path)
    parser.add_argument("--startup-timeout", type=float, default=0, help="0: none")
    parser.add_argument("--startup-pattern", default="")
    parser.add_argument("--job-timeout", type=float, default=0, help="0: none")
    parser.add_argument("--grace", type=float, default=5.0)
    parser.add_argument("--attempt", type=int, default=0, help="restart attempt, 0 first")
    parser.add_argument("--checkpoint-dir", default="", help="where the job may back up")
    parser.add_argument("job_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.job_args and args.job_args[0] == "--":
        args.job_args = args.job_args[1:]
    return args


def supervise(args: argparse.Namespace) -> int:
    worker_dir: Path = args.worker_dir.resolve()
    if (worker_dir / STATE_FILE).exists() or (worker_dir / EXIT_FILE).exists():
        # Never run twice in one worker directory: that would overwrite an earlier
        # attempt's records.
        print(f"{worker_dir}: this worker was already launched", file=sys.stderr)
        return 97
    config_text = (worker_dir / CONFIG_FILE).read_text(encoding="utf-8")
    json.loads(config_text)
    env = job_environment(worker_dir, dict(os.environ))
    env["TF_CONFIG"] = config_text.strip()
    env["PYTHONUNBUFFERED"] = "1"
    # The runbook's side of the resume contract: which attempt this is, and a directory
    # that outlives attempts, for jobs that back up and restore their training state.
    env["TF_RUNBOOK_ATTEMPT"] = str(args.attempt)
    if args.checkpoint_dir:
        env["TF_RUNBOOK_CHECKPOINT_DIR"] = args.checkpoint_dir

    stop_reason: list[str] = []

    def on_signal(signum: int, _frame: Any) -> None:
        stop_reason.append(f"stopped by signal {signal.Signals(signum).name}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    started = time.time()
    log_path = worker_dir / LOG_FILE
    with open(log_path, "ab", buffering=0) as log:
        try:
            child = subprocess.Popen(
                [args.python, str(args.script), *args.job_args],
                cwd=worker_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            log.write(f"supervisor: cannot start {args.python}: {exc}\n".encode())
            write_json_atomic(
                worker_dir / EXIT_FILE,
                {
                    "returncode": 127,
                    "signal": None,
                    "reason": f"cannot start the job: {exc}",
                    "started_at": started,
                    "finished_at": time.time(),
                    "joined": False,
                },
            )
            return 127
    pgid = child.pid
    write_json_atomic(
        worker_dir / STATE_FILE,
        {
            "supervisor_pid": os.getpid(),
            "pid": child.pid,
            "pgid": pgid,
            "started_at": started,
            "argv": [args.python, str(args.script), *args.job_args],
        },
    )

    watcher = LogWatcher(log_path, args.startup_pattern)
    clock = LineClock(log_path)
    reason = "exited"
    t0 = time.monotonic()
    while child.poll() is None:
        if stop_reason:
            reason = stop_reason[0]
            stop_group(pgid, child, args.grace)
            break
        elapsed = time.monotonic() - t0
        joined = watcher.poll()
        clock.poll()
        if args.startup_timeout and not joined and elapsed > args.startup_timeout:
            reason = f"startup deadline of {args.startup_timeout:g} s passed before the worker joined the cluster"
            stop_group(pgid, child, args.grace)
            break
        if args.job_timeout and elapsed > args.job_timeout:
            reason = f"job deadline of {args.job_timeout:g} s passed"
            stop_group(pgid, child, args.grace)
            break
        time.sleep(POLL_SECONDS)
    returncode = child.wait()
    clock.poll(final=True)
    if reason == "exited" and stop_reason:
        # The job ended on the same signal the supervisor got, before the loop saw it.
        reason = stop_reason[0]
    # The job may have left children of its own in the group: none may outlive the run.
    if group_alive(pgid):
        stop_group(pgid, child, min(args.grace, 2.0))
    sig = -returncode if returncode < 0 else None
    result = {
        "returncode": returncode if returncode >= 0 else 128 + (sig or 0),
        "signal": signal.Signals(sig).name if sig else None,
        "reason": reason,
        "started_at": started,
        "finished_at": time.time(),
        "joined": watcher.poll(),
        "timed_lines": clock.lines,
    }
    write_json_atomic(worker_dir / EXIT_FILE, result)
    return int(result["returncode"])


def main(argv: list[str] | None = None) -> int:
    return supervise(parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    raise SystemExit(main())
