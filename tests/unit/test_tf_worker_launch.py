"""tf_worker_launch (issue 13): every slot of a host started in one module run, detached,
then checked; a supervisor that dies at once is a failure naming its host and slot."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import helpers
import pytest
from conftest import PLUGINS

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_worker_start import (
    deployed_args,
    launch,
    launch_slots,
    plan,
    refusals,
)

MODULE = PLUGINS / "modules" / "tf_worker_launch.py"

# Plays tf_supervisor.py: notes when it started, then does what the worker directory's
# ``mode`` file says: "ok" records its state, "slow:<s>" records it after <s> seconds,
# "silent" never records it, "die" writes to stderr and exits 3 at once, "refuse" writes
# exit.json as the supervisor does when it refuses its arguments. It then stays alive.
FAKE = """
import json, os, sys, time
args = sys.argv[1:]
wdir = args[args.index("--worker-dir") + 1]
assert os.getcwd() == os.path.realpath(wdir), (os.getcwd(), wdir)
with open("started", "w") as handle:
    handle.write(repr(time.time()))
mode = open("mode").read().strip() if os.path.exists("mode") else "ok"
print("fake supervisor", " ".join(args))
sys.stdout.flush()
if mode == "die":
    print("fake: cannot import the job: boom", file=sys.stderr)
    sys.exit(3)
if mode == "refuse":
    with open("exit.json", "w") as handle:
        json.dump({"returncode": 2, "reason": "refused to start: --grace must be 0 or more seconds"}, handle)
    print("refused to start: --grace must be 0 or more seconds", file=sys.stderr)
    sys.exit(2)
if mode.startswith("slow:"):
    time.sleep(float(mode[5:]))
if mode != "silent":
    with open("state.json.tmp", "w") as handle:
        json.dump({"supervisor_pid": os.getpid(), "at": time.time()}, handle)
    os.replace("state.json.tmp", "state.json")
