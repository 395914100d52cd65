"""tf_notify_command (issue 39): the controller runs the operator's command at a run's
events, with the event, the run id and the summary's path appended and in its
environment, and never fails the run for it. Localhost runs of tiny jobs without
TensorFlow."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import helpers

JOBS = Path(__file__).resolve().parent / "jobs"
# The notify command under test: one JSON line per call, its argv and its TF_RUNBOOK_*.
NOTIFY = """import json, os, sys
with open(sys.argv[1], "a", encoding="utf-8") as out:
    env = {k: v for k, v in os.environ.items() if k.startswith("TF_RUNBOOK_")}
    out.write(json.dumps({"argv": sys.argv[2:], "env": env}) + "\\n")
"""


def notified_run(tmp_path: Path, job: str, **values: Any) -> tuple[Any, list[dict[str, Any]]]:
    """A localhost run of ``job`` with the notify command; its result and every call."""
    script, calls = tmp_path / "notify.py", tmp_path / "calls.jsonl"
    script.write_text(NOTIFY)
    extra = {"tf_worker_base_dir": str(tmp_path / "host"), "tf_runs_dir": str(tmp_path / "runs"),
             "tf_train_script": str(JOBS / job), "tf_notify_command": [sys.executable, str(script), str(calls)],
             "tf_startup_timeout": 60, **values}  # fmt: skip
    result = helpers.run_playbook("train.yml", "--limit", "localhost", extra=extra, timeout=300)
    lines = calls.read_text().splitlines() if calls.exists() else []
    return result, [json.loads(line) for line in lines]


def test_a_run_that_succeeds_tells_started_then_succeeded(tmp_path: Path) -> None:
    result, calls = notified_run(tmp_path, "trivial_job.py", tf_run_id="notify-ok")
    assert result.returncode == 0, result.stdout[-3000:]
    run_dir = tmp_path / "runs" / "notify-ok"
    assert [c["argv"] for c in calls] == [["started", "notify-ok", str(run_dir)],
                                          ["succeeded", "notify-ok", str(run_dir / "summary.json")]]
    assert calls[1]["env"] == {"TF_RUNBOOK_EVENT": "succeeded", "TF_RUNBOOK_RUN_ID": "notify-ok",
                               "TF_RUNBOOK_SUMMARY": str(run_dir / "summary.json"), "TF_RUNBOOK_RUN_DIR": str(run_dir)}
    # The run id, once, on a line of its own, as soon as the run is claimed (issue 39).
    assert [line for line in result.stdout.splitlines() if "Run id:" in line] == ["Run id: notify-ok"]


def test_a_failed_run_tells_started_then_failed(tmp_path: Path) -> None:
    result, calls = notified_run(tmp_path, "import_error_job.py", tf_run_id="notify-bad")
    assert result.returncode == 2, result.stdout[-3000:]
    assert [c["argv"][0] for c in calls] == ["started", "failed"]
    assert json.loads((tmp_path / "runs" / "notify-bad" / "summary.json").read_text())["status"] == "failed"


def test_a_restart_is_told_and_a_broken_command_never_fails_the_run(tmp_path: Path) -> None:
    result, calls = notified_run(tmp_path, "preempted_once_job.py", tf_run_id="notify-again", tf_restart_attempts=1)
    assert result.returncode == 0, result.stdout[-3000:]
    assert [c["argv"][0] for c in calls] == ["started", "restarted", "succeeded"]
    # A command that fails, or outlives tf_notify_timeout, is one warning and the run goes on.
    broken = helpers.run_playbook("train.yml", "--limit", "localhost", timeout=300, extra={
        "tf_worker_base_dir": str(tmp_path / "host2"), "tf_runs_dir": str(tmp_path / "runs2"),
        "tf_train_script": str(JOBS / "trivial_job.py"), "tf_run_id": "notify-broken", "tf_notify_timeout": 1,
        "tf_notify_command": ["/bin/sh", "-c", 'echo "cannot reach the chat" >&2; [ "$0" = started ] && exit 1; sleep 30'],
    })  # fmt: skip
    assert broken.returncode == 0, broken.stdout[-3000:]
    assert "tf_notify_command for started exited 1: cannot reach the chat" in broken.stdout + broken.stderr
    assert "tf_notify_command for succeeded did not end within 1 s and was killed" in broken.stdout + broken.stderr
