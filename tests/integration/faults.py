"""Fault scenarios on namespace hosts, shared by the fault tests and the fault benchmark.

Each scenario starts the runbook in the background, injects one fault at a well-defined
moment (observed on the hosts over SSH, independently of the runbook) and returns what
happened: the playbook's exit status and output, and the seconds from the fault to the
playbook's exit.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import helpers
from nshosts import NamespaceHosts

# A default job that runs until stopped: thousands of short epochs.
LONG_JOB_ARGS = ["--epochs=100000", "--steps-per-epoch=5"]


@dataclass
class Outcome:
    returncode: int
    stdout: str
    fault_to_exit: float
    runs_dir: Path
    run_id: str

    def summary(self) -> dict[str, Any]:
        return json.loads((self.runs_dir / self.run_id / "summary.json").read_text())


def start_playbook(
    inventory: Path, runs_dir: Path, extra: dict[str, Any], *args: str, playbook: str = "train.yml"
) -> subprocess.Popen[str]:
    return helpers.start_playbook(playbook, *args, inventory=inventory, extra={"tf_runs_dir": str(runs_dir), **extra})


def wait_for_log(hosts: NamespaceHosts, host: int, path: str, needle: str, timeout: float = 300) -> None:
    """Wait until ``needle`` appears in a file on ``host`` (read over SSH)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rc, out, _ = hosts.run(host, f"cat {path} 2>/dev/null")
        if rc == 0 and needle in out:
            return
        time.sleep(0.5)
    raise AssertionError(f"{needle!r} never appeared in {path} on host {host}")


def remote_pid(hosts: NamespaceHosts, host: int, worker_dir: str, key: str = "pid") -> int:
    rc, out, err = hosts.run(
        host, f"python3 -c 'import json,os; print(json.load(open(os.path.expanduser(\"{worker_dir}/state.json\")))[\"{key}\"])'"
    )
    assert rc == 0, err
    return int(out.strip())


def run_with_fault(
    hosts: NamespaceHosts,
    workdir: Path,
    run_id: str,
    extra: dict[str, Any],
    inject: Callable[[], None],
    *,
    hostvars: dict[Any, dict[str, Any]] | None = None,
    timeout: float = 600,
) -> Outcome:
    """Start the runbook, call ``inject`` (which returns once the fault is in), time the rest."""
    inventory = hosts.write_inventory(workdir / "inventory" / "hosts.yml", hostvars=hostvars, groupvars=extra)
    runs_dir = workdir / "runs"
    proc = start_playbook(inventory, runs_dir, {"tf_run_id": run_id})
    try:
        inject()
        fault_at = time.monotonic()
        stdout, _ = proc.communicate(timeout=timeout)
        return Outcome(proc.returncode, stdout, time.monotonic() - fault_at, runs_dir, run_id)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def run_processes(hosts: NamespaceHosts, host: int, run_id: str) -> list[str]:
    """Processes on ``host`` whose command line or working directory mention the run."""
    script = (
        "for p in /proc/[0-9]*; do "
        "c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null); d=$(readlink $p/cwd 2>/dev/null); "
        f"case \"$c $d\" in *runs/{run_id}*) echo \"${{p#/proc/}} $c\";; esac; done"
    )
    rc, out, _ = hosts.run(host, script)
    assert rc == 0
    return [line for line in out.splitlines() if line.strip() and "for p in" not in line]


# -- the restart path's module runs, counted (issue 42) -------------------------------------

BENCH_CALLBACKS = helpers.REPO / "tests" / "bench" / "callback"
# The restart path in the callback's records: from the stop of the failed attempt to the
# go of the next one (tf_attempts' decide.yml, tf_launch's go.yml).
RESTART_PATH_FROM = "Stop every worker of the failed attempt"
RESTART_PATH_TO = "tf_runbook.multiworker.tf_worker_go"


def counting_env(events: Path) -> dict[str, str]:
    """The environment that has the bench's callback (tests/bench/callback/tf_bench.py)
    note every task start and every module run into ``events``, beside the callbacks of
    the clone's ansible.cfg."""
    import configparser

    config = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";",))
    config.read(helpers.REPO / "ansible.cfg", encoding="utf-8")
    enabled = [name.strip() for name in config.get("defaults", "callbacks_enabled", fallback="").split(",") if name.strip()]
    return {"ANSIBLE_CALLBACK_PLUGINS": str(BENCH_CALLBACKS), "ANSIBLE_CALLBACKS_ENABLED": ",".join(["tf_bench", *enabled]),
            "TF_BENCH_EVENTS": str(events)}


