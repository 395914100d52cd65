"""The job's wrapper (roles/tf_worker/files/tf_runbook_job.py) and the stacks it dumps
(tf_causes.parse_stacks), issue 23: the script runs as ``python script args`` would, and
a real-time signal writes every thread's stack without stopping the job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_causes, tf_run

WRAPPER = Path(__file__).resolve().parents[2] / "roles" / "tf_worker" / "files" / tf_run.JOB_WRAPPER

PROBE = """\
import json, os, sys
print(json.dumps({"name": __name__, "file": __file__, "argv": sys.argv, "path0": sys.path[0],
                  "main_file": sys.modules["__main__"].__file__, "cwd": os.getcwd()}))
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
"""
FAILING = """\
import sys
def load_batch():
    raise ModuleNotFoundError("No module named 'x'")
if __name__ == "__main__":
    load_batch()
"""
# Worker 1 of a hang: stuck in its own code while another thread waits too.
STUCK = """\
import os, sys, threading, time
def background():
    time.sleep(60)
def load_batch():
    open(sys.argv[1], "w").close()
    time.sleep(60)
def main():
    threading.Thread(target=background, daemon=True).start()
    load_batch()
if __name__ == "__main__":
    main()
"""


def run_both(tmp_path: Path, source: str, *args: str) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """The script run by the interpreter and through the wrapper, from another directory."""
    job = tmp_path / "job"
    job.mkdir(exist_ok=True)
    script = job / "train.py"
    script.write_text(source)
    cwd = tmp_path / "worker-0"
    cwd.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": ""}
    plain = subprocess.run([sys.executable, str(script), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    wrapped = subprocess.run(
        [sys.executable, str(WRAPPER), str(cwd / "stacks.txt"), str(tf_run.stacks_signal()), str(cwd / tf_run.JOB_END_FILE),
         str(script), *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return plain, wrapped


@pytest.mark.parametrize("status", ["0", "3"])
def test_the_script_sees_what_the_interpreter_gives_it(tmp_path: Path, status: str) -> None:
    plain, wrapped = run_both(tmp_path, PROBE, status, "--flag")
    assert (wrapped.returncode, wrapped.stdout) == (plain.returncode, plain.stdout)
    assert plain.returncode == int(status)
    assert '"name": "__main__"' in wrapped.stdout
    assert f'"path0": "{tmp_path / "job"}"' in wrapped.stdout


def test_an_uncaught_exception_is_the_scripts_own(tmp_path: Path) -> None:
    plain, wrapped = run_both(tmp_path, FAILING)
    assert wrapped.returncode == plain.returncode == 1
    assert wrapped.stderr == plain.stderr
    assert tf_run.JOB_WRAPPER not in wrapped.stderr and "runpy" not in wrapped.stderr
    assert wrapped.stderr.splitlines()[-1] == "ModuleNotFoundError: No module named 'x'"


def test_a_bad_command_line_is_refused(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(WRAPPER), "stacks.txt", "x", "end.json", "train.py"], capture_output=True, text=True)
    assert done.returncode == 2
    assert "usage:" in done.stderr


def test_the_signal_dumps_every_threads_stack_and_the_job_goes_on(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.py").write_text(STUCK)
    ready, stacks = tmp_path / "ready", tmp_path / "stacks.txt"
    proc = subprocess.Popen(
        [sys.executable, str(WRAPPER), str(stacks), str(tf_run.stacks_signal()), str(tmp_path / "end.json"),
         str(job / "train.py"), str(ready)]
    )
    try:
        end = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < end:
            time.sleep(0.05)
        assert ready.exists()
        time.sleep(0.2)
        os.kill(proc.pid, tf_run.stacks_signal())
        end = time.monotonic() + 5
        while "load_batch" not in stacks.read_text() and time.monotonic() < end:
            time.sleep(0.05)
        assert proc.poll() is None, "the dump must not end the job"
        text = stacks.read_text()
        assert text.count("(most recent call first)") == 2
        parsed = tf_causes.parse_stacks(text, str(job))
        assert parsed == {"where": "own-code", "frames": ["train.py:11 in <module>", "train.py:9 in main", "train.py:6 in load_batch"]}
    finally:
        proc.kill()
        proc.wait()


TF = "/venv/lib/python3.12/site-packages/tensorflow/python"
DUMP = f"""\
tf-runbook stacks of pid 77, main thread 0x00007f0000000001
Thread 0x00007f0000000002 (most recent call first):
  File "/usr/lib/python3.12/threading.py", line 355 in wait
  File "/job/loader.py", line 12 in prefetch