time.sleep(60)
"""


@pytest.fixture
def fake(tmp_path: Path) -> Path:
    path = tmp_path / "fake_supervisor.py"
    path.write_text(FAKE)
    return path


@pytest.fixture
def pids(reaper: None) -> Iterator[list[int]]:
    """Pids of the fake supervisors a test started: killed at its end (the reaper reaps
    the ones started by a module process, which are orphans by then)."""
    started: list[int] = []
    yield started
    for pid in started:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def worker_dirs(tmp_path: Path, *modes: str) -> dict[str, str]:
    """One worker directory per mode, indices 0..n-1."""
    dirs = {}
    for index, mode in enumerate(modes):
        wdir = tmp_path / "run" / f"worker-{index}"
        wdir.mkdir(parents=True)
        (wdir / "mode").write_text(mode)
        dirs[str(index)] = str(wdir)
    return dirs


def slots_of(dirs: dict[str, str], fake: Path, args: list[str] | None = None) -> list[dict[str, Any]]:
    workers = [{"index": int(i), "endpoint": f"127.0.0.1:{2222 + int(i)}"} for i in dirs]
    return plan(workers, dirs, sys.executable, str(fake), args or ["--python", "py", "--", "--epochs", "2"])


# --- plan and refusals ------------------------------------------------------------------


def test_plan_gives_each_slot_todays_argv_in_index_order() -> None:
    dirs = {"0": "/r/worker-0", "10": "/r/worker-10", "2": "/r/worker-2"}
    workers = [{"index": 10}, {"index": "2"}, {"index": 0}]
    slots = plan(workers, dirs, "/venv/bin/python", "/r/job/tf_supervisor.py", ["--attempt", 1, "--", "-x"])
    assert [slot["index"] for slot in slots] == [0, 2, 10]
    assert slots[1] == {
        "index": 2,
        "dir": "/r/worker-2",
        "argv": ["/venv/bin/python", "/r/job/tf_supervisor.py", "--worker-dir", "/r/worker-2", "--attempt", "1", "--",
                 "-x"],
    }  # fmt: skip


def test_plan_refuses_a_worker_without_a_directory() -> None:
    with pytest.raises(ValueError, match=r"worker 3 has no directory in dirs \(\['0'\]\)"):
        plan([{"index": 0}, {"index": 3}], {"0": "/r/worker-0"}, "py", "sup", [])


def test_refusals_name_a_missing_or_already_launched_directory(tmp_path: Path) -> None:
    dirs = worker_dirs(tmp_path, "ok", "ok")
    Path(dirs["1"], "exit.json").write_text("{}")
    slots = plan([{"index": 0}, {"index": 1}, {"index": 2}], {**dirs, "2": str(tmp_path / "gone")}, "py", "s", [])
    assert refusals(slots) == [
        f"worker 1: {dirs['1']} was already launched (exit.json)",
        f"worker 2: {tmp_path / 'gone'} is not a directory",
    ]


# --- launch -------------------------------------------------------------------------------


def test_every_slot_starts_detached_in_its_directory(tmp_path: Path, fake: Path, pids: list[int]) -> None:
    dirs = worker_dirs(tmp_path, "ok", "ok")
    results, failures = launch(slots_of(dirs, fake), settle=10)
    pids.extend(r["supervisor_pid"] for r in results)
    assert failures == []
    assert [(r["index"], r["dir"], r["recorded"]) for r in results] == [(0, dirs["0"], True), (1, dirs["1"], True)]
    for result in results:
        pid = result["supervisor_pid"]
        assert json.loads(Path(result["dir"], "state.json").read_text())["supervisor_pid"] == pid
        # Its own session, stdin from /dev/null, stdout and stderr to supervisor.out.
        assert os.getsid(pid) == pid != os.getsid(0)
        assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"
        out = str(Path(result["dir"], "supervisor.out"))
        assert os.readlink(f"/proc/{pid}/fd/1") == os.readlink(f"/proc/{pid}/fd/2") == out
        assert sorted(os.listdir(f"/proc/{pid}/fd"))[:3] == ["0", "1", "2"]
        assert f"--worker-dir {result['dir']} --python py -- --epochs 2" in Path(out).read_text()


def test_no_slot_waits_for_another_to_record_its_state(tmp_path: Path, fake: Path, pids: list[int]) -> None:
    """Slot 0 takes 1.5 s to record its state: slot 1 was started long before that."""
    dirs = worker_dirs(tmp_path, "slow:1.5", "ok")
    results, failures = launch(slots_of(dirs, fake), settle=10)
    pids.extend(r["supervisor_pid"] for r in results)
    assert failures == [] and all(r["recorded"] for r in results)
    started = [float(Path(dirs[i], "started").read_text()) for i in ("0", "1")]
    recorded_0 = json.loads(Path(dirs["0"], "state.json").read_text())["at"]
    assert started[1] < recorded_0 - 1.0


def test_a_supervisor_that_dies_at_once_fails_naming_its_slot(tmp_path: Path, fake: Path, pids: list[int]) -> None:
    dirs = worker_dirs(tmp_path, "ok", "die", "refuse")
    results, failures = launch(slots_of(dirs, fake), settle=10)
    pids.extend(r["supervisor_pid"] for r in results)
    # The healthy slot was started and recorded all the same.
    assert results[0]["recorded"] is True and Path(dirs["0"], "state.json").exists()
    assert results[0]["error"] is None and failures[0].endswith(results[1]["error"])
    assert len(failures) == 2
    # The status is the exit code, or 0 when this test process's reaper (the `pids`
    # fixture's subreaper thread) collected the child before the launch polled it.
    assert re.match(rf"worker 1 \({re.escape(dirs['1'])}\): the supervisor ended at once \(status (3|0)\): it recorded no state",
                    failures[0]), failures[0]
    assert failures[0].endswith("fake: cannot import the job: boom")
    assert re.match(rf"worker 2 \({re.escape(dirs['2'])}\): the supervisor ended at once \(status (2|0)\): "
                    r"refused to start: --grace must be", failures[1]), failures[1]


def test_a_supervisor_still_starting_after_the_settle_time_counts_as_started(
    tmp_path: Path, fake: Path, pids: list[int]
) -> None:
    dirs = worker_dirs(tmp_path, "silent")
    begun = time.monotonic()
    results, failures = launch(slots_of(dirs, fake), settle=0.5)
    pids.extend(r["supervisor_pid"] for r in results)
    assert time.monotonic() - begun < 5
    assert failures == [] and results[0]["recorded"] is False
    assert helpers.pid_running(results[0]["supervisor_pid"])


def test_an_interpreter_that_cannot_run_fails_the_slot(tmp_path: Path, fake: Path) -> None:
    dirs = worker_dirs(tmp_path, "ok")
    slots = plan([{"index": 0}], dirs, str(tmp_path / "no-python"), str(fake), [])
    results, failures = launch(slots, settle=1)
    assert results[0]["supervisor_pid"] is None and results[0]["error"].startswith("the supervisor could not be")
    assert failures == [f"worker 0 ({dirs['0']}): the supervisor could not be started: [Errno 2] No such file or "
                        f"directory: '{tmp_path / 'no-python'}'"]  # fmt: skip


# --- the module, as Ansible runs it -----------------------------------------------------


def module_args(dirs: dict[str, str], fake: Path) -> dict[str, Any]:
    return {
        "launch": {
            "workers": [{"index": int(i)} for i in dirs],
            "dirs": dirs,
            "python": sys.executable,
            "supervisor": str(fake),
            "args": ["--python", "py", "--"],
        },
        "host": "node-a",
    }


def test_the_module_returns_while_its_supervisors_live_on(tmp_path: Path, fake: Path, pids: list[int]) -> None:
    """run_module reads the module's stdout to its end: a supervisor that kept it open
    would hold the call for the fake's 60 s."""
    dirs = worker_dirs(tmp_path, "ok", "ok")
    begun = time.monotonic()
    result = helpers.run_module(MODULE, module_args(dirs, fake))
    pids.extend(w["supervisor_pid"] for w in result.get("workers", []))
    assert time.monotonic() - begun < 20, "the module did not return while its supervisors run"
    assert result.get("failed") is not True and result["changed"] is True, result
    assert [w["index"] for w in result["workers"]] == [0, 1]
    assert all(helpers.pid_running(w["supervisor_pid"]) for w in result["workers"])
    # Their parent is the module's waiter, in a session of its own, alive after the
    # module ended: it reaps a supervisor the moment it ends (no zombie left to init).
    parents = {int(helpers.proc_stat(w["supervisor_pid"])[1][1]) for w in result["workers"]}
    assert len(parents) == 1
    (waiter,) = parents
    assert waiter not in (1, os.getpid()) and helpers.pid_running(waiter) and os.getsid(waiter) == waiter
    os.kill(result["workers"][0]["supervisor_pid"], signal.SIGKILL)
    deadline = time.monotonic() + 5
    while helpers.proc_stat(result["workers"][0]["supervisor_pid"]) is not None:
        assert time.monotonic() < deadline, "the killed supervisor was not reaped"
        time.sleep(0.02)
    os.kill(result["workers"][1]["supervisor_pid"], signal.SIGKILL)
    deadline = time.monotonic() + 5
    while helpers.pid_running(waiter):
        assert time.monotonic() < deadline, "the waiter did not end with its last supervisor"
        time.sleep(0.02)


