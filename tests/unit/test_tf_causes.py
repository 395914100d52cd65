"""Why a worker ended (plugins/module_utils/tf_causes.py, issue 23): a cause from the exit
record and the log's last lines, with TensorFlow's and Python's real traceback texts."""

from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_causes, tf_run

# Printed by TensorFlow 2.21 (CPU) and Python 3.12 on this machine.
MODULE_NOT_FOUND = """\
I0000 00:00:1733330000.000000   12345 cpu_feature_guard.cc:227] This TensorFlow binary is optimized
Traceback (most recent call last):
  File "/home/t/tf-runbook/runs/r1/job/train.py", line 3, in <module>
    import nonexistent_pkg_xyz
ModuleNotFoundError: No module named 'nonexistent_pkg_xyz'
"""
RESOURCE_EXHAUSTED = """\
Traceback (most recent call last):
  File "/home/t/tf-runbook/runs/r1/job/train.py", line 88, in <module>
    model.fit(dataset, epochs=3)
  File "/venv/lib/python3.12/site-packages/keras/src/utils/traceback_utils.py", line 122, in error_handler
    raise e.with_traceback(filtered_tb) from None
tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[1048576,1048576] and type float on /job:worker/replica:0/task:0/device:CPU:0 by allocator cpu
\t [[{{node dense/MatMul}}]]
Hint: If you want to see a list of allocated tensors when OOM happens, add report_tensor_allocations_upon_oom to RunOptions for current allocation info.
"""
UNAVAILABLE = """\
Traceback (most recent call last):
  File "/home/t/tf-runbook/runs/r1/job/train.py", line 88, in <module>
    model.fit(dataset, epochs=3)
tensorflow.python.framework.errors_impl.UnavailableError: Collective ops is aborted by: Task /job:worker/replica:0/task:1 heartbeat timeout. This indicates that the remote task has failed, got preempted, or crashed unexpectedly.
The error could be from a previous operation. Restart your program to reset.
Additional GRPC error information from remote target /job:worker/replica:0/task:0:
"""
DEADLINE_EXCEEDED = """\
Traceback (most recent call last):
  File "/j/train.py", line 9, in <module>
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
tensorflow.python.framework.errors_impl.DeadlineExceededError: Barrier timed out. Barrier_id: PreemptionSyncManager
"""
MEMORY_ERROR = """\
Traceback (most recent call last):
  File "/j/train.py", line 1, in <module>
    x = bytearray(10**18)
MemoryError
"""
CHAINED = """\
Traceback (most recent call last):
  File "/j/train.py", line 4, in load
    return json.load(handle)
json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/j/train.py", line 9, in <module>
    load()
  File "/j/train.py", line 6, in load
    raise RuntimeError("config configs/base.json is not JSON")
RuntimeError: config configs/base.json is not JSON
"""
COORDINATION_ABORT = """\
E0000 00:00:1733330000.1   777 coordination_service_agent.cc:332] Polled an error from coordination service (this can be an error from this or another task).
F0000 00:00:1733330000.2   777 coordination_service_agent.cc:510] Task /job:worker/replica:0/task:1 heartbeat timeout. This indicates that the remote task has failed, got preempted, or crashed unexpectedly. Check the task logs for an earlier error or scheduler events (e.g. preemption, eviction) to debug further.
"""


def record(returncode: int = 1, sig: str | None = None, stopped_by: str | None = None, reason: str = "exited") -> dict[str, Any]:
    return {"returncode": returncode, "signal": sig, "stopped_by": stopped_by, "reason": reason}


