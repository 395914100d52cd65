"""tf_supervisor.py run for real, on tiny Python jobs instead of TensorFlow.

The supervisor polls every 0.2 s and the deadline cases take seconds each, so the runs
that need no interaction are all started at once by the module fixture ``runs``; each
test then waits for its own run and checks it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

import tf_supervisor
from helpers import pid_running, proc_stat, processes, wait_until

pytestmark = pytest.mark.usefixtures("reaper")

TF_CONFIG = {"cluster": {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}, "task": {"type": "worker", "index": 1}}

SLEEPER = """
import time
print("starting", flush=True)
time.sleep(30)
"""

# Ignores SIGTERM, starts a child that ignores it too, records both pids, then sleeps.
STUBBORN = """
import json, os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time\\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\\nwhile True: time.sleep(0.5)"])
with open("pids.json.tmp", "w") as handle:
    json.dump({"job": os.getpid(), "child": child.pid, "pgid": os.getpgrp()}, handle)
os.replace("pids.json.tmp", "pids.json")
print("ready", flush=True)
while True:
    time.sleep(0.5)
"""

RECORDER = """
import json, os, sys
with open("seen.json", "w") as handle:
    json.dump({"tf_config": os.environ.get("TF_CONFIG"), "cwd": os.getcwd(), "pid": os.getpid(),
               "pgid": os.getpgrp(), "sid": os.getsid(0), "argv": sys.argv[1:],
               "unbuffered": os.environ.get("PYTHONUNBUFFERED"),
               "grpc": os.environ.get("TF_GRPC_DEFAULT_OPTIONS")}, handle)
print("hello on stdout")
print("hello on stderr", file=sys.stderr)
"""

LEAVES_CHILD = """
import json, os, subprocess, sys
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time\\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\\ntime.sleep(30)"])
with open("pids.json", "w") as handle:
    json.dump({"child": child.pid, "pgid": os.getpgrp()}, handle)
