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
    assert cause["kind"] in tf_run.CAUSES
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
