"""Task types from the inventory (issue 41): the typed cluster spec, each process's
TF_CONFIG, the read-back, the launch's entry for a ParameterServerStrategy server, the
supervisor's peers and the verdict's rules for each shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import tf_cluster
import tf_launch
import tf_worker_config
from conftest import load_module
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import cluster_checksum
from tf_cluster import AnsibleFilterError, tf_cluster_spec
from tf_causes import SERVER_STOPPED_REASON
from tf_verdict import judge

from test_tf_verdict import METRICS, checks_of, worker_log

COLLECTION = "ansible_collections.tf_runbook.multiworker.plugins"


def host(name: str, kind: str | None = None, slots: int = 1, port: int = 2222) -> dict[str, Any]:
    entry = {"host": name, "address": f"{name}.example", "port": port, "slots": slots}
    if kind is not None:
        entry["type"] = kind
    return entry


def ps_spec() -> dict[str, Any]:
    # In the order the role gives them (chief, workers, ps), and shuffled: the same spec.
    return tf_cluster_spec([host("w1"), host("p0", "ps"), host("c", "chief"), host("w2", slots=2)])


def test_without_types_the_spec_is_the_first_shape() -> None:
    spec = tf_cluster_spec([host("a"), host("b", slots=2)])
    assert spec["cluster"] == {"worker": ["a.example:2222", "b.example:2222", "b.example:2223"]}
    assert [(w["type"], w["task_index"], w["index"]) for w in spec["workers"]] == [
        ("worker", 0, 0), ("worker", 1, 1), ("worker", 2, 2)]  # fmt: skip
    assert spec["shape"] == "mirrored" and spec["chief"] == "a"
    assert tf_worker_config.tf_config(spec, 2) == {"cluster": spec["cluster"], "task": {"type": "worker", "index": 2}}


def test_an_explicit_chief_comes_first_whatever_the_inventory_order() -> None:
    spec = tf_cluster_spec([host("w1"), host("c", "chief"), host("w2")])
    assert spec["cluster"] == {"chief": ["c.example:2222"], "worker": ["w1.example:2222", "w2.example:2222"]}
    assert [(w["index"], w["host"], w["type"], w["task_index"]) for w in spec["workers"]] == [
        (0, "c", "chief", 0), (1, "w1", "worker", 0), (2, "w2", "worker", 1)]  # fmt: skip
    assert spec["chief"] == "c" and spec["shape"] == "mirrored" and spec["size"] == 3
    assert [tf_worker_config.tf_config(spec, i)["task"] for i in range(3)] == [
        {"type": "chief", "index": 0}, {"type": "worker", "index": 0}, {"type": "worker", "index": 1}]  # fmt: skip


def test_parameter_servers_make_the_ps_shape() -> None:
    spec = tf_cluster_spec([host("c", "chief"), host("w1"), host("p0", "ps")])
    assert spec["shape"] == "ps"
    assert spec["cluster"] == {"chief": ["c.example:2222"], "worker": ["w1.example:2222"], "ps": ["p0.example:2222"]}
    assert [(w["host"], w["type"]) for w in spec["workers"]] == [("c", "chief"), ("w1", "worker"), ("p0", "ps")]
    assert tf_worker_config.tf_config(spec, 2) == {"cluster": spec["cluster"], "task": {"type": "ps", "index": 0}}
    assert spec["checksum"] == cluster_checksum(spec["cluster"])


@pytest.mark.parametrize(
    ("hosts", "message"),
    [
        ([host("c1", "chief"), host("c2", "chief"), host("w")], r"tf_chief holds 2 hosts \(c1, c2\): at most one chief"),
        ([host("c", "chief", slots=2), host("w")], r"host c: a chief runs one task, tf_worker_slots must be 1"),
        ([host("w"), host("p", "ps")], r"ParameterServerStrategy needs a chief"),
        ([host("c", "chief"), host("p", "ps")], r"tf_ps is not empty but tf_workers is"),
        ([host("e", "evaluator")], r"nothing trains"),
        ([host("w"), host("e1", "evaluator"), host("e2", "evaluator")], r"at most one evaluator"),
        ([host("w"), host("e", "evaluator", slots=2)], r"host e: an evaluator runs one task, tf_worker_slots must be 1"),
        ([host("w", "coordinator")], r"host w: task type 'coordinator' is not one of chief, worker, ps, evaluator"),
    ],
)
def test_shapes_tensorflow_cannot_run_are_refused(hosts: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(AnsibleFilterError, match=message):
        tf_cluster_spec(hosts)


def test_a_spare_takes_the_type_of_the_host_it_replaces() -> None:
    spare = {**host("s"), "spare": True}
    spec = tf_cluster_spec([host("c", "chief"), host("w1"), host("p0", "ps"), spare])
    taken = tf_cluster.tf_cluster_takeover(spec, {"p0": "s"})
    assert [(w["host"], w["type"], w["task_index"]) for w in taken["workers"]] == [
        ("c", "chief", 0), ("w1", "worker", 0), ("s", "ps", 0)]  # fmt: skip


def readbacks(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"host": w["host"], "index": w["index"], "content": json.dumps(tf_worker_config.tf_config(spec, w["index"]))}
            for w in spec["workers"]]  # fmt: skip


def test_the_read_back_checks_each_process_type_and_index() -> None:
    spec = ps_spec()
    assert tf_worker_config.tf_config_problems(readbacks(spec), spec) == []
    swapped = readbacks(spec)
    # worker-1 and worker-2 given each other's task: the same cluster, the wrong task.
    swapped[1]["content"], swapped[2]["content"] = swapped[2]["content"], swapped[1]["content"]
    problems = tf_worker_config.tf_config_problems(swapped, spec)
    assert problems == ["host w1 worker-1: task is worker:1, expected worker:0",
                        "host w2 worker-2: task is worker:0, expected worker:1"]  # fmt: skip


def test_the_hosts_own_read_back_check_knows_the_types() -> None:
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run_files import read_back_problems

    spec = ps_spec()
    endpoints = [w["endpoint"] for w in spec["workers"]]
    items = readbacks(spec)
    assert read_back_problems(items, endpoints) == []
    assert read_back_problems([{**items[3], "index": 2}], endpoints) == ["worker-2: task.index is 3, expected 2"]


def test_the_servers_of_the_ps_shape_start_the_runbooks_own_entry() -> None:
    spec = ps_spec()
    user = tf_launch.tf_launch_entry(spec, "c", "train.py", ["--strategy=ps"], "cluster_workers=")
    assert user == {"script": "train.py", "job_args": ["--strategy=ps"], "startup_pattern": "cluster_workers=", "evaluator": ""}
    for name in ("w1", "w2", "p0"):
        assert tf_launch.tf_launch_entry(spec, name, "train.py", ["--strategy=ps"], "cluster_workers=") == {
            "script": "tf_ps_server.py", "job_args": [], "startup_pattern": "server_started", "evaluator": ""}  # fmt: skip
        # With the controller timeout: how long a server no runbook stopped waits for one.
        assert tf_launch.tf_launch_entry(spec, name, "train.py", [], "x", None, 60)["job_args"] == ["--coordinator-grace", "60"]
    mirrored = tf_cluster_spec([host("c", "chief"), host("w1")])
    assert tf_launch.tf_launch_entry(mirrored, "w1", "train.py", [], "x")["script"] == "train.py"
    assert any(f["name"] == "tf_ps_server.py" for f in tf_launch.tf_supervisor_files())


def test_the_evaluator_starts_its_program_and_every_supervisor_learns_its_endpoint() -> None:
    """The evaluator's host runs tf_evaluator_script (or the training script with its
    arguments and --evaluate), joined once started; every entry names the evaluator's
    endpoint, which the launch hands every supervisor (the chief pushes there)."""
    spec = tf_cluster_spec([host("c", "chief"), host("w1"), host("e", "evaluator", port=2300)])
    assert [w["type"] for w in spec["workers"]] == ["chief", "worker", "evaluator"]
    assert spec["cluster"] == {"chief": ["c.example:2222"], "worker": ["w1.example:2222"]}
    assert tf_launch.tf_launch_entry(spec, "e", "train.py", ["--epochs=2"], "cluster_workers=") == {
        "script": "train.py", "job_args": ["--epochs=2", "--evaluate"], "startup_pattern": "", "evaluator": "e.example:2300"}
    own = tf_launch.tf_launch_entry(spec, "e", "train.py", ["--epochs=2"], "x", {"script": "eval.py", "args": ["-v"]})
    assert own == {"script": "eval.py", "job_args": ["-v"], "startup_pattern": "", "evaluator": "e.example:2300"}
    assert tf_launch.tf_launch_entry(spec, "c", "train.py", [], "x")["evaluator"] == "e.example:2300"
    assert any(f["name"] == "tf_checkpoint_push.py" for f in tf_launch.tf_supervisor_files())


def test_the_supervisor_watches_every_task_by_the_runbooks_index(supervisor_path: Path) -> None:
    supervisor = load_module("tf_supervisor", supervisor_path)
    spec = ps_spec()
    own, peers = supervisor.cluster_peers(tf_worker_config.tf_config(spec, 3))
    assert own == 2223
    assert peers == [(0, "c.example", 2222), (1, "w1.example", 2222), (2, "w2.example", 2222), (4, "p0.example", 2222)]


def test_the_evaluators_supervisor_listens_on_its_endpoints_port_and_the_chief_pushes(supervisor_path: Path) -> None:
    supervisor = load_module("tf_supervisor", supervisor_path)
    spec = tf_cluster_spec([host("c", "chief"), host("w1", slots=2), host("e", "evaluator", port=2300)])
    configs = [tf_worker_config.tf_config(spec, i) for i in range(4)]
    assert configs[3]["task"] == {"type": "evaluator", "index": 0} and "evaluator" not in configs[3]["cluster"]
    assert supervisor.cluster_peers(configs[3], "e.example:2300") == (2300, [])
    with pytest.raises(ValueError, match=r"needs its endpoint \(--evaluator\)"):
        supervisor.cluster_peers(configs[3])
    # The evaluator watches no peer, and no training worker watches it.
    assert all(port != 2300 for i in range(3) for _n, _h, port in supervisor.cluster_peers(configs[i])[1])
    assert [supervisor.sidecar_part(c, "e.example:2300") for c in configs] == ["chief", "", "", "evaluator"]
    assert [supervisor.sidecar_part(c, "") for c in configs] == ["", "", "", ""]


def test_the_evaluator_is_stopped_by_the_runbook_its_grace_after_the_training_ended(supervisor_path: Path) -> None:
    """The chief's end heard at t=100: nothing before 100 + grace, then a stop by the
    runbook, recorded as the training's end (exit.json's training_ended)."""
    from types import SimpleNamespace

    supervisor = load_module("tf_supervisor", supervisor_path)
    push = load_module("tf_checkpoint_push", supervisor_path.parent / "tf_checkpoint_push.py")
    receiver = push.Receiver.__new__(push.Receiver)
    receiver.ended = None
    watch = SimpleNamespace(sidecar=receiver, run=SimpleNamespace(args=SimpleNamespace(evaluator_grace=20.0)))
    ending = supervisor.Ending()
    assert supervisor.JobWatch.training_over(watch, 500.0, ending) is False
    receiver.ended = (0, 100.0)
    assert supervisor.JobWatch.training_over(watch, 119.0, ending) is False and ending.stopped_by is None
    assert supervisor.JobWatch.training_over(watch, 120.0, ending) is True
    assert (ending.stopped_by, ending.training_ended) == ("runbook", True)
    assert ending.reason.startswith("the training ended (the chief's exit status 0): the evaluator was stopped by the runbook 20 s")
    # The chief's side never stops its own job for it.
    chief = SimpleNamespace(sidecar=push.Pusher(Path("/nonexistent"), ("127.0.0.1", 1), b"k", "r"), run=watch.run)
    assert supervisor.JobWatch.training_over(chief, 1e9, supervisor.Ending()) is False


def test_the_server_entry_ends_once_the_coordinator_it_saw_is_gone(supervisor_path: Path) -> None:
    server = load_module("tf_ps_server", supervisor_path.parent / "tf_ps_server.py")
    watch = server.CoordinatorWatch(gone=3)
    # Not up yet: no end, however long.
    assert [watch.ended(False, t) for t in (0, 10, 20)] == [False, False, False]
    assert watch.ended(True, 21) is False
    # A shut port for less than 3 s, then open again: still training.
    assert [watch.ended(False, 22), watch.ended(True, 24)] == [False, False]
    assert [watch.ended(False, 25), watch.ended(False, 27), watch.ended(False, 28)] == [False, False, True]


def test_the_server_exits_0_on_the_runbooks_stop_at_the_end_and_dies_of_any_other_sigterm(
    supervisor_path: Path, tmp_path: Path
) -> None:
    """The runbook's stop at the run's end (its stop request naming the cause ``stopped``)
    ends a server with exit status 0; a SIGTERM without it (a preemption, a stop for a
    failure) kills it as a signal does, and the supervisor records that."""
    import subprocess
    import sys

    code = (
        "import os, signal, sys, time\n"
        f"sys.path.insert(0, {str(supervisor_path.parent)!r})\n"
        "import tf_ps_server\n"
        "signal.signal(signal.SIGTERM, tf_ps_server.on_stop('worker=3 task=ps:0'))\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    for request, status, line in (
        ({"by": "runbook", "reason": "x", "cause": "stopped"}, 0, "worker=3 task=ps:0 server_stopped by=runbook"),
        ({"by": "runbook", "reason": "x", "cause": "stalled"}, -15, ""),
        (None, -15, ""),
    ):
        stop = tmp_path / "stop.json"
        stop.unlink(missing_ok=True)
        if request is not None:
            stop.write_text(json.dumps(request))
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        proc.terminate()
        out, _ = proc.communicate(timeout=20)
        assert (proc.returncode, out.strip()) == (status, line)


def test_the_runbooks_stop_that_lands_inside_a_print_still_ends_the_server_with_0(
    supervisor_path: Path, tmp_path: Path
) -> None:
    """The SIGTERM may land while the server's main thread is inside a print (its handler
    runs there): the handler's line must not need the buffered stdout, which is not
    reentrant (a RuntimeError exited 1, a failure, in a loaded CI run). Made certain here:
    stdout's raw write sends the SIGTERM itself, so the handler runs inside the flush."""
    import subprocess
    import sys

    code = (
        "import io, os, signal, sys\n"
        f"sys.path.insert(0, {str(supervisor_path.parent)!r})\n"
        "import tf_ps_server\n"
        "signal.signal(signal.SIGTERM, tf_ps_server.on_stop('worker=3 task=ps:0'))\n"
        "class Raw(io.RawIOBase):\n"
        "    def writable(self):\n"
        "        return True\n"
        "    def write(self, data):\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        return os.write(1, bytes(data))\n"
        "sys.stdout = io.TextIOWrapper(io.BufferedWriter(Raw()))\n"
        "print('a line of the server', flush=True)\n"
    )
    (tmp_path / "stop.json").write_text(json.dumps({"by": "runbook", "reason": "x", "cause": "stopped"}))
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert (proc.returncode, proc.stdout.strip()) == (0, "worker=3 task=ps:0 server_stopped by=runbook"), proc.stderr[-2000:]