"""

STARTUP = ("--startup-timeout", "1", "--startup-pattern", r"joined the\s+cluster", "--grace", "1")

# name: (job source, supervisor options, extra keyword arguments of ``start``)
SCENARIOS: dict[str, tuple[str, tuple[str, ...], dict[str, Any]]] = {
    "records": (RECORDER, (), {"job_args": ("--epochs", "3"), "relative": True}),
    "exit-3": ("import sys\nsys.exit(3)\n", (), {}),
    "exit-exception": ("raise SystemExit('boom')\n", (), {}),
    "exit-sigkill": ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", (), {}),
    "startup-never-joins": (SLEEPER, STARTUP, {}),
    "startup-joins-and-exits": ("print('worker 1 joined the cluster')\n", STARTUP, {}),
    "startup-joins-and-lingers": (
        "import time\nprint('worker 1 joined the  cluster', flush=True)\ntime.sleep(1.6)\n", STARTUP, {}
    ),
    "job-deadline": (
        "import time\nprint('joined', flush=True)\ntime.sleep(30)\n",
        ("--startup-timeout", "5", "--startup-pattern", "joined", "--job-timeout", "1", "--grace", "1"),
        {},
    ),
    "stubborn": (STUBBORN, ("--job-timeout", "1", "--grace", "1"), {}),
    "leaves-child": (LEAVES_CHILD, ("--grace", "1"), {}),
    # A long grace that nothing should wait for: the job ends by itself, or at the SIGTERM.
    "exits-long-grace": ("import json, time\njson.dump(time.time(), open('ended.json', 'w'))\n", ("--grace", "20"), {}),
    "stopped-long-grace": (SLEEPER, ("--job-timeout", "1", "--grace", "20"), {}),
    "no-interpreter": ("print('never')\n", (), {"python": "missing"}),
    "module-not-found": ("import json\nimport nonexistent_pkg_xyz\n", (), {}),
    # Issue 24, point 10: a job that writes a record's name in its working directory.
    "writes-state": (
        "import json, time\ntime.sleep(0.5)\njson.dump({'epoch': 3}, open('state.json', 'w'))\ntime.sleep(30)\n",
        ("--grace", "1"), {},
    ),
    "writes-exit": (
        "import json, time\njson.dump({'returncode': 0}, open('exit.json', 'w'))\ntime.sleep(30)\n", ("--grace", "1"), {}
    ),
    # Issue 38, point 1: a real-time signal, which signal.Signals does not name.
    "dies-of-rt-signal": ("import os, signal\nos.kill(os.getpid(), signal.SIGRTMIN + 5)\n", (), {}),
    # The common re-exec idiom drops the wrapper: the stacks signal would end the job.
    "reexec-deadline": (
        "import os, sys, time\nif '--again' not in sys.argv:\n    os.execv(sys.executable, [sys.executable, __file__, "
        "'--again'])\nprint('joined', flush=True)\ntime.sleep(30)\n",
        ("--job-timeout", "2", "--grace", "1"), {},
    ),
    "writes-stop": (
        "import json, time\njson.dump({'by': 'operator'}, open('stop.json', 'w'))\ntime.sleep(30)\n", ("--grace", "1"), {}
    ),
}


def job(tmp_path: Path, source: str, name: str = "job.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


def make_worker_dir(root: Path) -> Path:
    wdir = root / "runs" / "r1" / "worker-1"
    wdir.mkdir(parents=True)
    (wdir / "tf_config.json").write_text(json.dumps(TF_CONFIG) + "\n", encoding="utf-8")
    return wdir


@pytest.fixture
def worker_dir(tmp_path: Path) -> Path:
    return make_worker_dir(tmp_path)


def command(
    supervisor: Path, worker_dir: Path | str, script: Path, *options: str, python: str = sys.executable,
    job_args: tuple[str, ...] = (),
) -> list[str]:
    return [
        sys.executable, str(supervisor), "--worker-dir", str(worker_dir), "--python", python,
        "--script", str(script), *options, "--", *job_args,
    ]  # fmt: skip


@dataclass
class Run:
    """One supervisor run in the background."""

    root: Path
    worker_dir: Path
    python: str
    proc: subprocess.Popen[str]
    started: float
    ended: float = 0.0
    stderr: str = ""
    thread: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._collect, daemon=True)
        self.thread.start()

    def _collect(self) -> None:
        _, self.stderr = self.proc.communicate()
        self.ended = time.monotonic()

    def finish(self, timeout: float = 30.0) -> "Run":
        self.thread.join(timeout)
        if self.thread.is_alive():
            self.proc.kill()
            pytest.fail(f"supervisor in {self.worker_dir} did not finish within {timeout} s")
        return self

    @property
    def returncode(self) -> int:
        assert self.proc.returncode is not None
        return self.proc.returncode

    @property
    def elapsed(self) -> float:
        return self.ended - self.started

    def json(self, name: str) -> dict[str, Any]:
        return read_json(self.worker_dir / name)


def start(supervisor: Path, root: Path, source: str, *options: str, python: str = sys.executable,
          job_args: tuple[str, ...] = (), relative: bool = False) -> Run:  # fmt: skip
    """Start the supervisor on a fresh worker dir under ``root``."""
    wdir = make_worker_dir(root)
    script = job(root, source)
    if python == "missing":
        python = str(root / "no-such-venv" / "bin" / "python3")
    # A relative --worker-dir, with the supervisor started elsewhere, checks that the job
    # still runs in the worker directory.
    target: Path | str = os.path.relpath(wdir, root) if relative else wdir
    proc = subprocess.Popen(
        command(supervisor, target, script, *options, python=python, job_args=job_args),
        cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    return Run(root, wdir, python, proc, time.monotonic())


@pytest.fixture(scope="module")
def runs(supervisor_path: Path, tmp_path_factory: pytest.TempPathFactory, reaper: None) -> Iterator[dict[str, Run]]:
    started = {
        name: start(supervisor_path, tmp_path_factory.mktemp(name), source, *options, **kwargs)
        for name, (source, options, kwargs) in SCENARIOS.items()
    }
    yield started
    for run in started.values():
        if run.proc.poll() is None:
            run.proc.kill()
        run.thread.join(5)


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def wait_for(path: Path, text: str | None = None, timeout: float = 10.0) -> None:
    wait_until(
        lambda: path.exists() and (text is None or text in path.read_text(encoding="utf-8")),
        timeout, f"{path} to appear (with {text!r})",
    )  # fmt: skip


def group_members(pgid: int) -> list[str]:
    members = []
    for pid in processes():
        stat = proc_stat(pid)
        if stat is not None and int(stat[1][2]) == pgid:
            members.append(f"{pid} state={stat[1][0]} {stat[0]}")
    return members


def assert_group_gone(pgid: int, timeout: float = 2.0) -> None:
    """Nothing of the process group may survive (zombies are reaped by the reaper)."""
    end = time.monotonic() + timeout
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        if time.monotonic() > end:
            pytest.fail(f"process group {pgid} survived: {group_members(pgid)}")
        time.sleep(0.02)


# --- (a) environment, cwd, log, records ------------------------------------------------


def test_job_gets_tf_config_cwd_log_and_records(runs: dict[str, Run]) -> None:
    run = runs["records"].finish()
    assert run.returncode == 0, run.stderr
    wdir = run.worker_dir

    seen = read_json(wdir / "seen.json")
    config_text = (wdir / "tf_config.json").read_text(encoding="utf-8")
    assert seen["tf_config"] == config_text.rstrip("\n")
    assert json.loads(seen["tf_config"]) == TF_CONFIG
    assert seen["cwd"] == str(wdir.resolve())
    assert seen["argv"] == ["--epochs", "3"]
    assert seen["unbuffered"] == "1"
    assert seen["grpc"] == "grpc.initial_reconnect_backoff_ms=50"

    log = (wdir / "worker.log").read_text(encoding="utf-8")
    assert "hello on stdout" in log
    assert "hello on stderr" in log

    state = run.json("state.json")
    assert state["supervisor_pid"] == run.proc.pid
    assert state["pid"] == seen["pid"]
    assert state["pgid"] == seen["pgid"] == seen["pid"] == seen["sid"]
    assert "TF_CONFIG" not in json.dumps(state["argv"]) and "127.0.0.1:2222" not in json.dumps(state["argv"])

    exit_ = run.json("exit.json")
    assert exit_["returncode"] == 0
    assert exit_["reason"] == "exited"
    assert exit_["signal"] is None
    assert exit_["started_at"] <= exit_["finished_at"]
    assert not list(wdir.glob(".*.tmp"))


# --- (b) exit status -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "returncode", "signame", "kind"),
    [("exit-3", 3, None, "job-error"), ("exit-exception", 1, None, "job-error"), ("exit-sigkill", 137, "SIGKILL", "killed"),
     ("module-not-found", 1, None, "job-error")],
)  # fmt: skip
def test_exit_status_of_the_job(runs: dict[str, Run], name: str, returncode: int, signame: str | None, kind: str) -> None:
    run = runs[name].finish()
    assert run.returncode == returncode, run.stderr
    exit_ = run.json("exit.json")
    assert exit_["returncode"] == returncode
    assert exit_["signal"] == signame
    assert exit_["reason"] == "exited"
    assert exit_["cause"]["kind"] == kind, exit_["cause"]
    assert "stacks" not in exit_


@pytest.mark.parametrize(
    ("name", "record"),
    [("writes-state", "state.json"), ("writes-exit", "exit.json"), ("writes-stop", "stop.json")],
)
def test_a_job_that_writes_a_records_name_fails_with_that_reason(runs: dict[str, Run], name: str, record: str) -> None:
    """Issue 24, point 10: the job's own state.json or exit.json would fake an exit or hide
    the process group from a stop; the supervisor stops the job and says why."""
    run = runs[name].finish()
    exit_ = run.json("exit.json")
    assert exit_["stopped_by"] == "supervisor" and exit_["returncode"] != 0, exit_
    assert exit_["reason"].startswith(f"the job wrote {record} into its working directory"), exit_["reason"]
    assert exit_["cause"]["kind"] == "job-error"
    assert run.ended - run.started < 25  # stopped at once, not at the end of its 30 s sleep


def test_a_job_error_is_named_by_its_exception(runs: dict[str, Run]) -> None:
    cause = runs["module-not-found"].finish().json("exit.json")["cause"]
    assert cause == {
        "kind": "job-error", "detail": "ModuleNotFoundError: No module named 'nonexistent_pkg_xyz'",
        "exception": "ModuleNotFoundError", "message": "No module named 'nonexistent_pkg_xyz'",
        "exception_type": "ModuleNotFoundError", "from": "the job's wrapper",
    }  # fmt: skip


def test_a_job_dead_of_a_real_time_signal_has_its_exit_record(runs: dict[str, Run]) -> None:
    exit_ = runs["dies-of-rt-signal"].finish().json("exit.json")
    assert exit_["signal"] == "SIGRTMIN+5" and exit_["returncode"] == 128 + signal.SIGRTMIN + 5
    assert exit_["cause"]["kind"] == "unknown" and "SIGRTMIN+5" in exit_["cause"]["detail"]


def test_a_job_without_the_wrapper_gets_no_stacks_signal_at_its_deadline(runs: dict[str, Run]) -> None:
    exit_ = runs["reexec-deadline"].finish().json("exit.json")
    assert (exit_["stopped_by"], exit_["cause"]["kind"]) == ("job-deadline", "deadline"), exit_
    assert exit_["signal"] in (None, "SIGTERM"), exit_
    assert exit_["stacks"]["missing"].startswith("no stacks: the job runs without the wrapper"), exit_


def test_only_the_supervisors_exit_record_carries_its_nonce(runs: dict[str, Run]) -> None:
    run = runs["exit-3"].finish()
    nonce = run.json("state.json")["nonce"]
    assert isinstance(nonce, str) and len(nonce) >= 32
    assert run.json("exit.json")["nonce"] == nonce
    assert run.json("job_end.json") == {"exit": 3}


def test_a_sigkill_nobody_sent_carries_the_oom_count(runs: dict[str, Run]) -> None:
    cause = runs["exit-sigkill"].finish().json("exit.json")["cause"]
    assert cause["signal"] == "SIGKILL"
    assert cause["oom_kills"] == 0 or cause["oom_kills"] is None


# --- (c) startup deadline --------------------------------------------------------------


def test_startup_deadline_kills_a_job_that_never_joins(runs: dict[str, Run]) -> None:
    run = runs["startup-never-joins"].finish()
    # The job would run 30 s or more: well under that proves the deadline, with room for a
    # loaded machine's slow interpreter start.
    assert run.elapsed < 15, f"took {run.elapsed:.1f} s"
    exit_ = run.json("exit.json")
    assert "startup deadline of 1 s passed" in exit_["reason"]
    assert exit_["returncode"] == run.returncode == 128 + signal.SIGTERM
    assert exit_["signal"] == "SIGTERM"
    assert exit_["joined"] is False
    assert exit_["cause"]["kind"] == "startup"
    assert_group_gone(run.json("state.json")["pgid"])


@pytest.mark.parametrize("name", ["startup-joins-and-exits", "startup-joins-and-lingers"])
def test_job_that_prints_the_startup_pattern_is_not_killed(runs: dict[str, Run], name: str) -> None:
    """Once the pattern appeared, the startup deadline no longer applies."""
    run = runs[name].finish()
    exit_ = run.json("exit.json")
    assert run.returncode == 0, exit_
    assert exit_["returncode"] == 0
    assert exit_["reason"] == "exited"
    assert exit_["joined"] is True


# --- (d) job deadline ------------------------------------------------------------------


def test_job_deadline(runs: dict[str, Run]) -> None:
    run = runs["job-deadline"].finish()
    # The job would run 30 s or more: well under that proves the deadline, with room for a
    # loaded machine's slow interpreter start.
    assert run.elapsed < 15, f"took {run.elapsed:.1f} s"
    exit_ = run.json("exit.json")
    assert exit_["reason"] == "job deadline of 1 s passed"
    assert exit_["returncode"] == run.returncode == 143
    assert exit_["joined"] is True
    assert_group_gone(run.json("state.json")["pgid"])
    # The stacks were taken before the stop: where the job was when its deadline passed.
    assert exit_["cause"]["kind"] == "deadline"
    stacks = exit_["stacks"]
    assert (stacks["file"], stacks["where"], stacks["frames"]) == ("stacks.txt", "own-code", ["job.py:3 in <module>"])
    assert exit_["cause"]["stacks"] == stacks
    assert "time.sleep" not in stacks["frames"] and "(most recent call first)" in (run.worker_dir / "stacks.txt").read_text()


# --- (e) a job that ignores SIGTERM ----------------------------------------------------


def test_job_ignoring_sigterm_and_its_child_are_killed_after_grace(runs: dict[str, Run]) -> None:
    run = runs["stubborn"].finish()
    pids = run.json("pids.json")
    assert run.json("state.json")["pgid"] == pids["pgid"]
    assert_group_gone(pids["pgid"])
    for pid in (pids["job"], pids["child"]):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    exit_ = run.json("exit.json")
    assert exit_["reason"] == "job deadline of 1 s passed"
    assert exit_["signal"] == "SIGKILL"
    assert exit_["returncode"] == run.returncode == 137
    assert 2.0 <= run.elapsed < 12, f"took {run.elapsed:.1f} s: the grace period was not honoured"
    assert exit_["cause"]["kind"] == "deadline" and exit_["stacks"]["frames"]


def test_children_left_by_a_finished_job_do_not_outlive_it(runs: dict[str, Run]) -> None:
    run = runs["leaves-child"].finish()
    assert run.returncode == 0, run.stderr
    assert_group_gone(run.json("pids.json")["pgid"])
    exit_ = run.json("exit.json")
    assert (exit_["returncode"], exit_["reason"]) == (0, "exited")


def test_a_finished_job_is_recorded_without_waiting_for_the_grace(runs: dict[str, Run]) -> None:
    # The keeper, which blocks SIGTERM, stayed in the group after the job's exit, and the
    # supervisor waited the whole grace for it: two seconds added to every run's end.
    run = runs["exits-long-grace"].finish()
    assert run.returncode == 0, run.stderr
    exit_ = run.json("exit.json")
    assert (exit_["returncode"], exit_["reason"]) == (0, "exited")
    # From the job's last statement to the record: the supervisor's poll (0.2 s, more on a
    # loaded machine), not the 20 s grace it would give leftovers after a finished job.
    late = exit_["finished_at"] - run.json("ended.json")
    assert late < 5, f"recorded {late:.1f} s after the job ended: the supervisor waited for its keeper"
    assert_group_gone(run.json("state.json")["pgid"])


def test_a_job_that_ends_at_the_sigterm_is_not_waited_for_until_the_grace(runs: dict[str, Run]) -> None:
    run = runs["stopped-long-grace"].finish()
    exit_ = run.json("exit.json")
    assert exit_["reason"] == "job deadline of 1 s passed"
    assert exit_["signal"] == "SIGTERM", "the job should have ended at the SIGTERM, not at a SIGKILL"
    assert run.elapsed < 12, f"took {run.elapsed:.1f} s with a grace of 20 s"
    assert_group_gone(run.json("state.json")["pgid"])


# --- (h) an interpreter that does not exist --------------------------------------------


def test_missing_interpreter_gives_127_and_exit_json(runs: dict[str, Run]) -> None:
    run = runs["no-interpreter"].finish()
    assert run.returncode == 127, run.stderr
    exit_ = run.json("exit.json")
    assert exit_["returncode"] == 127
    assert exit_["reason"].startswith("cannot start the job")
    assert exit_["cause"]["kind"] == "startup"
    assert run.python in exit_["reason"]
    assert exit_["joined"] is False
    log = (run.worker_dir / "worker.log").read_text(encoding="utf-8")
    assert f"supervisor: cannot start {run.python}" in log
    assert not (run.worker_dir / "state.json").exists()


# --- (f) signals to the supervisor -----------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_supervisor_stops_the_job(supervisor_path: Path, tmp_path: Path, sig: signal.Signals) -> None:
    run = start(supervisor_path, tmp_path, "import time\nprint('ready', flush=True)\ntime.sleep(30)\n", "--grace", "1")
    try:
        wait_for(run.worker_dir / "state.json")
        wait_for(run.worker_dir / "worker.log", "ready")
        run.proc.send_signal(sig)
        run.finish(10)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    assert_group_gone(run.json("state.json")["pgid"])
    exit_ = run.json("exit.json")
    assert exit_["reason"] == f"stopped by signal {sig.name}"
    assert exit_["returncode"] == run.returncode == 143
    assert exit_["signal"] == "SIGTERM"
    # A signal from outside the runbook: a preemption, or a host's shutdown.
    assert exit_["cause"]["kind"] == "preempted"


def test_a_stop_requests_cause_is_recorded(supervisor_path: Path, tmp_path: Path) -> None:
    run = start(supervisor_path, tmp_path, "import time\nprint('ready', flush=True)\ntime.sleep(30)\n", "--grace", "1")
    try:
        wait_for(run.worker_dir / "worker.log", "ready")
        (run.worker_dir / "stop.json").write_text(
            json.dumps({"by": "runbook", "reason": "no worker printed progress for 20 s", "cause": "stalled"})
        )
        run.proc.send_signal(signal.SIGTERM)
        run.finish(10)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    exit_ = run.json("exit.json")
    assert exit_["stopped_by"] == "runbook"
    assert exit_["cause"] == {"kind": "stalled", "detail": "no worker printed progress for 20 s"}


def test_state_json_says_where_the_training_stands_while_it_runs(supervisor_path: Path, tmp_path: Path) -> None:
    """Issue 39: status.yml and the wait read each epoch's end, timed by the supervisor,
    from state.json's ``progress`` while the job runs (tf_metrics.progress_of)."""
    source = (
        "import time\nprint('worker=1 cluster_workers=2 replicas=2 epochs=4', flush=True)\n"
        "for e in (1, 2):\n    time.sleep(0.3)\n    print(f'worker=1 epoch={e}/4 loss=0.{9 - e}', flush=True)\n"
        "open('printed', 'w').close()\ntime.sleep(30)\n"
    )
    run = start(supervisor_path, tmp_path, source, "--grace", "1")
    try:
        wait_until(
            lambda: ((read_json(run.worker_dir / "state.json") if (run.worker_dir / "state.json").exists() else {})
                     .get("progress") or {}).get("epoch") == 2,
            10, "state.json's progress at epoch 2",
        )  # fmt: skip
        progress = run.json("state.json")["progress"]
        run.proc.send_signal(signal.SIGTERM)
        run.finish(10)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    assert (progress["format"], progress["epoch"], progress["total"], progress["epochs"]) == ("contract", 2, 4, 2)
    assert progress["metrics"] == [["loss", "0.7"]]
    assert progress["joined_at"] < progress["first_at"] == progress["prev_at"] < progress["last_at"]


