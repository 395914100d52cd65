"""The preflight's claim of the run's directory on the controller (an action, issue 13),
exclusive (issue 24, points 12 and 23), and the claim of a run to resume (issue 23, point 7)."""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
from ansible.errors import AnsibleActionFail

import helpers
import tf_run_claim_action as action
from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_proc


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_claim_makes_both_directories_private(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    result = action.claim(str(runs), "20261203T000000Z-abcdef", checksum="c" * 64)
    assert result == {"changed": True, "path": str(runs / "20261203T000000Z-abcdef"), "attempt": 0}
    assert mode(runs) == 0o700 and mode(runs / "20261203T000000Z-abcdef") == 0o700
    record = json.loads((runs / "20261203T000000Z-abcdef" / "run.json").read_text())
    assert record["cluster_checksum"] == "c" * 64


def test_an_existing_runs_directory_is_made_private_too(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir(mode=0o755)
    (runs / "earlier").mkdir()
    (runs / "earlier" / "summary.json").write_text("{}")
    action.claim(str(runs), "next")
    assert mode(runs) == 0o700
    assert (runs / "earlier" / "summary.json").read_text() == "{}"


def test_a_claimed_run_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True, mode=0o750)
    (run / "summary.json").write_text("kept")
    with pytest.raises(AnsibleActionFail, match=r"run id 'r1' is already claimed on this controller .*tf_resume=true"):
        action.claim(str(tmp_path / "runs"), "r1")
    assert (run / "summary.json").read_text() == "kept"
    assert mode(run) == 0o750


def test_of_two_claims_of_one_run_id_made_together_only_one_passes(tmp_path: Path) -> None:
    runs, outcomes = str(tmp_path / "runs"), []
    barrier = threading.Barrier(8)

    def claim() -> None:
        barrier.wait()
        try:
            outcomes.append(action.claim(runs, "r1")["changed"])
        except AnsibleActionFail as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(outcomes) == 8, outcomes  # every thread answered: none died of an exception not caught
    assert outcomes.count(True) == 1, outcomes
    assert all(isinstance(o, str) and "claimed" in o and "r1" in o for o in outcomes if o is not True), outcomes


# A process that claims run r1 from four threads at once when it reads "go" on stdin, after
# printing "ready"; it prints one JSON line per thread: true, or the refusal's text.
CLAIMER = """
import json, sys, threading
from ansible.errors import AnsibleActionFail
from ansible_collections.tf_runbook.multiworker.plugins.action.tf_run_claim import claim
barrier, lock = threading.Barrier(4), threading.Lock()
def one():
    barrier.wait()
    try:
        outcome = claim(sys.argv[1], "r1")["changed"]
    except AnsibleActionFail as exc:
        outcome = str(exc)
    with lock:
        print(json.dumps(outcome), flush=True)
print("ready", flush=True)
sys.stdin.readline()
threads = [threading.Thread(target=one) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
"""


def test_of_claims_of_one_run_id_from_several_processes_only_one_passes(tmp_path: Path) -> None:
    """Two playbooks are two processes: the claim's exclusivity is the file system's (one
    mkdir), not a lock of one process. Four processes of four threads each claim together."""
    runs = str(tmp_path / "runs")
    claimers = [subprocess.Popen([sys.executable, "-c", CLAIMER, runs], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True, env=helpers.module_env()) for _ in range(4)]  # fmt: skip
    try:
        for claimer in claimers:
            assert claimer.stdout is not None and claimer.stdout.readline().strip() == "ready"
        for claimer in claimers:  # every process waits on its stdin: all start at once
            assert claimer.stdin is not None
            claimer.stdin.write("go\n")
            claimer.stdin.flush()
        outcomes = []
        for claimer in claimers:
            out, _ = claimer.communicate(timeout=60)
            assert claimer.returncode == 0, out
            outcomes += [json.loads(line) for line in out.splitlines()]
    finally:
        for claimer in claimers:
            helpers.kill_quietly(claimer.pid)
            claimer.wait()
    assert len(outcomes) == 16, outcomes
    assert outcomes.count(True) == 1, outcomes
    assert all(isinstance(o, str) and "claimed" in o and "'r1'" in o for o in outcomes if o is not True), outcomes
    assert os.listdir(runs) == ["r1"]


def test_check_mode_creates_nothing(tmp_path: Path) -> None:
    assert action.claim(str(tmp_path / "runs"), "r1", check_mode=True)["changed"] is True
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("bad", ["", "a/b", "..", "."])
def test_a_run_id_that_is_not_one_path_component_is_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(AnsibleActionFail, match="is not a run id"):
        action.claim(str(tmp_path / "runs"), bad)
    assert not (tmp_path / "runs").exists()


def test_a_runs_directory_that_cannot_be_made_names_the_path(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(AnsibleActionFail, match="cannot create .*file/runs/r1"):
        action.claim(str(tmp_path / "file" / "runs"), "r1")


# --- resume ------------------------------------------------------------------------------

CHECKSUM = "a" * 64


def host(last: int = 1, alive: bool = False, returncode: int | None = 143, checksum: str = CHECKSUM,
         exists: bool = True) -> dict[str, Any]:
    return {"exists": exists, "run_dir": "/b/runs/r1", "last_attempt": last,
            "workers": [{"index": 0, "dir": "/b/runs/r1/retry-1/worker-0", "alive": alive,
                         "returncode": returncode, "checksum": checksum}]}  # fmt: skip


def claimed_run(tmp_path: Path, checksum: str = CHECKSUM, status: str = "failed") -> Path:
    runs = tmp_path / "runs"
    action.claim(str(runs), "r1", checksum=checksum)
    (runs / "r1" / "summary.json").write_text(json.dumps({"status": status}))
    return runs


def test_a_stopped_run_is_resumed_as_its_next_attempt_once(tmp_path: Path) -> None:
    runs = claimed_run(tmp_path)
    hosts = {"h0": host(last=1), "h1": host(last=1)}
    assert action.resume(str(runs), "r1", CHECKSUM, hosts, False) == {
        "changed": True, "path": str(runs / "r1"), "attempt": 2, "resumes_from": "from its checkpoints"}
    with pytest.raises(AnsibleActionFail, match="another playbook is resuming run 'r1' as attempt 2"):
        action.resume(str(runs), "r1", CHECKSUM, hosts, False)


@pytest.mark.parametrize(
    ("hosts", "match"),
    [
        ({"h0": host(), "h1": host(alive=True, returncode=None)},
         r"host h1: worker 0 of run 'r1' is still running \(its supervisor works in /b/runs/r1/retry-1/worker-0\)"),
        ({"h0": host(), "h1": host(exists=False, last=-1)}, r"host h1: run 'r1' was never launched there"),
        ({"h0": host(), "h1": host(checksum="b" * 64)},
         r"host h1: worker 0 ran in another cluster "
         r"\(TF_CONFIG checksum bbbbbbbbbbbb, this inventory's aaaaaaaaaaaa\)"),
        ({"h0": host(returncode=0), "h1": host(returncode=0)}, r"run 'r1' succeeded: there is nothing to resume"),
        ({"h0": host(), "h1": {"failed": True, "msg": "permission denied"}},
         r"host h1: could not read the run there \(permission denied\)"),
    ],
)
def test_a_resume_is_refused_naming_host_and_value(tmp_path: Path, hosts: dict[str, Any], match: str) -> None:
    runs = claimed_run(tmp_path)
    with pytest.raises(AnsibleActionFail, match=r"Preflight refused the resume: .*" + match):
        action.resume(str(runs), "r1", CHECKSUM, hosts, False)
    assert not [name for name in os.listdir(runs / "r1") if name.endswith(".claim")]


def checkpoint_host(recorded: list[str | None], would: str = "/ck/r1", root: str = "/ck") -> dict[str, Any]:
    """host(), whose resume would use ``would`` (from tf_checkpoint_dir ``root``), with one
    worker per entry of ``recorded``: the checkpoint directory its launch recorded, or None."""
    found = host()
    worker = found["workers"][0]
    return {**found, "checkpoint_dir": would, "checkpoint_root": root,
            "workers": [{**worker, "index": i, "checkpoint_dir": kept} for i, kept in enumerate(recorded)]}  # fmt: skip


@pytest.mark.parametrize(
    "found",
    [
        checkpoint_host(["/ck/r1", "/ck/r1"]),
        checkpoint_host(["/ck//r1/", "/ck/./r1"]),  # the same directory, written otherwise
        checkpoint_host(["/b/runs/r1/checkpoints"], would="/b/runs/r1/checkpoints", root=""),
        checkpoint_host([None]),  # launched by a supervisor that recorded no directory
        checkpoint_host([None, "/ck/r1"]),
        host(),  # an answer without checkpoint directories (an older tf_run_resume)
    ],
    ids=["equal", "normalized", "under-the-run", "no-record", "one-record", "no-answer"],
)
def test_a_resume_with_the_runs_checkpoint_directory_is_not_refused(tmp_path: Path, found: dict[str, Any]) -> None:
    runs = claimed_run(tmp_path)
    assert action.resume(str(runs), "r1", CHECKSUM, {"h0": checkpoint_host(["/ck/r1"]), "h1": found}, True) == {
        "changed": True, "path": str(runs / "r1"), "attempt": 2, "resumes_from": "from its checkpoints"}


@pytest.mark.parametrize(
    ("found", "kept", "would", "setting"),
    [
        (checkpoint_host(["/a/r1", "/a/r1"]), "/a/r1", "/ck/r1", "'/ck'"),
        (checkpoint_host([None, "/a/r1/"]), "/a/r1", "/ck/r1", "'/ck'"),
        (checkpoint_host(["/b/runs/r1/checkpoints"]), "/b/runs/r1/checkpoints", "/ck/r1", "'/ck'"),
        (checkpoint_host(["/ck/r1"], would="/b/runs/r1/checkpoints", root=""), "/ck/r1", "/b/runs/r1/checkpoints",
         "'', under the run's directory"),
    ],
    ids=["other-root", "one-record", "root-set", "root-emptied"],
)
def test_a_resume_with_another_checkpoint_directory_is_refused_naming_host_and_both(
    tmp_path: Path, found: dict[str, Any], kept: str, would: str, setting: str
) -> None:
    runs = claimed_run(tmp_path)
    message = (f"host h1: run 'r1' kept its checkpoints in {kept} (attempt 1), and this resume would use {would} "
               f"(tf_checkpoint_dir {setting}): resume with the tf_checkpoint_dir the run was launched with")
    with pytest.raises(AnsibleActionFail) as refusal:
        action.resume(str(runs), "r1", CHECKSUM, {"h0": checkpoint_host(["/ck/r1"]), "h1": found}, False)
    assert str(refusal.value) == f"Preflight refused the resume: {message}"
    assert not [name for name in os.listdir(runs / "r1") if name.endswith(".claim")]


def test_a_resume_of_a_run_the_verdict_passed_is_refused(tmp_path: Path) -> None:
    runs = claimed_run(tmp_path, status="succeeded")
    with pytest.raises(AnsibleActionFail, match="succeeded: there is nothing to resume"):
        action.resume(str(runs), "r1", CHECKSUM, {"h0": host()}, False)


def test_a_resume_with_another_cluster_than_the_recorded_one_is_refused(tmp_path: Path) -> None:
    runs = claimed_run(tmp_path, checksum="c" * 64)
    with pytest.raises(AnsibleActionFail, match=r"run 'r1' ran in another cluster \(recorded checksum cccccccccccc"):
        action.resume(str(runs), "r1", CHECKSUM, {"h0": host()}, False)


def test_a_resume_of_a_run_unknown_to_this_controller_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AnsibleActionFail, match=r"run 'r9' has no directory on this controller"):
        action.resume(str(tmp_path / "runs"), "r9", CHECKSUM, {"h0": host()}, False)


def test_a_resume_in_check_mode_claims_nothing(tmp_path: Path) -> None:
    runs = claimed_run(tmp_path)
    assert action.resume(str(runs), "r1", CHECKSUM, {"h0": host(last=0)}, True)["attempt"] == 1
    assert not [name for name in os.listdir(runs / "r1") if name.endswith(".claim")]


HELD = {"files": 5, "bytes": 2_500_000, "newest": "latest", "newest_at": 1.0, "numbers": {"latest": 3, "checkpoint": 3}}


def test_a_resume_says_what_the_chief_holds_to_restore_from(tmp_path: Path) -> None:
    """Issue 39, point 5: "resumed ... from its checkpoints" when there were none."""
    runs = claimed_run(tmp_path)
    hosts = {"h0": {**host(last=1), "checkpoint": HELD, "checkpoint_dir": "/ck/r1"}, "h1": host(last=1)}
    result = action.resume(str(runs), "r1", CHECKSUM, hosts, True, "h0")
    assert result["resumes_from"] == ("from the chief's checkpoint on h0 (5 file(s), 2.5 MB, newest latest; it names "
                                      "checkpoint 3)")  # fmt: skip


def test_a_resume_from_an_empty_chief_is_refused_unless_from_scratch(tmp_path: Path) -> None:
    runs = claimed_run(tmp_path)
    empty = {"files": 0, "bytes": 0, "newest": None, "newest_at": None, "numbers": {}}
    hosts = {"h0": {**host(last=1), "checkpoint": empty, "checkpoint_dir": "/ck/r1"},
             "h1": {**host(last=1), "checkpoint": HELD}}  # fmt: skip
    with pytest.raises(AnsibleActionFail, match=r"host h0: run 'r1' has no checkpoint to resume from \(/ck/r1, the "
                                                r"chief's checkpoint directory, holds nothing\).*tf_resume_from_scratch"):
        action.resume(str(runs), "r1", CHECKSUM, hosts, True, "h0")
    result = action.resume(str(runs), "r1", CHECKSUM, hosts, True, "h0", from_scratch=True)
    assert result["resumes_from"] == "from scratch: the chief's checkpoint directory on h0 (/ck/r1) holds nothing"


@pytest.mark.parametrize("lasts", [(1, 3), (3, 1), (0, 2, 1)])
def test_hosts_that_disagree_on_the_last_attempt_resume_after_the_highest(tmp_path: Path, lasts: tuple[int, ...]) -> None:
    """A host that missed a retry (lost during it) answers an older last attempt: the next
    attempt's number comes from the highest one, never reusing a retry's directory."""
    runs = claimed_run(tmp_path)
    hosts = {f"h{i}": host(last=last) for i, last in enumerate(lasts)}
    following = max(lasts) + 1
    assert action.resume(str(runs), "r1", CHECKSUM, hosts, False)["attempt"] == following
    assert sorted(name for name in os.listdir(runs / "r1") if name.endswith(".claim")) == [
        f".resume-{following}.claim"]


def worker(index: int, returncode: int | None) -> dict[str, Any]:
    return {"index": index, "dir": f"/b/runs/r1/retry-1/worker-{index}", "alive": False, "returncode": returncode,
            "checksum": CHECKSUM}


@pytest.mark.parametrize(
    "codes",
    [((0, 143), ()), ((0,), (1,)), ((143,), (0,)), ((0, None), (0,)), ((0,), (0, -9))],
    ids=["one-host", "two-hosts", "first-failed", "no-exit-record", "killed"],
)
def test_a_latest_attempt_with_mixed_exit_codes_did_not_succeed(
    tmp_path: Path, codes: tuple[tuple[int | None, ...], ...]
) -> None:
    """Some workers of the latest attempt exited 0, others did not (or left no exit record):
    the run is not "succeeded" and is resumed."""
    runs = claimed_run(tmp_path)
    hosts = {f"h{h}": {**host(), "workers": [worker(i, code) for i, code in enumerate(per_host)]}
             for h, per_host in enumerate(codes)}  # fmt: skip
    assert action.run_succeeded(str(runs / "r1"), hosts) is False
    assert action.resume(str(runs), "r1", CHECKSUM, hosts, False)["attempt"] == 2


def test_a_latest_attempt_whose_every_worker_exited_0_succeeded_without_a_verdict(tmp_path: Path) -> None:
    runs = claimed_run(tmp_path)
    hosts = {"h0": {**host(), "workers": [worker(0, 0), worker(1, 0)]}, "h1": {**host(), "workers": [worker(2, 0)]}}
    assert action.run_succeeded(str(runs / "r1"), hosts) is True
    assert action.run_succeeded(str(runs / "r1"), {"h0": {**host(), "workers": []}}) is False


def test_a_run_directory_with_no_worker_directory_was_never_launched_there(tmp_path: Path) -> None:
    """The run's directory exists on the host (made by the deploy, or a retry's directory
    left empty) but holds no worker directory: no attempt, and the resume is refused."""
    from ansible_collections.tf_runbook.multiworker.plugins.modules import tf_run_resume

    run = tmp_path / "base" / "runs" / "r1"
    (run / "retry-1").mkdir(parents=True)
    (run / "job").mkdir()
    (run / "worker-x").mkdir()  # not a worker index
    (run / "worker-3").write_text("a file, not a directory")
    found = tf_run_resume.read_run(str(tmp_path / "base"), "r1")
    assert (found["exists"], found["last_attempt"], found["workers"], found["earlier_alive"]) == (True, -1, [], [])
    runs = claimed_run(tmp_path)
    with pytest.raises(AnsibleActionFail) as refusal:
        action.resume(str(runs), "r1", CHECKSUM, {"h0": host(), "h1": found}, False)
    assert str(refusal.value) == (
        f"Preflight refused the resume: host h1: run 'r1' was never launched there ({run} holds no worker "
        "directory); resume it with the inventory it ran on")
    assert not [name for name in os.listdir(runs / "r1") if name.endswith(".claim")]


# --- issue 38 point 9: the playbook that drives a run is recorded; a resume waits for it ---


@pytest.fixture
def other_playbook() -> Iterator[subprocess.Popen]:
    """A live process standing in for another ansible-playbook."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait(10)


def test_the_claim_records_the_playbook_that_drives_the_run(tmp_path: Path) -> None:
    runs = claimed_run(tmp_path)
    driver = json.loads((runs / "r1" / "driver.json").read_text())
    # The action's worker was forked by ansible-playbook: its parent, here pytest's.
    assert driver["pid"] == os.getppid() and driver["attempt"] == 0
    assert driver["start_time"] == tf_proc.process_start_time(os.getppid()) and driver["host"] == socket.gethostname()
    assert action.resume(str(runs), "r1", CHECKSUM, {"h0": host(last=1)}, False)["attempt"] == 2
    assert json.loads((runs / "r1" / "driver.json").read_text())["attempt"] == 2


def test_a_live_driver_is_one_process_with_its_pid_and_start_time(tmp_path: Path, other_playbook: subprocess.Popen) -> None:
    run_dir = tmp_path / "r1"
    run_dir.mkdir()
    record = action.record_driver(str(run_dir), 3, pid=other_playbook.pid)
    assert isinstance(record["start_time"], int)
    assert action.live_driver(str(run_dir), own_pid=os.getpid()) == record
    # This very playbook is not another driver; another controller's record is not checked.
    assert action.live_driver(str(run_dir), own_pid=other_playbook.pid) is None
    assert action.live_driver(str(run_dir), host="another-controller", own_pid=os.getpid()) is None
    # The same pid, alive, with another start time: the pid was reused, not the driver.
    (run_dir / "driver.json").write_text(json.dumps({**record, "start_time": record["start_time"] - 1}))
    assert action.live_driver(str(run_dir), own_pid=os.getpid()) is None
    (run_dir / "driver.json").write_text(json.dumps(record))
    other_playbook.kill()
    other_playbook.wait(10)
    # A stale record of a dead playbook is no live driver.
    assert action.live_driver(str(run_dir), own_pid=os.getpid()) is None


@pytest.mark.parametrize("text", ["", "[]", '{"pid": "1", "start_time": 5}', '{"pid": true, "start_time": 5}',
                                  '{"pid": 1, "start_time": null}'])  # fmt: skip
def test_an_unusable_driver_record_is_no_live_driver(tmp_path: Path, text: str) -> None:
    (tmp_path / "driver.json").write_text(text)
    assert action.live_driver(str(tmp_path), own_pid=os.getpid()) is None


def test_the_start_time_is_field_22_of_stat(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    fields = ["S", *[str(n) for n in range(4, 22)], "123456", "0"]
    (tmp_path / "7" / "stat").write_text("7 (a (b) c) " + " ".join(fields))
    assert tf_proc.process_start_time(7, str(tmp_path)) == 123456
    (tmp_path / "7" / "stat").write_text("7 (z) " + " ".join(["Z", *fields[1:]]))
    assert tf_proc.process_start_time(7, str(tmp_path)) is None
    assert tf_proc.process_start_time(8, str(tmp_path)) is None


def test_a_resume_is_refused_while_the_driving_playbook_lives(
    tmp_path: Path, other_playbook: subprocess.Popen
) -> None:
    runs = claimed_run(tmp_path)
    action.record_driver(str(runs / "r1"), 1, pid=other_playbook.pid)
    pid = other_playbook.pid
    with pytest.raises(AnsibleActionFail, match=(
        rf"Preflight refused the resume: run 'r1' is still driven by the playbook that claimed attempt 1 at .* "
        rf"\(ansible-playbook pid {pid} on {re.escape(socket.gethostname())}, recorded in .*driver.json\): let it "
        rf"finish, or stop it \(Ctrl-C it, or kill {pid}\) and then resume"
    )):  # fmt: skip
        action.resume(str(runs), "r1", CHECKSUM, {"h0": host(last=1)}, True)
    assert not [name for name in os.listdir(runs / "r1") if name.endswith(".claim")]
    other_playbook.kill()
    other_playbook.wait(10)
    assert action.resume(str(runs), "r1", CHECKSUM, {"h0": host(last=1)}, False)["attempt"] == 2