def test_a_server_no_runbook_stopped_is_judged_ended_with_the_coordinator() -> None:
    gone = {"returncode": 0, "reason": "exited", "stopped_by": None, "joined": True,
            "cause": {"kind": "coordinator-gone", "detail": "ended with the coordinator"}}  # fmt: skip
    checks = checks_of(judge([ps_worker(i, **({"exit": gone} if i == 3 else {})) for i in range(4)], 4,
                             "multiworker-complete.txt"))  # fmt: skip
    assert all(c["ok"] is not False for c in checks.values()), {n: c["detail"] for n, c in checks.items()}
    assert checks["servers_joined"]["detail"] == (
        "3 server(s) joined, each stopped once the chief (coordinator) ended (1 by itself, no runbook left to stop it)")


# --- the verdict ---------------------------------------------------------------------------

PS_CLUSTER = {"chief": ["10.0.0.1:2222"], "worker": ["10.0.0.2:2222", "10.0.0.3:2222"], "ps": ["10.0.0.4:2222"]}
PS_TASKS = [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0)]


def ps_worker(index: int, **changes: Any) -> dict[str, Any]:
    kind, number = PS_TASKS[index]
    if kind == "chief":
        log = worker_log(0, cluster_workers=2, replicas=1)
    else:
        log = f"worker={index} task={kind}:{number} server_started target=grpc://x\n" \
              f"worker={index} task={kind}:{number} server_stopped by=runbook\n"
    exit_ = {"returncode": 0, "signal": None, "reason": "exited", "stopped_by": None, "joined": True}
    if kind != "chief":
        # Stopped by the runbook once the coordinator ended (the wait's stop, tf_worker_stop).
        exit_ = {**exit_, "stopped_by": "runbook", "reason": SERVER_STOPPED_REASON,
                 "cause": {"kind": "stopped", "detail": SERVER_STOPPED_REASON}}  # fmt: skip
    entry: dict[str, Any] = {
        "index": index,
        "host": f"node{index}",
        "dir": f"/runs/r/node{index}/worker-{index}",
        "log": log,
        "exit": exit_,
        "config": {"cluster": PS_CLUSTER, "task": {"type": kind, "index": number}},
        "marker": index == 0,
    }
    entry.update(changes)
    return entry