@pytest.mark.parametrize(
    ("log", "kind", "exception", "message"),
    [
        (MODULE_NOT_FOUND, "job-error", "ModuleNotFoundError", "No module named 'nonexistent_pkg_xyz'"),
        (RESOURCE_EXHAUSTED, "out-of-memory", "ResourceExhaustedError", "OOM when allocating tensor with shape[1048576,1048576] and type float on /job:worker/replica:0/task:0/device:CPU:0 by allocator cpu"),
        (UNAVAILABLE, "peer-lost", "UnavailableError", "Collective ops is aborted by: Task /job:worker/replica:0/task:1 heartbeat timeout. This indicates that the remote task has failed, got preempted, or crashed unexpectedly."),
        (DEADLINE_EXCEEDED, "peer-lost", "DeadlineExceededError", "Barrier timed out. Barrier_id: PreemptionSyncManager"),
        (MEMORY_ERROR, "out-of-memory", "MemoryError", ""),
        (CHAINED, "job-error", "RuntimeError", "config configs/base.json is not JSON"),
    ],
    ids=["module-not-found", "resource-exhausted", "unavailable", "deadline-exceeded", "memory-error", "chained"],
)  # fmt: skip
def test_a_traceback_names_the_cause(log: str, kind: str, exception: str, message: str) -> None:
    cause = tf_causes.classify(record(), log.splitlines())
    assert (cause["kind"], cause["exception"], cause["message"]) == (kind, exception, message)
    assert cause["detail"].startswith(exception)
    assert "\n" not in cause["detail"]


def test_the_coordination_services_abort_is_a_lost_peer() -> None:
    cause = tf_causes.classify(record(134, "SIGABRT"), COORDINATION_ABORT.splitlines())
    assert cause["kind"] == "peer-lost"
    assert "heartbeat timeout" in cause["detail"]


def test_the_exception_line_is_found_without_the_traceback_start() -> None:
    tail = ["    raise e", "ValueError: shapes (3,) and (4,) not aligned"]
    cause = tf_causes.classify(record(), tail)
    assert (cause["kind"], cause["exception"], cause["message"]) == ("job-error", "ValueError", "shapes (3,) and (4,) not aligned")


@pytest.mark.parametrize(
    ("rec", "oom_kills", "kind"),
    [
        (record(0), None, "completed"),
        (record(tf_run.PREEMPTION_EXIT), None, "preempted"),
        (record(tf_run.PREEMPTION_EXIT, stopped_by="signal", reason="stopped by signal SIGTERM"), None, "preempted"),
        (record(tf_run.PREEMPTION_EXIT, stopped_by="peer", reason="worker 1 failed"), None, "preempted"),
        (record(143, "SIGTERM", "signal", "stopped by signal SIGTERM"), None, "preempted"),
        (record(143, "SIGTERM"), None, "preempted"),
        (record(143, "SIGTERM", "operator", "stopped by an operator"), None, "operator"),
        (record(137, "SIGKILL", "runbook", "stopped by the runbook"), 3, "runbook"),
        (record(143, "SIGTERM", "peer", "stopped by the supervisor: worker 1 failed"), None, "runbook"),
        (record(137, "SIGKILL", "job-deadline", "job deadline of 60 s passed"), None, "deadline"),
        (record(137, "SIGKILL", "startup-deadline", "startup deadline passed"), None, "startup"),
        (record(124, None, "startup-deadline", "no go from the launch"), None, "startup"),
        (record(2, None, None, "refused to start: --grace must be 0 or more seconds"), None, "startup"),
        (record(127, None, None, "cannot start the job: [Errno 2] No such file"), None, "startup"),
        (record(143, "SIGTERM", "controller", "lost the controller"), None, "controller-lost"),
        (record(137, "SIGKILL"), 1, "out-of-memory"),
        (record(137, "SIGKILL"), 0, "killed"),
        (record(137, "SIGKILL"), None, "killed"),
        (record(139, "SIGSEGV"), None, "unknown"),
        (record(3), None, "job-error"),  # sys.exit(3): the job chose its own status
        (record(137, "SIGKILL", "supervisor", "supervisor error: OSError: x"), None, "unknown"),
    ],
)  # fmt: skip
def test_the_exit_record_names_the_cause(rec: dict[str, Any], oom_kills: int | None, kind: str) -> None:
    cause = tf_causes.classify(rec, [], oom_kills)
    assert cause["kind"] == kind
    assert cause["kind"] in tf_causes.CAUSES
    assert cause["detail"]