# --- preemption (issue 23 point 4) --------------------------------------------------------

# Saves as TensorFlow's PreemptionCheckpointHandler does on SIGTERM: notes each SIGTERM,
# "saves" for a second, exits 42. Its child notes whether it is still alive after the save.
PREEMPTIBLE = """
import os, signal, sys, time
def on_term(signum, frame):
    with open("terms.txt", "a") as handle:
        handle.write("SIGTERM\\n")
    time.sleep(1.0)
    open("saved", "w").close()
    sys.exit(42)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
time.sleep(60)
"""


def preemptible(supervisor_path: Path, tmp_path: Path) -> Run:
    run = start(supervisor_path, tmp_path, PREEMPTIBLE, "--grace", "5")
    wait_for(run.worker_dir / "worker.log", "ready", timeout=20)
    return run


def assert_preempted(run: Run) -> dict[str, Any]:
    exit_ = run.json("exit.json")
    assert (run.worker_dir / "saved").exists(), "the save was cut short"
    assert (run.worker_dir / "terms.txt").read_text() == "SIGTERM\n", "the job must get exactly one SIGTERM"
    assert exit_["returncode"] == run.returncode == 42, exit_
    assert exit_["cause"]["kind"] == "preempted", exit_["cause"]
    assert_group_gone(run.json("state.json")["pgid"])
    return exit_