def test_the_ps_shape_judges_the_chiefs_metrics_and_that_every_server_joined() -> None:
    verdict = judge([ps_worker(i) for i in range(4)], 4, "multiworker-complete.txt")
    checks = checks_of(verdict)
    assert all(c["ok"] is not False for c in checks.values()), {n: c["detail"] for n, c in checks.items()}
    assert checks["servers_joined"]["detail"] == "3 server(s) joined, each stopped once the chief (coordinator) ended"
    assert checks["cluster_seen"]["detail"] == "the chief (coordinator) saw 2 workers"
    assert verdict["metrics"] == {str(e): m for e, m in METRICS.items()}


@pytest.mark.parametrize(
    ("index", "changes", "failing", "detail"),
    [
        (3, {"exit": {"returncode": 0, "reason": "exited", "stopped_by": None, "joined": False}}, "servers_joined",
         "worker 3 (node3, ps:0): its server never joined the cluster"),
        (2, {"exit": {"returncode": 0, "reason": "exited", "stopped_by": None, "joined": True}}, "servers_joined",
         "worker 2 (node2, worker:1): exited 0 without the coordinator having ended"),
        (3, {"exit": {"returncode": 137, "signal": "SIGKILL", "reason": "exited", "stopped_by": None, "joined": True},
             "log": "worker=3 task=ps:0 server_started\n"},
         "exit_status", "worker 3 (node3, ps:0): exit status 137 (exited)"),
        (1, {"config": {"cluster": PS_CLUSTER, "task": {"type": "worker", "index": 1}}}, "worker_index",
         "worker 1 (node1, worker:1): TF_CONFIG task worker:1"),
    ],
)
def test_a_server_that_did_not_join_stop_at_the_end_or_run_as_itself_fails_the_run(
    index: int, changes: dict[str, Any], failing: str, detail: str
) -> None:
    workers = [ps_worker(i, **(changes if i == index else {})) for i in range(4)]
    checks = checks_of(judge(workers, 4, "multiworker-complete.txt"))
    assert [n for n, c in checks.items() if c["ok"] is False] == [failing], {n: c["detail"] for n, c in checks.items()}
    assert detail in checks[failing]["detail"]
    if failing == "exit_status":
        # A server that died is not said to have stopped at the end.
        assert checks["servers_joined"]["detail"] == (
            "3 server(s) joined; 2 stopped once the chief (coordinator) ended, the others did not (exit_status)")