def test_a_kill_carries_the_signal_and_the_oom_count() -> None:
    oom = tf_causes.classify(record(137, "SIGKILL"), [], 2)
    assert (oom["signal"], oom["oom_kills"]) == ("SIGKILL", 2)
    assert "OOM killer fired 2 time(s)" in oom["detail"]
    killed = tf_causes.classify(record(137, "SIGKILL"), [], None)
    assert (killed["signal"], killed["oom_kills"]) == ("SIGKILL", None)
    assert "not readable" in killed["detail"]


def test_a_stop_wins_over_the_traceback_it_caused() -> None:
    cause = tf_causes.classify(record(143, "SIGTERM", "runbook", "stopped by the runbook"), UNAVAILABLE.splitlines())
    assert cause == {"kind": "runbook", "detail": "stopped by the runbook"}


def test_a_long_message_is_one_short_line() -> None:
    cause = tf_causes.classify(record(), ["Traceback (most recent call last):", "ValueError: " + "x" * 1000])
    assert len(cause["detail"]) <= tf_causes.MAX_DETAIL
    assert cause["detail"].endswith("...")


# --- The process decides, not the log (issue 37, point 5) --------------------------------

# A job that caught TensorFlow's error in a retry loop, logged it with its traceback
# (logging.exception), and then gave up with its own status.
LOGGED_THEN_EXITED = UNAVAILABLE + "ERROR:root:giving up after 3 tries\n"
TF_UNAVAILABLE = "tensorflow.python.framework.errors_impl.UnavailableError"


@pytest.mark.parametrize(
    ("log", "job_end", "kind"),
    [
        # The wrapper saw sys.exit(1): the job's own decision, whatever its log printed.
        (LOGGED_THEN_EXITED, {"exit": 1}, "job-error"),
        ("DeadlineExceededError: Graph execution error:\n", {"exit": 1}, "job-error"),
        # The uncaught exception, by its qualified class.
        ("", {"raised": {"type": TF_UNAVAILABLE, "message": "Collective ops is aborted"}}, "peer-lost"),
        ("", {"raised": {"type": "__main__.UnavailableError", "message": "retry"}}, "job-error"),
        ("", {"raised": {"type": "mylib.retry.UnavailableError", "message": "retry"}}, "job-error"),
        ("", {"raised": {"type": "asyncio.exceptions.CancelledError", "message": ""}}, "job-error"),
        ("", {"raised": {"type": "MemoryError", "message": ""}}, "out-of-memory"),
        ("", {"raised": {"type": "tensorflow.python.framework.errors_impl.ResourceExhaustedError", "message": "OOM"}},
         "out-of-memory"),
        # No record (the job ended in C, or without the wrapper): TensorFlow's classes by
        # qualified name only.
        (UNAVAILABLE, None, "peer-lost"),
        ("Traceback (most recent call last):\n  File \"t.py\", line 1\nUnavailableError: mine\n", None, "job-error"),
        ("DeadlineExceededError: Graph execution error:\n", None, "job-error"),
        ("asyncio.exceptions.CancelledError\n", None, "job-error"),
    ],
    ids=["logged-then-exited", "printed-deadline-then-exited", "tf-raised", "own-class-main", "own-class-module",
         "asyncio-cancelled", "memory-error", "tf-oom", "log-tf", "log-own-class", "log-bare-name", "log-asyncio"],
)  # fmt: skip
def test_the_wrappers_record_decides_and_the_log_only_without_it(
    log: str, job_end: dict[str, Any] | None, kind: str
) -> None:
    cause = tf_causes.classify(record(1), log.splitlines(), None, job_end)
    assert cause["kind"] == kind, cause