Current thread 0x00007f0000000001 (most recent call first):
  File "{TF}/eager/context.py", line 1552 in execute
  File "{TF}/ops/collective_ops.py", line 200 in all_reduce
  File "/job/pkg/model.py", line 30 in step
  File "/job/pkg/model.py", line 60 in epoch
  File "/job/pkg/model.py", line 61 in epoch
  File "/job/pkg/model.py", line 62 in epoch
  File "/job/train.py", line 41 in fit
  File "/job/train.py", line 90 in <module>
  File "<frozen runpy>", line 88 in _run_code
  File "/job/tf_runbook_job.py", line 57 in run
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (DUMP, {"where": "tensorflow", "frames": ["train.py:41 in fit", "pkg/model.py:62 in epoch",
                "pkg/model.py:61 in epoch", "pkg/model.py:60 in epoch", "pkg/model.py:30 in step"]}),
        # The main thread dumped twice: the last dump counts.
        (DUMP + "Current thread 0x00007f0000000001 (most recent call first):\n"
         '  File "/usr/lib/python3.12/queue.py", line 171 in get\n  File "/job/train.py", line 12 in load_batch\n',
         {"where": "own-code", "frames": ["train.py:12 in load_batch"]}),
        # No header: the last thread listed is the main one.
        ('Thread 0x1 (most recent call first):\n  File "/job/a.py", line 1 in f\n\n'
         'Thread 0x2 (most recent call first):\n  File "/job/b.py", line 2 in g\n', {"where": "own-code", "frames": ["b.py:2 in g"]}),
        (f'Thread 0x1 (most recent call first):\n  File "{TF}/x.py", line 1 in f\n', {"where": "tensorflow", "frames": []}),
        ("", {"where": "unknown", "frames": []}),
        ("Thread 0x1 (most recent call first):\n  <no Python frame>\n", {"where": "unknown", "frames": []}),
        # A file of a directory beside the job's is not the job's own.
        ('Thread 0x1 (most recent call first):\n  File "/job2/a.py", line 1 in f\n', {"where": "unknown", "frames": []}),
    ],
    ids=["in-a-collective", "last-dump", "no-header", "tensorflow-only", "empty", "no-frame", "sibling-dir"],
)  # fmt: skip
def test_parse_stacks(text: str, expected: dict[str, object]) -> None:
    assert tf_causes.parse_stacks(text, "/job") == expected


def test_the_stacks_signal_is_real_time_and_not_a_common_one() -> None:
    assert signal.SIGRTMIN < tf_run.stacks_signal() <= signal.SIGRTMAX


# --- tf_worker_stop: take every worker's stacks first, stop afterwards -------------------