def test_an_explicit_chief_of_mirrored_strategy_is_judged_as_today_and_writes_the_marker() -> None:
    cluster = {"chief": ["10.0.0.1:2222"], "worker": ["10.0.0.2:2222"]}
    workers = [
        {"index": i, "host": f"node{i}", "dir": f"/r/node{i}/worker-{i}", "log": worker_log(i),
         "exit": {"returncode": 0, "signal": None, "reason": "exited"}, "marker": i == 0,
         "config": {"cluster": cluster, "task": {"type": kind, "index": 0}}}
        for i, kind in enumerate(("chief", "worker"))
    ]  # fmt: skip
    checks = checks_of(judge(workers, 2, "multiworker-complete.txt"))
    assert all(c["ok"] is True for c in checks.values()), {n: c["detail"] for n, c in checks.items()}
    assert "servers_joined" not in checks
    workers[1]["marker"] = True
    assert checks_of(judge(workers, 2, "multiworker-complete.txt"))["chief_marker"]["detail"] == (
        "worker 1 (node1, worker:0) is not the chief but wrote multiworker-complete.txt")


def write_run(run_dir: Path, workers: list[dict[str, Any]]) -> None:
    for worker in workers:
        i = worker["index"]
        wdir = run_dir / f"node{i}" / f"worker-{i}"
        wdir.mkdir(parents=True)
        (wdir / "worker.log").write_text(worker["log"])
        (wdir / "exit.json").write_text(json.dumps(worker["exit"]))
        (wdir / "tf_config.json").write_text(json.dumps(worker["config"]))
        if worker["marker"]:
            (wdir / "multiworker-complete.txt").write_text("done\n")