def test_the_module_reports_a_failed_slot_naming_host_and_slot(tmp_path: Path, fake: Path, pids: list[int]) -> None:
    """The task does not fail: the wait reports the slot as a failed worker and stops the
    others (test_faults.py), as for any worker that fails."""
    dirs = worker_dirs(tmp_path, "ok", "die")
    result = helpers.run_module(MODULE, module_args(dirs, fake))
    pids.extend(w["supervisor_pid"] for w in result["workers"])
    assert result.get("failed") is not True and result["changed"] is True
    assert result["failed_workers"] == [1]
    (warning,) = [w["event"]["msg"] if isinstance(w, dict) else w for w in result["warnings"]]
    assert warning.startswith(f"host node-a: worker 1 ({dirs['1']}): the supervisor ended at once (status 3)")
    assert warning.endswith("fake: cannot import the job: boom")
    assert result["workers"][1]["error"].startswith("the supervisor ended at once (status 3): it recorded no state")
    assert result["workers"][0]["error"] is None


def test_the_module_refuses_a_used_directory_before_starting_anything(tmp_path: Path, fake: Path) -> None:
    dirs = worker_dirs(tmp_path, "ok", "ok")
    Path(dirs["1"], "state.json").write_text("{}")
    result = helpers.run_module(MODULE, module_args(dirs, fake))
    assert result["failed"] is True
    assert result["msg"] == f"host node-a: nothing was launched: worker 1: {dirs['1']} was already launched (state.json)"
    assert not Path(dirs["0"], "started").exists() and not Path(dirs["0"], "supervisor.out").exists()