def test_a_sigterm_to_the_supervisor_alone_is_forwarded_once_and_the_save_finishes(
    supervisor_path: Path, tmp_path: Path
) -> None:
    run = preemptible(supervisor_path, tmp_path)
    try:
        run.proc.send_signal(signal.SIGTERM)
        run.finish(20)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    assert assert_preempted(run)["stopped_by"] == "signal"


def test_a_sigterm_to_every_process_of_the_host_lets_the_job_save(supervisor_path: Path, tmp_path: Path) -> None:
    """As a shutdown does: the job's group (the keeper included) and the supervisor all get
    SIGTERM; the supervisor does not add a second one, the keeper survives the save."""
    run = preemptible(supervisor_path, tmp_path)
    state = run.json("state.json")
    try:
        os.killpg(state["pgid"], signal.SIGTERM)
        run.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert pid_running(state["keeper_pid"]), "the keeper must not die of SIGTERM"
        run.finish(20)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    assert assert_preempted(run)["stopped_by"] == "signal"
    assert run.elapsed >= 1.0


def test_a_sigterm_to_the_job_alone_is_a_preemption(supervisor_path: Path, tmp_path: Path) -> None:
    run = preemptible(supervisor_path, tmp_path)
    try:
        os.kill(run.json("state.json")["pid"], signal.SIGTERM)
        run.finish(20)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    assert assert_preempted(run)["stopped_by"] is None