def test_the_summary_and_its_table_show_each_task_where_the_inventory_gave_types(tmp_path: Path) -> None:
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_verdict_summary import summarize_run, table

    write_run(tmp_path, [ps_worker(i) for i in range(4)])
    summary = summarize_run("r", str(tmp_path), "multiworker-complete.txt", 4, {}, {})
    assert summary["status"] == "succeeded", summary["checks"]
    assert [w["task"] for w in summary["workers"]] == ["chief:0", "worker:0", "worker:1", "ps:0"]
    rows = [line for line in table(summary) if line.lstrip().startswith(("0 ", "3 "))]
    assert rows[0].endswith("completed        0  chief:0") and rows[1].endswith("stopped          0  ps:0"), rows


def test_the_report_has_a_task_column_where_the_inventory_gave_types(tmp_path: Path) -> None:
    """The HTML report: each worker row of an attempt and of the cluster names its task
    (chief, worker, ps), and a server stopped at the end shows its cause, stopped."""
    import re

    from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_verdict_run import load_attempts
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_verdict_summary import summarize_run, timeline_of
    from report_runs import render

    def report(run_dir: Path, size: int) -> str:
        summary = summarize_run(run_dir.name, str(run_dir), "multiworker-complete.txt", size, {}, {})
        summary["timeline"] = timeline_of(summary, str(run_dir), load_attempts(str(run_dir), "multiworker-complete.txt"))
        return render(summary)

    write_run(tmp_path, [ps_worker(i) for i in range(4)])
    html = report(tmp_path, 4)
    assert html.count("<th>task</th>") == 2, html
    assert re.findall(r'<td class="task">([^<]*)</td>', html) == ["chief:0", "worker:0", "worker:1", "ps:0"] * 2
    assert '<span class="cause stopped">stopped</span> the coordinator ended: servers are stopped by the runbook' in html
    # Without types (the first shape): no task column, the cluster's role as before.
    plain = tmp_path / "plain"
    workers = [ps_worker(i) for i in range(2)]
    for w in workers:
        w["config"] = {"cluster": {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}, "task": {"type": "worker", "index": w["index"]}}
    write_run(plain, workers)
    html = report(plain, 2)
    assert "<th>task</th>" not in html and "<th>role</th>" in html


