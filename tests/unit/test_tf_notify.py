"""The notify action (tf_notify_command, issue 39): what the command is given, and that
it never holds or fails the run (plugins/action/tf_notify.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from ansible_collections.tf_runbook.multiworker.plugins.action import tf_notify


def test_the_command_gets_the_event_the_run_id_and_the_summary_or_the_run_dir(tmp_path: Path) -> None:
    argv, env = tf_notify.notify_call(["notify", "--to", "team"], "started", "r1", str(tmp_path), {"HOME": "/h"})
    assert argv == ["notify", "--to", "team", "started", "r1", str(tmp_path)]
    assert env == {"HOME": "/h", "TF_RUNBOOK_EVENT": "started", "TF_RUNBOOK_RUN_ID": "r1",
                   "TF_RUNBOOK_SUMMARY": str(tmp_path), "TF_RUNBOOK_RUN_DIR": str(tmp_path)}  # fmt: skip
    (tmp_path / "summary.json").write_text("{}")
    argv, env = tf_notify.notify_call(["notify"], "failed", "r1", str(tmp_path), {})
    assert argv[-1] == env["TF_RUNBOOK_SUMMARY"] == str(tmp_path / "summary.json")


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("pass", ""),
        ("import sys; print('first', file=sys.stderr); print('chat unreachable', file=sys.stderr); sys.exit(3)",
         "exited 3: chat unreachable"),
        ("import sys; sys.exit(4)", "exited 4"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", "was killed by signal 15"),
        ("print('\\x1b[2J\\x1b]0;x', file=__import__('sys').stderr); raise SystemExit(1)", "exited 1: \\x1b[2J\\x1b]0;x"),
    ],
)
def test_how_a_command_ended_is_one_line(script: str, expected: str) -> None:
    assert tf_notify.run_notify([sys.executable, "-c", script], {}, 10) == expected


def test_a_command_that_cannot_start_is_said_so() -> None:
    assert tf_notify.run_notify(["/nonexistent/notify"], {}, 10) == "cannot be started: No such file or directory"


def test_a_hanging_command_and_what_it_started_are_killed_at_the_timeout(tmp_path: Path) -> None:
    marker = tmp_path / "late"
    script = f"import subprocess, time; subprocess.Popen(['sleep', '30']); time.sleep(30); open({str(marker)!r}, 'w')"
    started = time.monotonic()
    assert tf_notify.run_notify([sys.executable, "-c", script], {}, 1) == "did not end within 1 s and was killed"
    assert time.monotonic() - started < 5 and not marker.exists()