# --- (g) never twice in one worker directory -------------------------------------------


def test_second_run_in_the_same_worker_dir_is_refused(supervisor_path: Path, worker_dir: Path, tmp_path: Path) -> None:
    script = job(tmp_path, "open('runs.txt', 'a').write('ran\\n')\nprint('first')\n")

    def supervise() -> subprocess.CompletedProcess[str]:
        return subprocess.run(command(supervisor_path, worker_dir, script), capture_output=True, text=True, timeout=30)

    assert supervise().returncode == 0
    records = {name: (worker_dir / name).read_bytes() for name in ("exit.json", "state.json", "worker.log")}
    mtime = (worker_dir / "exit.json").stat().st_mtime_ns

    second = supervise()
    assert second.returncode == 97
    assert f"{worker_dir}: this worker was already launched" in second.stderr
    assert {name: (worker_dir / name).read_bytes() for name in records} == records
    assert (worker_dir / "exit.json").stat().st_mtime_ns == mtime
    assert (worker_dir / "runs.txt").read_text() == "ran\n"


def test_run_is_refused_while_an_earlier_one_holds_state(supervisor_path: Path, worker_dir: Path, tmp_path: Path) -> None:
    (worker_dir / "state.json").write_text('{"pid": 1, "pgid": 1, "supervisor_pid": 1}\n', encoding="utf-8")
    script = job(tmp_path, "open('runs.txt', 'a').write('ran\\n')\n")
    proc = subprocess.run(command(supervisor_path, worker_dir, script), capture_output=True, text=True, timeout=30)
    assert proc.returncode == 97
    assert not (worker_dir / "exit.json").exists()
    assert not (worker_dir / "worker.log").exists()
    assert not (worker_dir / "runs.txt").exists()


