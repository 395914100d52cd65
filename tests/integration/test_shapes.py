"""Task types from the inventory (issue 41): tf_chief, tf_ps and tf_evaluator beside
tf_workers, on network-namespace hosts. Frugal with training runs: tiny epochs, and
one set of hosts for a shape's good run and its failure."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

import yaml
from faults import remote_pid, wait_for_log, wait_until
from nshosts import NamespaceHosts
from test_long_runs import RUN, no_process_left, settings
from test_multihost import Runbook

from helpers import start_playbook


def typed_book(hosts: NamespaceHosts, tmp_path: Path, types: dict[str, str], **inventory: Any) -> Runbook:
    """A Runbook whose inventory moves the hosts named in ``types`` (name -> group) from
    tf_workers to their group, with the same group vars."""
    book = Runbook(hosts, tmp_path, **inventory)
    data = yaml.safe_load(book.inventory.read_text())
    children = data["all"]["children"]
    workers = children["tf_workers"]
    for name, group in types.items():
        entry = children.setdefault(group, {"hosts": {}, "vars": dict(workers["vars"])})
        entry["hosts"][name] = workers["hosts"].pop(name)
    # The groups in the order a user writes them: the chief first, then the workers.
    ordered = {g: children[g] for g in ("tf_chief", "tf_workers", "tf_ps", "tf_evaluator") if g in children}
    data["all"]["children"] = ordered
    book.inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    return book


def remote_json(book: Runbook, host: int, path: str) -> Any:
    rc, out, _ = book.hosts.run(host, f"cat {path}")
    assert rc == 0, path
    return json.loads(out)


def log_of(book: Runbook, host: int, path: str) -> str:
    rc, out, _ = book.hosts.run(host, f"cat {path} 2>/dev/null")
    return out if rc == 0 else ""


def play(book: Runbook, run_id: str, inject: Callable[[], None] | None = None, timeout: float = 600) -> tuple[int, str]:
    """train.yml for ``run_id``, with ``inject`` called while it runs; (status, output)."""
    proc = start_playbook("train.yml", inventory=book.inventory, extra={"tf_runs_dir": str(book.runs), "tf_run_id": run_id})
    try:
        if inject is not None:
            inject()
        out, _ = proc.communicate(timeout=timeout)
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    (book.runs.parent / f"{run_id}.out").write_text(out)
    return proc.returncode, out


def checks_of(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in summary["checks"]}


def test_an_explicit_chief_and_two_workers_train_with_mirrored_strategy(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path, worker_python: str
) -> None:
    """tf_chief (node0) + tf_workers (node1, node2): the chief is task chief:0 and the
    runbook's worker 0, the workers are worker:0 and worker:1 (runbook's 1 and 2); every
    process trained the same epochs and only the chief wrote the marker."""
    hosts = make_ns_hosts(count=3)
    book = typed_book(hosts, tmp_path, {"node0": "tf_chief"}, port=2520,
                      groupvars=settings(worker_python, tf_train_args=["--epochs=2", "--steps-per-epoch=3"]))
    status, out = play(book, "chief")
    assert status == 0, out[-5000:]
    summary = book.summary("chief")
    assert summary["status"] == "succeeded", summary["checks"]
    assert [(w["index"], w["host"]) for w in summary["workers"]] == [(0, "node0"), (1, "node1"), (2, "node2")]
    configs = [remote_json(book, i, f"{RUN}/chief/worker-{i}/tf_config.json") for i in range(3)]
    addresses = [h.address for h in hosts.hosts]
    cluster = {"chief": [f"{addresses[0]}:2520"], "worker": [f"{addresses[1]}:2520", f"{addresses[2]}:2520"]}
    assert [c["task"] for c in configs] == [{"type": "chief", "index": 0}, {"type": "worker", "index": 0},
                                            {"type": "worker", "index": 1}]
    assert all(c["cluster"] == cluster for c in configs)
    assert "worker=2 cluster_workers=3 replicas=3" in log_of(book, 2, f"{RUN}/chief/worker-2/worker.log")
    assert book.exists(0, f"{RUN}/chief/worker-0/multiworker-complete.txt")
    assert not any(book.exists(i, f"{RUN}/chief/worker-{i}/multiworker-complete.txt") for i in (1, 2))
    assert checks_of(summary)["metrics_agree"]["ok"] and checks_of(summary)["chief_marker"]["ok"]
    no_process_left(book, "chief")


def test_parameter_server_strategy_trains_stops_its_servers_and_names_a_killed_ps(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path, worker_python: str
) -> None:
    """tf_chief node0 (the coordinator, the default job's --strategy ps), tf_workers node1
    and node2, tf_ps node3. A good run: the chief's metrics and marker are judged, every
    server joined and was stopped once the chief ended, nothing is left running. Then,
    on the same hosts, the ps killed mid-run: the run fails naming it."""
    hosts = make_ns_hosts(count=4)
    book = typed_book(hosts, tmp_path, {"node0": "tf_chief", "node3": "tf_ps"}, port=2530,
                      groupvars=settings(worker_python, tf_train_args=["--strategy=ps", "--epochs=3", "--steps-per-epoch=4"]))
    status, out = play(book, "ps-ok")
    assert status == 0, out[-5000:]
    summary = book.summary("ps-ok")
    assert summary["status"] == "succeeded", summary["checks"]
    checks = checks_of(summary)
    assert checks["servers_joined"]["ok"], checks["servers_joined"]
    assert checks["servers_joined"]["detail"].startswith("3 server(s) joined")
    assert checks["cluster_seen"]["ok"] and checks["chief_marker"]["ok"] and checks["epochs_complete"]["ok"]
    assert sorted(summary["metrics"]) == ["1", "2", "3"]
    assert [remote_json(book, i, f"{RUN}/ps-ok/worker-{i}/tf_config.json")["task"] for i in range(4)] == [
        {"type": "chief", "index": 0}, {"type": "worker", "index": 0}, {"type": "worker", "index": 1},
        {"type": "ps", "index": 0}]  # fmt: skip
    # The run ended when the chief ended: the wait stopped the servers, recorded as stopped
    # by the runbook (exit 0, cause stopped), not failed and not completed.
    assert re.search(r"node[123]: the coordinator ended: stopping the servers worker-[123]", out), out[-4000:]
    assert re.search(r"node3 worker-3 \(ps:0\): stopped \(by the runbook: the coordinator ended\)", out), out[-4000:]
    for i in (1, 2, 3):
        exit_ = remote_json(book, i, f"{RUN}/ps-ok/worker-{i}/exit.json")
        assert exit_["returncode"] == 0 and exit_["joined"] is True, exit_
        assert exit_["stopped_by"] == "runbook" and exit_["cause"]["kind"] == "stopped", exit_
        assert exit_["cause"]["detail"] == "the coordinator ended: servers are stopped by the runbook", exit_
        log = log_of(book, i, f"{RUN}/ps-ok/worker-{i}/worker.log")
        assert re.search(rf"^worker={i} task=(worker|ps):\d server_stopped by=runbook$", log, re.M), log[-2000:]
    assert [w["cause"]["kind"] for w in summary["workers"]] == ["completed", "stopped", "stopped", "stopped"]
    assert "epoch=3 " in log_of(book, 0, f"{RUN}/ps-ok/worker-0/worker.log")
    no_process_left(book, "ps-ok")

    # The ps killed once the coordinator has trained an epoch.
    # The same inventory, a longer run.
    data = yaml.safe_load(book.inventory.read_text())
    for group in data["all"]["children"].values():
        group["vars"]["tf_train_args"] = ["--strategy=ps", "--epochs=40", "--steps-per-epoch=40"]
    book.inventory.write_text(yaml.safe_dump(data, sort_keys=False))

    def kill_ps() -> None:
        wait_for_log(hosts, 0, f"{RUN}/ps-killed/worker-0/worker.log", "epoch=1 ")
        assert hosts.run(3, f"kill -9 {remote_pid(hosts, 3, f'{RUN}/ps-killed/worker-3')}")[0] == 0

    status, out = play(book, "ps-killed", kill_ps)
    assert status != 0, out[-3000:]
    summary = book.summary("ps-killed")
    assert summary["status"] == "failed"
    assert re.search(r"worker 3 \(ps:0\) on host node3 failed first: killed \(", out), out[-4000:]
    assert summary["reason"].startswith("worker 3 (ps:0) on host node3 failed first: killed"), summary["reason"]
    checks = checks_of(summary)
    assert "worker 3 (node3, ps:0): exit status 137" in checks["exit_status"]["detail"]
    assert "the others did not" in checks["servers_joined"]["detail"]
    no_process_left(book, "ps-killed")


def test_a_sidecar_evaluator_evaluates_the_chiefs_checkpoints_apart_and_its_failure_is_only_reported(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path, worker_python: str
) -> None:
    """tf_chief node0 + tf_workers node1 + tf_evaluator node2 (hosts that share no
    filesystem): the chief's supervisor pushes each checkpoint to node2's over the
    evaluator's port; the default job's --evaluate prints one line per checkpoint it
    evaluated, the last epoch's among them; the verdict shows them apart from the
    training's metrics, and the evaluator completed or was stopped by the runbook, never
    failed. Then, on the same hosts, an evaluator program that fails: the training still
    succeeds and the failure is reported with its log. Last, the evaluator's host cut off
    mid-training: reported as lost, the training goes on, ansible-playbook exits 0."""
    hosts = make_ns_hosts(count=3)
    book = typed_book(hosts, tmp_path, {"node0": "tf_chief", "node2": "tf_evaluator"}, port=2540,
                      groupvars=settings(worker_python, tf_train_args=["--epochs=3", "--steps-per-epoch=3"],
                                         tf_evaluator_grace=20))
    status, out = play(book, "eval-ok")
    assert status == 0, out[-5000:]
    summary = book.summary("eval-ok")
    assert summary["status"] == "succeeded", summary["checks"]
    # The training is judged without the evaluator: two workers, their metrics alone.
    assert [(w["index"], w["host"]) for w in summary["workers"]] == [(0, "node0"), (1, "node1")]
    assert checks_of(summary)["metrics_agree"]["ok"] and sorted(summary["metrics"]) == ["1", "2", "3"]
    evaluator = summary["evaluator"]
    assert (evaluator["host"], evaluator["index"]) == ("node2", 2)
    assert evaluator["status"] in ("completed", "stopped"), evaluator
    assert evaluator["status"] == "completed" or evaluator["training_ended"], evaluator
    epochs = [e["epoch"] for e in evaluator["evaluations"]]
    assert epochs and epochs[-1] == 3 and epochs == sorted(set(epochs)), evaluator["evaluations"]
    assert set(evaluator["evaluations"][-1]["metrics"]) == {"binary_accuracy", "loss"}
    log = log_of(book, 2, f"{RUN}/eval-ok/worker-2/worker.log")
    assert [int(e) for e in re.findall(r"^evaluator epoch=(\d+) ", log, re.M)] == epochs, log[-2000:]
    assert remote_json(book, 2, f"{RUN}/eval-ok/worker-2/tf_config.json")["task"] == {"type": "evaluator", "index": 0}
    # The checkpoints came over the evaluator's port, whole: its pointer names a backup it holds.
    received = remote_json(book, 2, f"{RUN}/eval-ok/worker-2/exit.json")["checkpoint_receive"]
    assert received["received"] >= 1 and received["refused"] == [], received
    latest = log_of(book, 2, f"{RUN}/eval-ok/checkpoints/worker-0/latest").split()
    assert latest[0] == "3" and book.exists(2, f"{RUN}/eval-ok/checkpoints/worker-0/{latest[1]}/latest.weights.h5")
    assert "evaluated epoch 3: binary_accuracy=" in out and "FAILED" not in summary_lines(out)
    no_process_left(book, "eval-ok")

    # The same hosts, an evaluation program that fails at once: reported, the training goes on.
    data = yaml.safe_load(book.inventory.read_text())
    for group in data["all"]["children"].values():
        group["vars"].update(tf_evaluator_script="multiworker_train.py", tf_evaluator_args=["--evaluate", "--no-such-flag"])
    book.inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    status, out = play(book, "eval-bad")
    assert status == 0, out[-5000:]
    summary = book.summary("eval-bad")
    assert summary["status"] == "succeeded" and sorted(summary["metrics"]) == ["1", "2", "3"], summary["checks"]
    evaluator = summary["evaluator"]
    assert evaluator["status"] == "failed" and evaluator["exit_status"] == 2 and not evaluator["required"], evaluator
    assert "evaluator" not in checks_of(summary)
    assert re.search(r"evaluator \(worker 2, node2\): FAILED, exit status 2: .*not required: the training went on; "
                     r"log: \S+/eval-bad/node2/worker-2/worker.log", out), summary_lines(out)
    no_process_left(book, "eval-bad")

    # The same hosts, the evaluator's host cut off for good mid-training (after the chief's
    # epoch 2, ten epochs of 40 steps): not required, so its loss is reported, the training
    # goes on, the collect and the verdict leave the host out, and the playbook exits 0.
    data = yaml.safe_load(book.inventory.read_text())
    for group in data["all"]["children"].values():
        for name in ("tf_evaluator_script", "tf_evaluator_args"):
            group["vars"].pop(name, None)
        group["vars"]["tf_train_args"] = ["--epochs=10", "--steps-per-epoch=40"]
    book.inventory.write_text(yaml.safe_dump(data, sort_keys=False))

    def cut_evaluator() -> None:
        wait_for_log(hosts, 0, f"{RUN}/eval-lost/worker-0/worker.log", "epoch=2 ")
        hosts.cut_network(2)

    status, out = play(book, "eval-lost", cut_evaluator)
    assert status == 0, out[-5000:]
    assert "node2 (the sidecar evaluator) stopped answering: the training goes on without it" in out, out[-5000:]
    summary = book.summary("eval-lost")
    assert summary["status"] == "succeeded" and sorted(summary["metrics"], key=int)[-1] == "10", summary["checks"]
    assert [(w["index"], w["host"]) for w in summary["workers"]] == [(0, "node0"), (1, "node1")]
    evaluator = summary["evaluator"]
    assert (evaluator["status"], evaluator["host"], evaluator["index"]) == ("lost", "node2", 2), evaluator
    assert summary["context"]["wait"]["evaluator_lost"][0]["host"] == "node2"
    assert summary["context"]["wait"]["lost_hosts"] == []
    assert re.search(r"evaluator \(worker 2, node2\): LOST, its host stopped answering during the run.*"
                     r"not required: the training went on", out), summary_lines(out)
    assert not (book.runs / "eval-lost" / "node2" / "worker-2" / "worker.log").exists()
    # The chief's supervisor may still be telling the lost evaluator that the training ended
    # (its push gives up after its own timeouts, tf_checkpoint_push's IO_SECONDS and
    # END_SECONDS); then nothing of the run is left on the hosts that answer.
    wait_until(lambda: book.run_processes(0, "eval-lost") == [], 120, "the chief's supervisor to end")
    assert book.run_processes(1, "eval-lost") == [], "processes of eval-lost left on node1"


def summary_lines(out: str) -> str:
    """The verdict's table as the output shows it."""
    return "\n".join(line for line in out.splitlines() if "evaluator" in line or "FAIL" in line)