def test_an_exit_record_with_the_wrappers_record_says_it_decided() -> None:
    cause = tf_causes.classify(record(1), LOGGED_THEN_EXITED.splitlines(), None, {"exit": 1})
    assert cause == {"kind": "job-error",
                     "detail": "the job exited with its own status 1 (sys.exit), with no uncaught exception"}  # fmt: skip
    raised = tf_causes.classify(record(1), [], None, {"raised": {"type": TF_UNAVAILABLE, "message": "gone"}})
    assert (raised["exception"], raised["exception_type"], raised["from"]) == ("UnavailableError", TF_UNAVAILABLE,
                                                                              "the job's wrapper")  # fmt: skip


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"exit": 3}', {"exit": 3}),
        ('{"exit": 0, "ended": "coordinator-gone"}', {"exit": 0, "ended": "coordinator-gone"}),
        # Only an exit 0 names how it ended, and only by a kind a job may name.
        ('{"exit": 1, "ended": "coordinator-gone"}', {"exit": 1}),
        ('{"exit": 0, "ended": "completed"}', {"exit": 0}),
        ('{"raised": {"type": "a.B", "message": "m"}}', {"raised": {"type": "a.B", "message": "m"}}),
        ('{"exit": true}', None),
        ('{"exit": "1"}', None),
        ('{"raised": {"type": ""}}', None),
        ('["exit", 1]', None),
        ("not json", None),
    ],
)
def test_the_wrappers_record_is_read_field_by_field(tmp_path: Any, content: str, expected: Any) -> None:
    path = tmp_path / "job_end.json"
    path.write_text(content)
    assert tf_causes.read_job_end(str(path)) == expected
    assert tf_causes.read_job_end(str(tmp_path / "none.json")) is None


# --- The culprit rule, once (issue 40, point 1; issue 38, point 16) ---------------------

def failed(index: int, cause: dict[str, Any], finished_at: float | None, **more: Any) -> dict[str, Any]:
    return {"index": index, "host": f"h{index}", "returncode": 1, "stopped_by": None, "cause": cause,
            "finished_at": finished_at, **more}  # fmt: skip


KILLED = {"kind": "killed", "detail": "SIGKILL that the runbook did not send"}
PEER = {"kind": "peer-lost", "detail": "UnavailableError: gone", "exception": "UnavailableError"}
OWN = {"kind": "job-error", "detail": "ValueError: x"}


def test_the_culprit_is_the_first_to_fail_by_time_not_by_list_order() -> None:
    # Worker 1 killed at t, worker 0 raising TensorFlow's UnavailableError at t+1.
    workers = [failed(0, PEER, 101.0), failed(1, KILLED, 100.0)]
    assert tf_causes.culprit(workers)["index"] == 1
    # Two first-hand failures: the earlier one, wherever it stands in the list.
    workers = [failed(0, OWN, 101.0), failed(1, KILLED, 100.0)]
    assert tf_causes.culprit(workers)["index"] == 1
    workers = [failed(0, OWN, 99.0), failed(1, KILLED, 100.0)]
    assert tf_causes.culprit(workers)["index"] == 0


def test_a_first_hand_failure_is_blamed_before_an_earlier_lost_peer() -> None:
    workers = [failed(0, PEER, 99.0), failed(1, KILLED, 100.0)]
    found = tf_causes.attempt_failure({"failed_workers": workers})
    assert (found["culprit"], found["host"], found["kind"]) == (1, "h1", "killed")
    assert found["text"] == "killed (SIGKILL that the runbook did not send)"


def test_victims_are_never_the_culprit() -> None:
    workers = [failed(0, {"kind": "runbook", "detail": "stopped"}, 90.0, stopped_by="runbook"), failed(1, OWN, 100.0)]
    assert tf_causes.culprit(workers)["index"] == 1
    assert tf_causes.culprit([workers[0]]) is None


def test_a_frozen_worker_is_the_culprit_of_its_peers_lost_peer() -> None:
    """FACTS.md: a SIGSTOPped worker never fails by itself; its peer fails within about 20 s
    with DeadlineExceededError. The frozen one is named, as stalled."""
    frozen = [{"index": 0, "host": "h0", "state": "stopped", "seconds": 22.4}]
    found = tf_causes.attempt_failure({"failed_workers": [failed(2, PEER, 100.0)], "frozen_workers": frozen})
    assert (found["culprit"], found["host"], found["kind"]) == (0, "h0", "stalled")
    assert found["text"] == "stalled (its process was stopped (SIGSTOP or a debugger) for 22 s)"
    # A worker that failed first-hand stays the culprit, frozen peer or not.
    found = tf_causes.attempt_failure({"failed_workers": [failed(2, KILLED, 100.0)], "frozen_workers": frozen})
    assert (found["culprit"], found["kind"]) == (2, "killed")
    # Stopped, however briefly seen: blamed.
    seen_once = [{"index": 0, "host": "h0", "state": "stopped", "seconds": 0.0}]
    found = tf_causes.attempt_failure({"failed_workers": [failed(2, PEER, 100.0)], "frozen_workers": seen_once})
    assert (found["culprit"], found["kind"]) == (0, "stalled")
    # Caught once in a short disk wait: not frozen long enough to be blamed.
    brief = [{"index": 0, "host": "h0", "state": "uninterruptible", "seconds": 2.0}]
    found = tf_causes.attempt_failure({"failed_workers": [failed(2, PEER, 100.0)], "frozen_workers": brief})
    assert (found["culprit"], found["kind"]) == (2, "peer-lost")