def test_check_mode_reports_what_it_would_start_and_starts_nothing(tmp_path: Path, fake: Path) -> None:
    dirs = worker_dirs(tmp_path, "ok")
    result = helpers.run_module(MODULE, module_args(dirs, fake), check_mode=True)
    assert result["changed"] is True and result["msg"] == "host node-a: would start 1 supervisor(s)"
    assert result["failed_workers"] == []
    assert result["workers"] == [
        {"index": 0, "dir": dirs["0"], "supervisor_pid": None, "recorded": False, "error": None,
         "argv": [sys.executable, str(fake), "--worker-dir", dirs["0"], "--python", "py", "--"]}
    ]  # fmt: skip
    assert sorted(os.listdir(dirs["0"])) == ["mode"]


# --- deploy and launch in one module run (issue 26) -------------------------------------


CLUSTER = ["127.0.0.1:2222", "127.0.0.1:2223"]


def deploy_args(tmp_path: Path, fake: Path, cluster: list[str] | None = None, **deploy: Any) -> dict[str, Any]:
    """The module's arguments for attempt 0 of run r1 with both workers on this host: the
    fake supervisor is the job's tf_supervisor.py."""
    configs = [
        {"index": i, "content": json.dumps({"cluster": {"worker": CLUSTER}, "task": {"type": "worker", "index": i}})}
        for i in (0, 1)
    ]
    return {
        "deploy": {
            "base_dir": str(tmp_path / "base"), "run_id": "r1", "indices": [0, 1], "configs": configs,
            "job_files": [{"name": "tf_supervisor.py", "content": fake.read_text()},
                          {"name": "train.py", "content": "print('train')\n"}],
            **deploy,
        },
        "launch": {
            "workers": [{"index": 0}, {"index": 1}],
            "python": sys.executable,
            "script": "train.py",
            "cluster": CLUSTER if cluster is None else cluster,
            "args": ["--run-id", "r1", "--", "--epochs", "2"],
        },
        "host": "node-a",
    }  # fmt: skip