def supervise_stuck(tmp_path: Path, source: str) -> tuple[Path, subprocess.Popen[str]]:
    """A supervisor running ``source`` as its job (worker 1), which writes ``ready`` into
    the worker directory once it is stuck."""
    from test_tf_supervisor import command, make_worker_dir

    wdir = make_worker_dir(tmp_path)
    job = wdir.parent / "job"
    job.mkdir()
    (job / "train.py").write_text(source)
    proc = subprocess.Popen(
        command(WRAPPER.with_name(tf_run.SUPERVISOR_FILE), wdir, job / "train.py", "--grace", "1",
                job_args=(str(wdir / "ready"),)),
        cwd=wdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    return wdir, proc


def test_the_stop_module_takes_the_stacks_without_stopping_then_stops(tmp_path: Path, reaper: None) -> None:
    import helpers
    from conftest import PLUGINS
    from test_tf_supervisor import read_json, wait_for

    stop_module = PLUGINS / "modules" / "tf_worker_stop.py"
    wdir, proc = supervise_stuck(tmp_path, STUCK)
    try:
        wait_for(wdir / "ready", timeout=30)
        taken = helpers.run_module(stop_module, {"run_dir": str(wdir.parent), "capture_stacks": True, "stop": False})
        assert taken["changed"] is False and taken["stopped"] == [], taken
        [entry] = taken["stacks"]
        assert (entry["dir"], entry["index"]) == (str(wdir), 1)
        assert entry["stacks"]["where"] == "own-code"
        assert entry["stacks"]["frames"][-1] == "train.py:6 in load_batch"
        assert proc.poll() is None, "taking the stacks must not stop the job"

        stopped = helpers.run_module(
            stop_module, {"run_dir": str(wdir.parent), "cause": "stalled", "reason": "no progress for 20 s", "grace": 1}
        )
        assert stopped["changed"] is True and stopped["stacks"] == []
        proc.wait(20)
    finally:
        if proc.poll() is None:
            proc.kill()
    exit_ = read_json(wdir / "exit.json")
    assert exit_["cause"]["kind"] == "stalled" and exit_["cause"]["detail"] == "no progress for 20 s"
    assert exit_["cause"]["stacks"]["frames"][-1] == "train.py:6 in load_batch"
    assert exit_["stacks"]["frames"] == entry["stacks"]["frames"]


def test_the_stacks_of_a_job_that_changed_its_directory_are_taken(tmp_path: Path, reaper: None) -> None:
    """Issue 38, point 2: many scripts start with os.chdir(os.path.dirname(__file__)); the
    job is told by its recorded group, whose keeper still works in the worker directory."""
    import helpers
    from conftest import PLUGINS
    from test_tf_supervisor import wait_for

    stop_module = PLUGINS / "modules" / "tf_worker_stop.py"
    wdir, proc = supervise_stuck(tmp_path, "import os\nos.chdir(os.path.dirname(os.path.abspath(__file__)))\n" + STUCK)
    try:
        wait_for(wdir / "ready", timeout=30)
        taken = helpers.run_module(stop_module, {"run_dir": str(wdir.parent), "capture_stacks": True, "stop": False})
        [entry] = taken["stacks"]
        assert entry["missing"] is None and entry["stacks"]["frames"][-1] == "train.py:8 in load_batch", entry
    finally:
        proc.kill()
        proc.wait(20)


def test_no_stacks_are_asked_of_a_job_without_the_wrapper(tmp_path: Path) -> None:
    """The stacks signal ends a process that did not register for it: a job started
    without the wrapper (an older deploy's) is never sent it."""
    from conftest import PLUGINS
    import helpers

    wdir = tmp_path / "worker-0"
    wdir.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], cwd=wdir, start_new_session=True)
    try:
        (wdir / "state.json").write_text(json.dumps({"pid": sleeper.pid, "pgid": sleeper.pid, "stacks_signal": None}))
        taken = helpers.run_module(
            PLUGINS / "modules" / "tf_worker_stop.py", {"run_dir": str(tmp_path), "capture_stacks": True, "stop": False}
        )
        assert taken["stacks"] == [
            {"dir": str(wdir), "index": 0, "stacks": None, "missing": "no stacks: the job runs without the wrapper"}
        ]
        time.sleep(0.3)
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_frames_named_through_a_symlink_are_the_jobs_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "real" / "job").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    text = (
        f'Thread 0x1 (most recent call first):\n  File "{tmp_path}/link/job/train.py", line 7 in step\n'
        '  File "<frozen runpy>", line 88 in _run_code\n'
    )
    monkeypatch.chdir(tmp_path / "real" / "job")  # a name that is no path must not resolve into the job
    assert tf_causes.parse_stacks(text, str(tmp_path / "real" / "job")) == {"where": "own-code", "frames": ["train.py:7 in step"]}
    assert tf_causes.parse_stacks(text, str(tmp_path / "link" / "job"))["frames"] == ["train.py:7 in step"]


def test_ctrl_c_ends_the_script_by_sigint_as_the_interpreter_does(tmp_path: Path) -> None:
    plain, wrapped = run_both(tmp_path, "def loop():\n    raise KeyboardInterrupt\nloop()\n")
    assert wrapped.returncode == plain.returncode == -signal.SIGINT
    assert wrapped.stderr == plain.stderr


OWN_UNAVAILABLE = """\
import logging, sys
class UnavailableError(Exception):
    pass
try:
    raise UnavailableError("the service is down")
except UnavailableError:
    logging.exception("retrying")
if sys.argv[1] == "raise":
    raise UnavailableError("gave up")
sys.exit(int(sys.argv[1]))
"""


@pytest.mark.parametrize(
    ("how", "status", "end"),
    [
        ("0", 0, {"exit": 0}),
        ("3", 3, {"exit": 3}),
        ("raise", 1, {"raised": {"type": "__main__.UnavailableError", "message": "gave up"}}),
    ],
)
def test_the_wrapper_records_how_the_scripts_python_ended(tmp_path: Path, how: str, status: int, end: dict) -> None:
    """Issue 37, point 5: the cause comes from the process: the job's own status or its
    uncaught exception's qualified class, recorded by the wrapper, never its log."""
    _plain, wrapped = run_both(tmp_path, OWN_UNAVAILABLE, how)
    assert wrapped.returncode == status
    assert json.loads((tmp_path / "worker-0" / tf_run.JOB_END_FILE).read_text()) == end
    assert not list((tmp_path / "worker-0").glob("*.tmp"))