def test_a_killed_ps_is_named_with_its_task_as_the_runs_reason(tmp_path: Path) -> None:
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_verdict_summary import summarize_run

    stopped = {"returncode": 143, "signal": "SIGTERM", "reason": "stopped by the supervisor: worker 3 failed",
               "stopped_by": "peer", "joined": True, "finished_at": 20.0}
    killed = {"returncode": 137, "signal": "SIGKILL", "reason": "exited", "stopped_by": None, "joined": True,
              "finished_at": 10.0}
    workers = [ps_worker(0, exit=stopped, marker=False), ps_worker(1, exit=stopped), ps_worker(2, exit=stopped),
               ps_worker(3, exit=killed, log="worker=3 task=ps:0 server_started\n")]
    write_run(tmp_path, workers)
    summary = summarize_run("r", str(tmp_path), "multiworker-complete.txt", 4, {}, {})
    assert summary["status"] == "failed"
    assert summary["reason"].startswith("worker 3 (ps:0) on host node3 failed first: "), summary["reason"]


EVAL_CLUSTER = {"chief": ["10.0.0.1:2222"], "worker": ["10.0.0.2:2222"]}


def eval_run(evaluator_exit: dict[str, Any] | None, log: str) -> list[dict[str, Any]]:
    """chief + worker + the sidecar evaluator (worker 2, task evaluator:0)."""
    workers = [
        {"index": i, "host": f"node{i}", "dir": f"/r/node{i}/worker-{i}", "log": worker_log(i),
         "exit": {"returncode": 0, "signal": None, "reason": "exited"}, "marker": i == 0,
         "config": {"cluster": EVAL_CLUSTER, "task": {"type": kind, "index": 0}}}
        for i, kind in enumerate(("chief", "worker"))
    ]  # fmt: skip
    workers.append({"index": 2, "host": "node2", "dir": "/r/node2/worker-2", "log": log, "exit": evaluator_exit,
                    "marker": False, "config": {"cluster": EVAL_CLUSTER, "task": {"type": "evaluator", "index": 0}}})
    return workers


EVAL_LOG = "evaluator started epochs=3\nevaluator epoch=1 binary_accuracy=0.5 loss=0.7\nevaluator epoch=3 binary_accuracy=0.9 loss=0.2\n"
STOPPED_AT_END = {"returncode": -15, "signal": "SIGTERM", "stopped_by": "runbook", "training_ended": True,
                  "reason": "the training ended", "checkpoint_receive": {"received": 3, "required": False}}
FAILED_EVAL = {"returncode": 2, "signal": None, "stopped_by": None, "reason": "exited",
               "checkpoint_receive": {"received": 0, "required": False}}


@pytest.mark.parametrize(
    ("exit_", "status", "line"),
    [
        ({**STOPPED_AT_END, "returncode": 0, "training_ended": False, "stopped_by": None}, "completed",
         "evaluator (worker 2, node2): completed, 2 checkpoint(s) evaluated, the last of epoch 3"),
        (STOPPED_AT_END, "stopped",
         "evaluator (worker 2, node2): stopped by the runbook once the training ended, 2 checkpoint(s) evaluated"),
        (FAILED_EVAL, "failed", "evaluator (worker 2, node2): FAILED, exit status 2: job-error: exited; 2 checkpoint(s) "
         "evaluated, the last of epoch 3; not required: the training went on; log: "),
        (None, "unknown", "FAILED, no exit record came back (its host lost?)"),
    ],
)
def test_the_evaluator_is_judged_apart_and_its_failure_is_reported_not_the_runs(
    tmp_path: Path, exit_: dict[str, Any] | None, status: str, line: str
) -> None:
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_verdict_summary import summarize_run, table

    workers = eval_run(exit_, EVAL_LOG)
    if exit_ is None:
        workers[2]["exit"] = {}
    write_run(tmp_path, workers)
    if exit_ is None:
        (tmp_path / "node2" / "worker-2" / "exit.json").unlink()
    summary = summarize_run("r", str(tmp_path), "multiworker-complete.txt", 2, {}, {})
    assert summary["status"] == "succeeded", summary["checks"]
    assert [w["index"] for w in summary["workers"]] == [0, 1] and "evaluator" not in checks_of(summary)
    assert summary["metrics"] == {str(e): m for e, m in METRICS.items()}
    evaluator = summary["evaluator"]
    assert evaluator["status"] == status and evaluator["host"] == "node2"
    assert evaluator["evaluations"] == [{"epoch": 1, "metrics": {"binary_accuracy": "0.5", "loss": "0.7"}},
                                        {"epoch": 3, "metrics": {"binary_accuracy": "0.9", "loss": "0.2"}}]  # fmt: skip
    lines = table(summary)
    assert any(line in shown for shown in lines), lines
    assert "  evaluated epoch 3: binary_accuracy=0.9 loss=0.2" in lines