def test_a_lost_host_names_its_worker() -> None:
    spec = [{"index": 0, "host": "h0"}, {"index": 1, "host": "h1"}, {"index": 2, "host": "h2"}]
    found = tf_causes.attempt_failure({"failed_workers": [failed(0, PEER, 100.0)], "lost_hosts": ["h2"]}, spec)
    assert (found["kind"], found["culprit"], found["host"]) == ("host-lost", 2, "h2")


@pytest.mark.parametrize(
    ("cause", "text"),
    [
        ({"kind": "job-error", "exception": "ValueError", "message": "x", "detail": "ValueError: x"},
         "job-error (ValueError: x)"),
        ({"kind": "killed", "detail": "SIGKILL"}, "killed (SIGKILL)"),
        ({"kind": "unknown", "detail": ""}, "unknown"),
    ],
)  # fmt: skip
def test_a_cause_has_one_text(cause: dict[str, Any], text: str) -> None:
    assert tf_causes.cause_text(cause) == text


@pytest.mark.parametrize(
    ("kills", "source", "kind", "detail"),
    [
        (1, "the kernel's log", "out-of-memory",
         "SIGKILL from the kernel's OOM killer: the kernel's log names the job's process"),
        (0, "the kernel's log", "killed",
         "SIGKILL that the runbook did not send (the kernel's log does not name the job's process as OOM-killed)"),
        (2, "the OOM count of the job's cgroup", "out-of-memory",
         "SIGKILL that the runbook did not send; the kernel's OOM killer fired 2 time(s) during the job (the OOM "
         "count of the job's cgroup)"),
        (0, "the host's OOM count", "killed", "SIGKILL that the runbook did not send (the host's OOM count did not grow)"),
    ],
)  # fmt: skip
def test_a_kill_says_which_evidence_decided_it(kills: int, source: str, kind: str, detail: str) -> None:
    cause = tf_causes.classify(record(137, "SIGKILL"), [], kills, None, source)
    assert (cause["kind"], cause["detail"], cause["oom_source"]) == (kind, detail, source)


def test_a_server_that_ended_with_the_coordinator_says_so_and_one_stopped_by_the_runbook_is_stopped() -> None:
    """A ParameterServerStrategy server: ended by itself, the coordinator gone and no
    runbook left to stop it (its end record names it), or stopped by the runbook at the
    run's end (the stop request's cause). Neither is a failure nor a victim's stop."""
    gone = tf_causes.classify(record(0), [], None, {"exit": 0, "ended": "coordinator-gone"})
    assert gone["kind"] == "coordinator-gone" and "ended with the coordinator" in gone["detail"]
    assert tf_causes.classify(record(0), [], None, {"exit": 0})["kind"] == "completed"
    stopped = {"returncode": 0, "stopped_by": "runbook", "reason": tf_causes.SERVER_STOPPED_REASON,
               "cause": {"kind": "stopped", "detail": tf_causes.SERVER_STOPPED_REASON}}  # fmt: skip
    assert tf_causes.cause_of(stopped)["kind"] == "stopped"
    assert tf_causes.cause_text(tf_causes.cause_of(stopped)) == (
        "stopped (the coordinator ended: servers are stopped by the runbook)")
    assert {"stopped", "coordinator-gone"} <= set(tf_causes.CAUSES) and tf_causes.SERVER_END_KINDS.isdisjoint(
        tf_causes.RESTARTABLE_CAUSES)