def restart_path_module_runs(events: Path) -> list[dict[str, Any]]:
    """The module runs (host, module) of the first restart path in the callback's
    ``events``: from the start of the task that stops the failed attempt to the go of the
    next attempt, that go included. Counted, never timed."""
    records = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
    records.sort(key=lambda r: r["t"])
    start = next((r["t"] for r in records if r["event"] == "task" and RESTART_PATH_FROM in str(r.get("name"))), None)
    assert start is not None, "no stop of a failed attempt in the run's events"
    runs = []
    for record in records:
        if record["event"] != "module" or record["t"] < start:
            continue
        runs.append({"host": record["host"], "module": record["module"]})
        if record["task_action"] == RESTART_PATH_TO:
            return runs
    raise AssertionError("no go of a next attempt after the stop in the run's events")


# -- supervision scenarios (issue 10), shared by tests/integration/test_supervision.py and
# the fault part of tests/bench/bench.py --------------------------------------------------


def play(inventory: Path, runs_dir: Path, playbook: str, extra: dict[str, Any], timeout: float = 400) -> tuple[int, str]:
    """Run one playbook to its end: (exit status, output)."""
    proc = start_playbook(inventory, runs_dir, extra, playbook=playbook)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out


def remote_json(hosts: NamespaceHosts, host: int, path: str) -> dict[str, Any] | None:
    rc, out, _ = hosts.run(host, f"cat {path} 2>/dev/null")
    return json.loads(out) if rc == 0 and out.strip() else None


def assert_started_together(hosts: NamespaceHosts, run_dir: str, workers: dict[int, int]) -> list[dict[str, Any]]:
    """An armed launch: every worker (index: host) of the attempt in ``run_dir`` was armed
    before any job started, and every job started on the go. The hosts share this
    machine's clock. Returns the workers' states, in the order given."""
    states = [remote_json(hosts, host, f"{run_dir}/worker-{index}/state.json") for index, host in workers.items()]
    assert all(s and s["armed_at"] is not None and s["go_port"] and s["pid"] for s in states), states
    assert max(s["armed_at"] for s in states) <= min(s["started_at"] for s in states), states
    return states  # type: ignore[return-value]


def wait_until(check: Callable[[], Any], timeout: float, what: str) -> float:
    """Seconds until ``check()`` is true; raises after ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return time.monotonic() - start
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout} s")


def ctrl_c(hosts: NamespaceHosts, workdir: Path, extra: dict[str, Any], run_id: str, bound: float) -> dict[str, Any]:
    """SIGINT to ansible-playbook mid-training; seconds until no process of the run is left
    on any host (fails past ``bound``)."""
    inventory = hosts.write_inventory(workdir / "inventory" / "hosts.yml", groupvars=extra)
    runs_dir = workdir / "runs"
    proc = start_playbook(inventory, runs_dir, {"tf_run_id": run_id})
    try:
        wait_for_log(hosts, 0, f"~/tf-runbook/runs/{run_id}/worker-0/worker.log", "epoch=2 ")
        proc.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    wait_until(
        lambda: not any(run_processes(hosts, h, run_id) for h in range(len(hosts))),
        bound - (time.monotonic() - interrupted), "every process of the run gone after Ctrl-C",
    )  # fmt: skip
    return {"seconds": time.monotonic() - interrupted, "returncode": proc.returncode,
            "inventory": inventory, "runs_dir": runs_dir}  # fmt: skip


def detached_worker_killed(hosts: NamespaceHosts, workdir: Path, extra: dict[str, Any], run_id: str) -> dict[str, Any]:
    """A detached run; worker 1's job killed in epoch 2; seconds until worker 0 has exited
    and none of its processes is left, with no controller running."""
    inventory = hosts.write_inventory(workdir / "inventory" / "hosts.yml", groupvars=extra)
    runs_dir = workdir / "runs"
    rc, out = play(inventory, runs_dir, "train.yml", {"tf_run_id": run_id, "tf_detach": True})
    assert rc == 0, out[-3000:]
    run = f"~/tf-runbook/runs/{run_id}"
    wait_for_log(hosts, 1, f"{run}/worker-1/worker.log", "epoch=2 ")
    assert hosts.run(1, f"kill -9 {remote_pid(hosts, 1, f'{run}/worker-1')}")[0] == 0
    seconds = wait_until(
        lambda: remote_json(hosts, 0, f"{run}/worker-0/exit.json") and not run_processes(hosts, 0, run_id),
        120, "worker 0 stopped after worker 1 was killed",
    )  # fmt: skip
    return {"seconds": seconds, "inventory": inventory, "runs_dir": runs_dir}