def test_deploy_writes_the_attempt_then_starts_its_workers_in_one_run(tmp_path: Path, fake: Path, pids: list[int]) -> None:
    result = helpers.run_module(MODULE, deploy_args(tmp_path, fake))
    pids.extend(w["supervisor_pid"] for w in result.get("workers", []))
    assert result.get("failed") is not True, result
    run_dir = tmp_path / "base" / "runs" / "r1"
    dirs = result["deploy"]["worker_dirs"]
    assert sorted(dirs) == ["0", "1"] and all(Path(d, "tf_config.json").is_file() for d in dirs.values())
    job_dir = str(run_dir / "job")
    assert result["workers"][0]["argv"] == [
        sys.executable, f"{job_dir}/tf_supervisor.py", "--worker-dir", dirs["0"],
        "--python", sys.executable, "--script", f"{job_dir}/train.py",
        "--heartbeat-file", f"{run_dir}/controller.heartbeat", "--checkpoint-dir", f"{run_dir}/checkpoints",
        "--run-id", "r1", "--", "--epochs", "2",
    ]  # fmt: skip
    assert all(Path(d, "state.json").is_file() for d in dirs.values())
    facts = result["facts"]
    assert facts["tf_worker_run_dir"] == str(run_dir) and facts["tf_worker_job_dir"] == job_dir
    assert facts["tf_worker_dirs"] == dirs and facts["tf_worker_interpreter"] == sys.executable
    assert facts["tf_worker_checkpoint_dir"] == f"{run_dir}/checkpoints"
    assert [(j["index"], j["dir"], j["launch_error"]) for j in facts["tf_launch_jobs"]] == [
        (0, dirs["0"], None), (1, dirs["1"], None)
    ]
    assert [j["supervisor_pid"] for j in facts["tf_launch_jobs"]] == [w["supervisor_pid"] for w in result["workers"]]


def test_the_heartbeat_file_is_the_contracts() -> None:
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import HEARTBEAT_FILE

    args = deployed_args({"job_dir": "/r/job", "run_dir": "/r", "checkpoint_dir": "/c"}, "py", "t.py", ["--"])
    assert args[args.index("--heartbeat-file") + 1] == f"/r/{HEARTBEAT_FILE}"


@pytest.mark.parametrize(
    ("cluster", "problem"),
    [
        (["127.0.0.1:2222", "127.0.0.1:9999"], r"worker-0: cluster list \['127.0.0.1:2222', '127.0.0.1:2223'\] differs"),
        (["127.0.0.1:2222"], r"worker-1: cluster list .* differs from the spec \['127.0.0.1:2222'\]"),
    ],
)
def test_a_read_back_that_does_not_make_the_cluster_starts_nothing(
    tmp_path: Path, fake: Path, cluster: list[str], problem: str
) -> None:
    result = helpers.run_module(MODULE, deploy_args(tmp_path, fake, cluster=cluster))
    assert result["failed"] is True
    assert re.match(r"host node-a: nothing was launched: TF_CONFIG check failed: .*" + problem, result["msg"]), result
    for wdir in result["deploy"]["worker_dirs"].values():
        assert not Path(wdir, "started").exists() and not Path(wdir, "supervisor.out").exists()


def test_a_read_back_with_another_index_starts_nothing(tmp_path: Path, fake: Path) -> None:
    args = deploy_args(tmp_path, fake)
    args["deploy"]["configs"][1]["content"] = json.dumps({"cluster": {"worker": CLUSTER}, "task": {"index": 0}})
    result = helpers.run_module(MODULE, args)
    assert result["failed"] is True and result["msg"].endswith("worker-1: task.index is 0, expected 1"), result
    assert not any(Path(d, "started").exists() for d in result["deploy"]["worker_dirs"].values())


def test_deploy_refuses_an_attempt_launched_before_naming_the_host(tmp_path: Path, fake: Path, pids: list[int]) -> None:
    first = helpers.run_module(MODULE, deploy_args(tmp_path, fake))
    pids.extend(w["supervisor_pid"] for w in first["workers"])
    again = helpers.run_module(MODULE, deploy_args(tmp_path, fake))
    assert again["failed"] is True
    assert again["msg"].startswith("host node-a: nothing was launched: run id 'r1' was already launched here")
    assert again["run_dir"] == str(tmp_path / "base" / "runs" / "r1")