def test_a_required_evaluator_that_failed_fails_the_run(tmp_path: Path) -> None:
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_verdict_summary import summarize_run

    required = {**FAILED_EVAL, "checkpoint_receive": {"received": 0, "required": True}}
    write_run(tmp_path, eval_run(required, "evaluator started\n"))
    summary = summarize_run("r", str(tmp_path), "multiworker-complete.txt", 2, {}, {})
    assert summary["status"] == "failed"
    assert checks_of(summary)["evaluator"]["detail"].endswith("the run fails (tf_evaluator_required); log: "
                                                              f"{tmp_path}/node2/worker-2/worker.log")
    stopped = {**STOPPED_AT_END, "checkpoint_receive": {"received": 3, "required": True}}
    (tmp_path / "node2" / "worker-2" / "exit.json").write_text(json.dumps(stopped))
    assert summarize_run("r", str(tmp_path), "multiworker-complete.txt", 2, {}, {})["status"] == "succeeded"


@pytest.mark.parametrize(
    ("worker", "failed"),
    [
        ({"returncode": 1}, True),
        ({"returncode": 1, "evaluator": True}, False),
        ({"returncode": 1, "evaluator": True, "required": True}, True),
        ({"returncode": -15, "evaluator": True, "required": True, "training_ended": True}, False),
        ({"returncode": 0, "evaluator": True, "required": True}, False),
    ],
)
def test_the_wait_fails_the_run_for_an_evaluator_only_when_required(worker: dict[str, Any], failed: bool) -> None:
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_worker_records import WORKER_EXITED, report

    entry = {"index": 2, "state": WORKER_EXITED, "joined": True, **worker}
    assert report([entry])["failed_workers"] == ([2] if failed else [])
    assert report([entry])["done"] is True


def test_every_play_of_the_workers_takes_every_task_type() -> None:
    """A play on the workers that left out tf_chief or tf_ps would launch, wait for, stop
    or collect part of a typed cluster."""
    import yaml

    playbooks = Path(__file__).resolve().parents[2] / "playbooks"
    seen = 0
    for path in sorted(playbooks.glob("*.yml")):
        for play in yaml.safe_load(path.read_text(encoding="utf-8")) or []:
            hosts = str(play.get("hosts", "")) if isinstance(play, dict) else ""
            if "tf_workers_group" not in hosts:
                continue
            seen += 1
            for group in ("tf_chief_group", "tf_ps_group", "tf_evaluator_group"):
                assert group in hosts, f"{path.name}: play {play.get('name')!r} leaves out {group}"
    assert seen >= 9


# --- The sidecar evaluator's host lost ------------------------------------------------------

EVAL_SPEC = [{"index": 0, "host": "node0", "type": "chief"}, {"index": 1, "host": "node1", "type": "worker"},
             {"index": 2, "host": "node2", "type": "evaluator"}]  # fmt: skip


@pytest.mark.parametrize(
    ("workers", "required", "hosts"),
    [
        (EVAL_SPEC, False, {"node2": [2]}),
        (EVAL_SPEC, True, {}),
        (EVAL_SPEC, "true", {}),
        # A host that runs a training worker beside the evaluator is the training's.
        (EVAL_SPEC + [{"index": 3, "host": "node2", "type": "worker"}], False, {}),
        (EVAL_SPEC[:2], False, {}),
        (None, False, {}),
    ],
)
def test_the_hosts_whose_loss_the_training_survives(workers: Any, required: Any, hosts: dict[str, list[int]]) -> None:
    from tf_causes import optional_evaluator_hosts

    assert optional_evaluator_hosts(workers, required) == hosts