# --- issue 24 point 15: a startup pattern that begins with "--" ---------------------------


def test_a_startup_pattern_that_looks_like_an_option_is_passed_whole() -> None:
    args = tf_supervisor.parse_args(["--worker-dir", "w", "--python", "p", "--script", "s", "--startup-pattern=--joined", "--"])
    assert args.startup_pattern == "--joined"
    with pytest.raises(SystemExit):  # the old way: the parser takes it for an option
        tf_supervisor.parse_args(["--worker-dir", "w", "--python", "p", "--script", "s", "--startup-pattern", "--joined"])


def test_the_launch_passes_the_startup_pattern_glued_to_its_option() -> None:
    tasks = (Path(__file__).resolve().parents[2] / "roles" / "tf_launch" / "tasks" / "main.yml").read_text(encoding="utf-8")
    # The pattern is tf_startup_pattern, or a ParameterServerStrategy server's (tf_launch_entry).
    assert "'--startup-pattern=' ~ __tf_launch_entry.startup_pattern," in tasks
    assert "'--startup-pattern', " not in tasks


def test_a_stop_records_when_it_began(runs: dict[str, Run]) -> None:
    """exit.json's stopped_at: the verdict compares it with the time of training_complete
    (issue 38, point 23); a job that ended by itself has none."""
    exit_ = runs["job-deadline"].finish().json("exit.json")
    assert exit_["started_at"] < exit_["stopped_at"] <= exit_["finished_at"], exit_
    assert "stopped_at" not in runs["exit-3"].finish().json("exit.json")