def test_check_mode_with_deploy_writes_and_starts_nothing_and_shows_the_diff(tmp_path: Path, fake: Path) -> None:
    args = dict(deploy_args(tmp_path, fake), _ansible_diff=True)
    result = helpers.run_module(MODULE, args, check_mode=True)
    assert result.get("failed") is not True, result
    assert result["msg"] == "host node-a: would start 2 supervisor(s)"
    assert not (tmp_path / "base").exists()
    assert "TF_CONFIG cluster (2 workers): 127.0.0.1:2222, 127.0.0.1:2223" in result["diff"]["after"]
    assert result["diff"]["before"] == ""
    assert result["facts"]["tf_launch_jobs"] == []
    assert all(w["supervisor_pid"] is None for w in result["workers"])


def test_without_deploy_the_directories_and_supervisor_are_required(tmp_path: Path, fake: Path) -> None:
    result = helpers.run_module(MODULE, {"launch": {"workers": [{"index": 0}], "python": sys.executable}, "host": "node-a"})
    assert result["failed"] is True and "host node-a: one of the following is required: deploy, launch.dirs" in result["msg"]


# --- the two jobs apart: the module only parses and dispatches (issue 40) -------------------


def test_the_module_has_one_option_group_per_job_and_only_dispatches() -> None:
    import ast

    import tf_worker_launch
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run_files import RUN_FILES_SPEC
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_worker_start import LAUNCH_SPEC

    spec = tf_worker_launch.ARGUMENT_SPEC
    assert sorted(spec) == ["deploy", "host", "launch"]
    assert spec["deploy"]["options"] is RUN_FILES_SPEC and spec["launch"]["options"] is LAUNCH_SPEC
    tree = ast.parse(MODULE.read_text(encoding="utf-8"))
    assert [node.name for node in tree.body if isinstance(node, ast.FunctionDef)] == ["main"]
    main = next(node for node in tree.body if isinstance(node, ast.FunctionDef))
    assert main.end_lineno - main.lineno < 60


def test_the_launch_slots_come_from_the_deploy_of_the_same_run_or_from_dirs() -> None:
    options = {"workers": [{"index": 1}, {"index": 0}], "dirs": {"0": "/d0", "1": "/d1"}, "python": "py",
               "supervisor": "/s.py", "script": "t.py", "args": ["--"], "go_token": "", "announce_key": ""}
    assert [s["argv"] for s in launch_slots(options, {})] == [
        ["py", "/s.py", "--worker-dir", "/d0", "--"], ["py", "/s.py", "--worker-dir", "/d1", "--"]]  # fmt: skip
    deployed = {"worker_dirs": {"0": "/r/w0", "1": "/r/w1"}, "job_dir": "/r/job", "run_dir": "/r",
                "checkpoint_dir": "/c"}
    slots = launch_slots(dict(options, supervisor=""), deployed)
    assert slots[0]["argv"][:4] == ["py", "/r/job/tf_supervisor.py", "--worker-dir", "/r/w0"]
    assert slots[0]["argv"][4:] == deployed_args(deployed, "py", "t.py", ["--"])
    with pytest.raises(ValueError, match="worker 1 has no directory"):
        launch_slots(dict(options, dirs={"0": "/d0"}), {})
    with pytest.raises(ValueError, match="4096"):
        launch_slots(dict(options, go_token="x" * 5000), {})


def test_the_deploy_refuses_read_backs_of_another_cluster_with_its_result(tmp_path: Path, fake: Path) -> None:
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run_files import (
        RunFilesError,
        deploy_attempt,
    )

    args = deploy_args(tmp_path, fake)
    params = {"checkpoint_root": "", "attempt": 0, "job_archive": "", "job_env": {}, "visible_devices": {},
              "pythonpath": False, "interpreter": "", **args["deploy"]}
    # In check mode nothing is read back: no check.
    assert deploy_attempt(params, ["127.0.0.1:1"], True, False)["run_dir"] == str(tmp_path / "base" / "runs" / "r1")
    with pytest.raises(RunFilesError, match=r"^TF_CONFIG check failed: worker-0: cluster list") as refused:
        deploy_attempt(params, ["127.0.0.1:1"], False, False)
    assert sorted(refused.value.fields["deploy"]["worker_dirs"]) == ["0", "1"]