@pytest.mark.parametrize(
    ("types", "indices", "required", "optional"),
    [
        (["chief", "worker", "evaluator"], [2], False, True),
        (["chief", "worker", "evaluator"], [2], True, False),
        (["chief", "worker", "evaluator"], [1], False, False),
        (["chief", "worker", "evaluator"], [], False, False),
        ([], [2], False, False),
        (None, [0], False, False),
    ],
)
def test_only_an_optional_evaluators_host_writes_no_failure_flag(
    types: Any, indices: list[int], required: bool, optional: bool
) -> None:
    from tf_causes import host_lost_flag, only_optional_evaluator

    assert only_optional_evaluator(types, indices, required) is optional
    flag = host_lost_flag("node2", "ssh: timed out", only_optional_evaluator(types, indices, required))
    assert flag == (None if optional else {"host": "node2", "cause": "host-lost", "reason": "host node2 unreachable: ssh: timed out"})


def wait_statuses() -> dict[str, Any]:
    def status(index: int) -> dict[str, Any]:
        return {"workers": [{"index": index, "state": "exited", "returncode": 0, "reason": "exited"}],
                "done": True, "deadline_passed": False}  # fmt: skip

    return {"node0": status(0), "node1": status(1), "node2": {"unreachable": True, "msg": "timed out"}}


def test_the_optional_evaluators_lost_host_is_reported_apart_and_the_run_stays_ok() -> None:
    from tf_wait import tf_wait_outcome

    hosts = ["node0", "node1", "node2"]
    outcome = tf_wait_outcome(hosts, hosts, wait_statuses(), False, EVAL_SPEC, False)
    assert outcome["ok"] is True and outcome["lost_hosts"] == [] and outcome["failed_workers"] == []
    assert outcome["evaluator_lost"] == [{"host": "node2", "workers": [2], "text": (
        "node2 (the sidecar evaluator) stopped answering: the training goes on without it")}]
    # Required, or without the spec (as before): a lost host as any other.
    for args in ((EVAL_SPEC, True), ()):
        outcome = tf_wait_outcome(hosts, hosts, wait_statuses(), False, *args)
        assert outcome["ok"] is False and outcome["lost_hosts"] == ["node2"] and outcome["evaluator_lost"] == []
    # A training host lost beside it still fails the run.
    statuses = wait_statuses()
    statuses["node1"] = {"unreachable": True}
    outcome = tf_wait_outcome(hosts, hosts, statuses, False, EVAL_SPEC, False)
    assert outcome["ok"] is False and outcome["lost_hosts"] == ["node1"] and [e["host"] for e in outcome["evaluator_lost"]] == ["node2"]


LOST_WAIT = {"ok": True, "lost_hosts": [], "evaluator_lost": [{"host": "node2", "workers": [2], "text": "..."}]}


def test_the_verdict_says_the_evaluators_host_was_lost(tmp_path: Path) -> None:
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_verdict_summary import summarize_run, table

    # The collect left the lost host out: none of its files came back.
    write_run(tmp_path, eval_run(None, "")[:2])
    summary = summarize_run("r", str(tmp_path), "multiworker-complete.txt", 2, {"wait_outcome": LOST_WAIT}, {})
    assert summary["status"] == "succeeded", summary["checks"]
    assert [w["index"] for w in summary["workers"]] == [0, 1] and "evaluator" not in checks_of(summary)
    evaluator = summary["evaluator"]
    assert (evaluator["status"], evaluator["host"], evaluator["index"], evaluator["log"]) == ("lost", "node2", 2, None)
    line = ("evaluator (worker 2, node2): LOST, its host stopped answering during the run, no exit record and no log "
            "came back; 0 checkpoint(s) evaluated; not required: the training went on")
    assert line in table(summary)
    # Without the wait's record: no evaluator entry at all, as before.
    assert summarize_run("r", str(tmp_path), "multiworker-complete.txt", 2, {}, {})["evaluator"] is None


def test_an_evaluator_without_exit_record_on_the_lost_host_is_lost_not_unknown(tmp_path: Path) -> None:
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_verdict_evaluator import (
        evaluator_line,
        with_lost_host,
    )

    entry = {"index": 2, "host": "node2", "status": "unknown", "required": False, "evaluations": [], "cause": None}
    assert with_lost_host(entry, LOST_WAIT)["status"] == "lost"
    assert "LOST, its host stopped answering" in evaluator_line(with_lost_host(entry, LOST_WAIT))
    assert with_lost_host(entry, {"evaluator_lost": []}) is entry
    assert with_lost_host({**entry, "status": "completed"}, LOST_WAIT)["status"] == "completed"
    assert with_lost_host(None, None) is None
