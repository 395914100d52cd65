"""Several runs on the same hosts (issue 41): with ``tf_worker_port: auto`` two runs started
within a second of each other on the same two hosts both train, on ports each host's
preflight picked and reserved, and never touch each other: a stop of one leaves the
other running to success, status.yml without a run id lists both (id, user, since,
ports), a reattach finds the picked ports, and a resume keeps them. A run's reservations
end with it (the operator's stop, the wait of a run that succeeded).

One pair of runs serves every assertion (the whole suite's time is short)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Callable

from helpers import start_playbook
from nshosts import NamespaceHosts
from test_long_runs import RUN, no_process_left, settings
from test_multihost import Runbook

# 40 epochs of 120 steps of the default job (1 to 2 s each here): long enough to look at
# both runs, stop one and follow the other; short enough for the suite.
ARGS = ["--epochs=40", "--steps-per-epoch=120"]
FIRST, LAST = 20000, 29999


def worker_ports(book: Runbook, host: int, run_id: str, attempt: str = "") -> list[int]:
    """The ports in the TF_CONFIG files of ``run_id`` on ``host`` (read over SSH), each
    worker's own entry of its cluster list."""
    script = f"for f in {RUN}/{run_id}/{attempt}worker-*/tf_config.json; do tr -d '\\n' < $f; echo; done"
    rc, out, _ = book.hosts.run(host, script)
    assert rc == 0, out
    ports = []
    for line in out.splitlines():
        config = json.loads(line)
        ports.append(int(config["cluster"]["worker"][config["task"]["index"]].rsplit(":", 1)[1]))
    return ports


def reserved_runs(book: Runbook, host: int) -> list[str]:
    """The run ids of the reservations in the registers of ports on ``host`` (every user's,
    /tmp/tf-runbook-ports-<uid>), one per reserved port, sorted."""
    rc, out, _ = book.hosts.run(host, "cat /tmp/tf-runbook-ports-*/*.json 2>/dev/null; echo")
    return sorted(re.findall(r'"run_id": "([^"]+)"', out))


def test_two_runs_started_together_on_auto_ports_train_apart_and_a_stop_touches_only_its_own(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path, worker_python: str
) -> None:
    hosts = make_ns_hosts(count=2)
    book = Runbook(hosts, tmp_path, port="auto",
                   groupvars=settings(worker_python, tf_train_args=ARGS, tf_detach=True))
    # Two ansible-playbook processes, started within a second, as two people would.
    started = time.monotonic()
    procs = {run_id: start_playbook("train.yml", inventory=book.inventory,
                                    extra={"tf_runs_dir": str(book.runs), "tf_run_id": run_id})
             for run_id in ("share-a", "share-b")}
    assert time.monotonic() - started < 5
    outs: dict[str, str] = {}
    for run_id, proc in procs.items():
        outs[run_id], _ = proc.communicate(timeout=600)
        (tmp_path / f"{run_id}.out").write_text(outs[run_id])
        assert proc.returncode == 0, outs[run_id][-4000:]
        assert f"Run {run_id}: every worker joined the cluster" in outs[run_id], outs[run_id][-3000:]
        # The picked ports were probed from every host before the launch (the connect step).
        connect = re.search(r"TASK \[tf_preflight : Connect from this host to the worker ports it must reach\] \*+\n"
                            r"((?:ok: \[node\d\]\n)+)", outs[run_id])
        assert connect and sorted(re.findall(r"node\d", connect.group(1))) == ["node0", "node1"], outs[run_id][:6000]

    # Each host's workers of the two runs listen on different ports, picked in the range;
    # the run's record on the controller holds the same ports.
    ports: dict[str, dict[int, list[int]]] = {r: {h: worker_ports(book, h, r) for h in (0, 1)} for r in procs}
    for host in (0, 1):
        a, b = ports["share-a"][host], ports["share-b"][host]
        assert set(a).isdisjoint(b), ports
        assert all(FIRST <= p <= LAST for p in a + b), ports
    for run_id in procs:
        recorded = json.loads((book.runs / run_id / "run.json").read_text())["ports"]
        assert recorded == {"node0": ports[run_id][0], "node1": ports[run_id][1]}, recorded

    # status.yml without a run id: both runs on both hosts, with the user, since when and ports.
    status = book.play("playbooks/status.yml")
    assert status.returncode == 0, status.stdout[-3000:]
    (tmp_path / "status.out").write_text(status.stdout)
    for run_id in procs:
        for host in (0, 1):
            port_list = ",".join(str(p) for p in ports[run_id][host])
            assert re.search(rf"node{host}: run {run_id} of {hosts.user}, running since \d{{4}}-\d\d-\d\d "
                             rf"\d\d:\d\d:\d\d UTC \(\d+ min \d+ s\), ports {port_list}", status.stdout), status.stdout

    # A stop of run a stops its processes only: run b goes on, and succeeds on its ports.
    stop = book.play("playbooks/stop.yml", extra={"tf_run_id": "share-a"})
    assert stop.returncode == 0, stop.stdout[-3000:]
    no_process_left(book, "share-a")
    for host in (0, 1):
        assert book.run_processes(host, "share-b"), f"run share-b stopped on node{host} by the stop of share-a"
    # The operator's stop ended run a: its reservations are released at once, run b's stay.
    for host in (0, 1):
        assert reserved_runs(book, host) == ["share-b"], reserved_runs(book, host)
    # Reattached from the inventory (auto), the wait finds run b's picked ports on the hosts.
    waited = book.play("playbooks/wait.yml", extra={"tf_run_id": "share-b"})
    (tmp_path / "wait-b.out").write_text(waited.stdout)
    assert waited.returncode == 0, waited.stdout[-4000:]
    summary_b = book.summary("share-b")
    assert summary_b["status"] == "succeeded", summary_b["checks"]
    assert [(w["host"], w["port"]) for w in summary_b["workers"]] == [
        ("node0", ports["share-b"][0][0]), ("node1", ports["share-b"][1][0])]
    no_process_left(book, "share-b")
    # Run b ended (its wait brought the files): nothing of it is reserved or listed any more.
    for host in (0, 1):
        assert reserved_runs(book, host) == [], reserved_runs(book, host)
    listed = book.play("playbooks/status.yml")
    assert listed.returncode == 0 and "run share-b" not in listed.stdout, listed.stdout[-3000:]
    # Its verdict, logs and checkpoints are its own: nothing of run a among them.
    assert not list((book.runs / "share-b").rglob("*share-a*"))
    for host in (0, 1):
        rc, out, _ = hosts.run(host, f"grep -rl share-a {RUN}/share-b 2>/dev/null | head -3")
        assert out.strip() == "", out

    # Run a, stopped, resumes on the ports it picked (run.json), and succeeds.
    resumed = book.play("train.yml", extra={"tf_run_id": "share-a", "tf_resume": True, "tf_detach": False})
    (tmp_path / "resume-a.out").write_text(resumed.stdout)
    assert resumed.returncode == 0, resumed.stdout[-4000:]
    summary_a = book.summary("share-a")
    assert summary_a["status"] == "succeeded", summary_a["checks"]
    for host in (0, 1):
        assert worker_ports(book, host, "share-a", "retry-1/") == ports["share-a"][host]
    no_process_left(book, "share-a")
    for host in (0, 1):
        assert reserved_runs(book, host) == [], reserved_runs(book, host)
