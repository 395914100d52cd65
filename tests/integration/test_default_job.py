"""The default job's backups against a kill between an epoch's last collective and its line
(CI of stop 52): the chief must not back up an epoch that a worker never printed, or the
restart resumes past it and the verdict refuses the resume (epochs_once).

Two real workers of files/multiworker_train.py on localhost, without the runbook. Worker 1
runs under a wrapper that ends it (os._exit, as a SIGKILL would) at the moment it is about
to print a given epoch's line: after every collective of that epoch, before its line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from helpers import REPO, free_port, kill_quietly

TRAIN = REPO / "files" / "multiworker_train.py"

# Runs the default job with print() replaced: the process ends, exit status 9, instead of
# printing a line that starts with DIE_BEFORE.
WRAPPER = """
import builtins, os, runpy, sys
real_print, fatal = builtins.print, os.environ["DIE_BEFORE"]
def print(*args, **kwargs):
    if args and str(args[0]).startswith(fatal):
        os._exit(9)
    real_print(*args, **kwargs)
builtins.print = print
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""

# Long enough for the chief to have saved its backup many times over had it not waited
# for worker 1 (a backup of this model takes well under a second).
CHIEF_WAIT = 15.0


def start_worker(index: int, ports: list[int], backups: Path, out: Path, env_more: dict[str, str],
                 wrapper: Path | None = None) -> subprocess.Popen:  # fmt: skip
    env = {
        **os.environ,
        "TF_CONFIG": json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                                 "task": {"type": "worker", "index": index}}),  # fmt: skip
        "TF_RUNBOOK_CHECKPOINT_DIR": str(backups),
        **env_more,
    }
    argv = [sys.executable, *([str(wrapper)] if wrapper else []), str(TRAIN), "--epochs=4", "--steps-per-epoch=3"]
    with open(out, "wb") as handle:
        return subprocess.Popen(argv, env=env, stdout=handle, stderr=subprocess.STDOUT, cwd=out.parent)


def latest(backups: Path, index: int) -> int:
    """The newest epoch a worker's ``latest`` names (0: none), read from the file here, not
    with the job's own code."""
    try:
        text = (backups / f"worker-{index}" / "latest").read_text(encoding="utf-8")
    except FileNotFoundError:
        return 0
    return max((int(line.split()[0]) for line in text.splitlines() if line.split()), default=0)


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.mark.parametrize("epoch", [1, 2])
def test_no_backup_of_an_epoch_exists_before_every_worker_printed_it(tmp_path: Path, epoch: int) -> None:
    ports = [free_port(), free_port()]
    backups = tmp_path / "checkpoints"
    wrapper = tmp_path / "die_before_print.py"
    wrapper.write_text(WRAPPER, encoding="utf-8")
    outs = [tmp_path / "worker-0.log", tmp_path / "worker-1.log"]
    procs = [
        start_worker(0, ports, backups, outs[0], {}),
        start_worker(1, ports, backups, outs[1], {"DIE_BEFORE": f"worker=1 epoch={epoch} "}, wrapper),
    ]
    try:
        assert procs[1].wait(timeout=300) == 9, outs[1].read_text(errors="replace")[-3000:]
        log1 = outs[1].read_text(errors="replace")
        assert f"worker=1 epoch={epoch - 1} " in log1 or epoch == 1, log1[-3000:]
        assert f"worker=1 epoch={epoch} " not in log1
        # The chief completed the epoch's collectives with worker 1 and printed its line...
        wait_for(lambda: f"worker=0 epoch={epoch} " in outs[0].read_text(errors="replace"), 60, "the chief's line")
        # ...and, however long it is left, never backs the epoch up: it waits for a worker
        # that will never print it (or fails, its peer gone).
        deadline = time.monotonic() + CHIEF_WAIT
        while time.monotonic() < deadline and procs[0].poll() is None:
            assert latest(backups, 0) < epoch
            time.sleep(0.2)
        log0 = outs[0].read_text(errors="replace")
        assert f"worker=0 checkpoint_saved={epoch}" not in log0, log0[-3000:]
        assert latest(backups, 0) == epoch - 1, log0[-3000:]
        if epoch > 1:
            # The epoch before, which both printed, was backed up by both.
            assert f"worker=0 checkpoint_saved={epoch - 1}" in log0
            assert latest(backups, 1) == epoch - 1
    finally:
        for proc in procs:
            kill_quietly(proc.pid)
            proc.wait()


def test_every_epoch_is_backed_up_by_every_worker_of_an_uninterrupted_run(tmp_path: Path) -> None:
    """The meeting between an epoch's line and its backup costs no epoch: both workers
    print and back up every epoch, and finish."""
    ports = [free_port(), free_port()]
    backups = tmp_path / "checkpoints"
    outs = [tmp_path / "worker-0.log", tmp_path / "worker-1.log"]
    procs = [start_worker(i, ports, backups, outs[i], {}) for i in (0, 1)]
    try:
        for proc, out in zip(procs, outs):
            assert proc.wait(timeout=300) == 0, out.read_text(errors="replace")[-3000:]
        for index, out in enumerate(outs):
            log = out.read_text(errors="replace")
            assert [f"worker={index} checkpoint_saved={e}" in log for e in range(1, 5)] == [True] * 4, log[-3000:]
            assert f"worker={index} training_complete" in log
            assert latest(backups, index) == 4
    finally:
        for proc in procs:
            kill_quietly(proc.pid)
            proc.wait()
