"""Supervision on namespace hosts (issue 10): a run tied to the controller stops on its
own when the controller goes (Ctrl-C); a detached run finishes on its own and is
reattached from a fresh process; a detached run stops every worker when one fails, with
no controller. The scenarios live in faults.py (the fault benchmark times them too);
each test prints its timing."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from faults import (
    LONG_JOB_ARGS, ctrl_c, detached_worker_killed, play, remote_json, run_processes, start_playbook, wait_for_log,
    wait_until,
)  # fmt: skip
from nshosts import NamespaceHosts

RUN = "~/tf-runbook/runs"


def settings(worker_python: str, **more: Any) -> dict[str, Any]:
    return {
        "tf_worker_python": worker_python,
        "tf_startup_timeout": 120,
        "tf_job_timeout": 600,
        "tf_wait_poll_interval": 2,
        "tf_preflight_versions_check": False,
        **more,
    }


def test_ctrl_c_stops_every_worker_within_the_controller_timeout(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path, worker_python: str
) -> None:
    hosts = make_ns_hosts(count=2)
    timeout = 10
    extra = settings(worker_python, tf_train_args=LONG_JOB_ARGS, tf_controller_timeout=timeout)
    # Fails unless no process of the run is left on any host within the bound.
    out = ctrl_c(hosts, tmp_path, extra, "ctrl-c", bound=timeout + 40)
    print(f"\nTIMING ctrl-c: no process of the run left {out['seconds']:.1f} s after SIGINT (timeout {timeout} s)")
    assert out["returncode"] != 0
    for host in (0, 1):
        exit_ = remote_json(hosts, host, f"{RUN}/ctrl-c/worker-{host}/exit.json")
        assert exit_ is not None and exit_["stopped_by"] == "controller", exit_

    rc, text = play(out["inventory"], out["runs_dir"], "playbooks/collect.yml", {"tf_run_id": "ctrl-c"})
    assert rc != 0, text[-2000:]
    summary = json.loads((out["runs_dir"] / "ctrl-c" / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert "lost the controller" in summary["reason"], summary["reason"]


def test_a_detached_run_finishes_alone_and_is_reattached(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path, worker_python: str
) -> None:
    hosts = make_ns_hosts(count=2)
    inventory = hosts.write_inventory(
        tmp_path / "inventory" / "hosts.yml",
        groupvars=settings(worker_python, tf_train_args=["--epochs=3", "--steps-per-epoch=200"]),
    )
    runs_dir = tmp_path / "runs"
    rc, out = play(inventory, runs_dir, "train.yml", {"tf_run_id": "detached", "tf_detach": True})
    returned = time.monotonic()
    assert rc == 0, out[-3000:]
    assert f"playbooks/wait.yml   -i {inventory} -e tf_run_id=detached" in out
    assert not (runs_dir / "detached" / "summary.json").exists()
    # The playbook returned once every worker joined, not once they finished.
    assert not all(remote_json(hosts, h, f"{RUN}/detached/worker-{h}/exit.json") for h in (0, 1))
    # Tied to nothing: the supervisors were started without a controller timeout.
    state = remote_json(hosts, 1, f"{RUN}/detached/worker-1/state.json")
    assert state is not None and state["launch"]["controller_timeout"] == 0

    rc, out = play(inventory, runs_dir, "playbooks/status.yml", {"tf_run_id": "detached"})
    assert rc == 0, out[-3000:]
    assert "node1 worker-1:" in out and "node0 worker-0:" in out

    # The run finishes on its own, with no ansible-playbook running.
    wait_until(
        lambda: all(remote_json(hosts, h, f"{RUN}/detached/worker-{h}/exit.json") for h in (0, 1)),
        300, "the detached run finished",
    )  # fmt: skip
    print(f"\nTIMING detached: finished {time.monotonic() - returned:.1f} s after the playbook returned")
    for host in (0, 1):
        exit_ = remote_json(hosts, host, f"{RUN}/detached/worker-{host}/exit.json")
        assert exit_ is not None and (exit_["returncode"], exit_["stopped_by"]) == (0, None), exit_

    started = time.monotonic()
    rc, out = play(inventory, runs_dir, "playbooks/wait.yml", {"tf_run_id": "detached"})
    print(f"TIMING detached: wait.yml reattached and judged in {time.monotonic() - started:.1f} s")
    assert rc == 0, out[-3000:]
    summary = json.loads((runs_dir / "detached" / "summary.json").read_text())
    assert summary["status"] == "succeeded", summary["reason"]

    # Each phase playbook runs alone against the run id, in a fresh process, with no fact
    # of an earlier play: collect.yml fetches and judges again from nothing on the controller.
    (runs_dir / "detached" / "summary.json").unlink()
    for fetched in (runs_dir / "detached").glob("node*"):
        shutil.rmtree(fetched)
    rc, out = play(inventory, runs_dir, "playbooks/collect.yml", {"tf_run_id": "detached"})
    assert rc == 0, out[-3000:]
    summary = json.loads((runs_dir / "detached" / "summary.json").read_text())
    assert summary["status"] == "succeeded", summary["reason"]
    assert [w["index"] for w in summary["workers"]] == [0, 1]
    assert (runs_dir / "detached" / "node1" / "worker-1" / "worker.log").is_file()
    # stop.yml alone on a finished run stops nothing and leaves every exit record as it was.
    exits = [remote_json(hosts, h, f"{RUN}/detached/worker-{h}/exit.json") for h in (0, 1)]
    rc, out = play(inventory, runs_dir, "playbooks/stop.yml", {"tf_run_id": "detached"})
    assert rc == 0, out[-3000:]
    assert [remote_json(hosts, h, f"{RUN}/detached/worker-{h}/exit.json") for h in (0, 1)] == exits


def test_a_detached_run_stops_every_worker_when_one_is_killed(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path, worker_python: str
) -> None:
    hosts = make_ns_hosts(count=2)
    out = detached_worker_killed(hosts, tmp_path, settings(worker_python, tf_train_args=LONG_JOB_ARGS), "peer")
    print(f"\nTIMING peer: worker 0 stopped {out['seconds']:.1f} s after worker 1 was killed, no controller")
    exit0 = remote_json(hosts, 0, f"{RUN}/peer/worker-0/exit.json")
    exit1 = remote_json(hosts, 1, f"{RUN}/peer/worker-1/exit.json")
    assert exit1 is not None and (exit1["returncode"], exit1["stopped_by"]) == (137, None), exit1
    assert exit0 is not None, exit0
    # Either worker 0's supervisor heard worker 1's announcement and stopped the job, or
    # the job saw the collective fail first (TensorFlow's "Connection reset by peer") and
    # exited on its own with an error, which its supervisor then announced in turn.
    if exit0["stopped_by"] == "peer":
        assert "worker 1 at " in exit0["reason"] and "failed (worker exit status 137)" in exit0["reason"]
    else:
        assert (exit0["stopped_by"], exit0["reason"]) == (None, "exited") and exit0["returncode"] != 0, exit0
    # The failed worker's supervisor ends its announcement once its peer stopped.
    wait_until(lambda: not run_processes(hosts, 1, "peer"), 120, "node1's supervisor ended")


def test_an_operator_stop_during_the_wait_is_not_restarted(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path, worker_python: str
) -> None:
    """stop.yml while train.yml waits with tf_restart_attempts 1: the run fails, stopped
    by the operator, and no retry is started."""
    hosts = make_ns_hosts(count=2)
    inventory = hosts.write_inventory(
        tmp_path / "inventory" / "hosts.yml",
        groupvars=settings(worker_python, tf_train_args=LONG_JOB_ARGS, tf_restart_attempts=1),
    )
    runs_dir = tmp_path / "runs"
    proc = start_playbook(inventory, runs_dir, {"tf_run_id": "opstop"})
    try:
        wait_for_log(hosts, 0, f"{RUN}/opstop/worker-0/worker.log", "epoch=2 ")
        rc, out = play(inventory, runs_dir, "playbooks/stop.yml", {"tf_run_id": "opstop"})
        assert rc == 0, out[-3000:]
        text, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # Issue 39: a stop is a stop: exit status 0 (a failure's is 2), status stopped, and
    # the complete command that continues it.
    assert proc.returncode == 0, text[-3000:]
    assert "was stopped by an operator (stop.yml): no restart; continue it later with -e tf_run_id=opstop" in text
    assert re.search(r"Run opstop: STOPPED \(stopped by the operator at epoch \d+ of \d+\)\. Continue it with: "
                     r"/\S+/ansible-playbook /\S+/train\.yml -i \S+ -e tf_run_id=opstop -e tf_resume=true", text), text[-3000:]
    assert "[ERROR]" not in text and "FAILED!" not in text
    for host in (0, 1):
        exit_ = remote_json(hosts, host, f"{RUN}/opstop/worker-{host}/exit.json")
        assert exit_ is not None and exit_["stopped_by"] == "operator", exit_
        assert hosts.run(host, f"test -e {RUN}/opstop/retry-1")[0] != 0, "a retry was started"
    summary = json.loads((runs_dir / "opstop" / "summary.json").read_text())
    assert summary["status"] == "stopped"
