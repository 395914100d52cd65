# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The on-disk contract of a run, in one place (issue 12).

A run lives on every host under ``<tf_worker_base_dir>/runs/<run_id>/``: the job
directory ``job/``, a worker directory ``worker-<index>/`` per worker of the first attempt
and ``retry-<n>/worker-<index>/`` per restart. A worker directory holds the records its
supervisor (``roles/tf_worker/files/tf_supervisor.py``) writes. This module is standard
library only: the deploy ships it (with the other SHARED_MODULES) next to the supervisor,
which imports it rather than keep copies.

Every module, action and filter that reads or writes a run's files imports this module,
as ``ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import unicodedata
from typing import Any

# Layout.
RUNS_DIR = "runs"
JOB_DIR = "job"
CHECKPOINTS_DIR = "checkpoints"
WORKER_PREFIX = "worker-"
RETRY_PREFIX = "retry-"

# The records of a worker directory.
STATE_FILE = "state.json"
EXIT_FILE = "exit.json"
LOG_FILE = "worker.log"
CONFIG_FILE = "tf_config.json"
JOB_ENV_FILE = "job_env.json"
# Written by tf_worker_stop before it signals: who asked for the stop, and why.
STOP_FILE = "stop.json"
# Written by tf_worker_launch: the supervisor's own stdout and stderr (a refusal to start,
# a crash before it could record anything).
LAUNCH_OUTPUT_FILE = "supervisor.out"
# A worker directory holding one of these was launched: it is never launched again.
LAUNCH_RECORDS = (STATE_FILE, EXIT_FILE)

# The launch's go (tf_worker_launch arms the supervisors, tf_worker_go starts them all at
# once): the line sent to each worker's port (the magic, then the token) and the answers.
GO_MAGIC = b"TF-RUNBOOK-GO "
GO_STARTED = b"TF-RUNBOOK-STARTED "
GO_FAILED = b"TF-RUNBOOK-FAILED "
GO_LINE_BYTES = 512
# A worker whose job failed on its own announces it on its TensorFlow port: the magic,
# the run id, a MAC of the run id and the reason under the run's announcement secret,
# then the reason.
ANNOUNCE_MAGIC = b"TF-RUNBOOK-PEER-FAILED "
# The launch's secrets (the go's token, the announcement key) reach the supervisor on a
# pipe, never its environment (readable in /proc/<pid>/environ for the process's whole
# life, by the job too) nor its command line: started with SECRETS_FLAG, it reads one
# JSON line of at most SECRETS_LINE_BYTES bytes from its stdin, an object of these keys.
SECRETS_FLAG = "--secrets-stdin"
SECRETS_LINE_BYTES = 4096
SECRET_GO_TOKEN = "go_token"
SECRET_ANNOUNCE_KEY = "announce_key"
SECRET_KEYS = (SECRET_GO_TOKEN, SECRET_ANNOUNCE_KEY)

# What the deploy ships into the job directory next to tf_supervisor.py: the job's
# wrapper (it dumps the job's stacks on STACKS_SIGNAL, then runs the user's script) and
# the shared modules of plugins/module_utils/ the supervisor imports.
SUPERVISOR_FILE = "tf_supervisor.py"
JOB_WRAPPER = "tf_runbook_job.py"
SHARED_MODULES = ("tf_run.py", "tf_proc.py", "tf_causes.py", "tf_metrics.py", "tf_checkpoint_wire.py")
# The real-time signal on which the job writes every thread's stack into STACKS_FILE.
STACKS_SIGNAL_OFFSET = 3

# The fields of exit.json.
EXIT_FIELDS = ("returncode", "signal", "reason", "stopped_by", "started_at", "finished_at", "joined")
# Values of exit.json's "stopped_by": who ended the job; None when it exited on its own.
STOPPED_BY = (
    "operator", "runbook", "signal", "startup-deadline", "job-deadline", "controller", "peer", "supervisor",
)  # fmt: skip
# Who can ask a stop through stop.json (tf_worker_stop's choices).
STOP_REQUESTERS = ("operator", "runbook")

# Why a worker ended (the kinds of cause, who counts as a victim, the culprit rule) lives
# in tf_causes.py, which imports this module.
# The exit status of a job that TensorFlow's PreemptionCheckpointHandler saved and ended.
PREEMPTION_EXIT = 42
# Written into the worker directory by the supervisor: every thread's Python stack of the
# job (faulthandler's text), captured before a stall or deadline stop.
STACKS_FILE = "stacks.txt"
# Written into the worker directory by the job's wrapper: how the job's Python ended (its
# uncaught exception's qualified class, or its own exit status; tf_causes.read_job_end).
JOB_END_FILE = "job_end.json"

# A run's checkpoint directory (TF_RUNBOOK_CHECKPOINT_DIR) holds, besides the job's own
# files, the runbook's: who owns it (on a shared tf_checkpoint_dir, the run and cluster
# that may use <tf_checkpoint_dir>/<run_id>), which of its files came from the chief's
# host in the last copy (tf_checkpoint_sync), and the marker that tells a directory every
# host shares; while a copy runs, the archive it brings, the directory it stages the files
# in and the lock that keeps two copies into one directory apart. Every one of them starts
# with CHECKPOINT_OWN_PREFIX and is never copied from host to host.
CHECKPOINT_OWN_PREFIX = ".tf-runbook-"
CHECKPOINT_OWNER_FILE = ".tf-runbook-owner.json"
CHECKPOINT_SYNCED_FILE = ".tf-runbook-synced.json"
CHECKPOINT_MARKER_PREFIX = ".tf-runbook-share-"
CHECKPOINT_ARCHIVE_PREFIX = ".tf-runbook-archive-"
CHECKPOINT_STAGING_PREFIX = ".tf-runbook-staging-"
CHECKPOINT_LOCK_FILE = ".tf-runbook-copy.lock"
# On the controller, in the run's directory: what the copy of the chief's checkpoint
# before attempt n moved (checkpoint-sync-<n>.json), and the run's claim record (its
# cluster's checksum, read again by a resume).
CHECKPOINT_SYNC_PREFIX = "checkpoint-sync-"
RUN_RECORD = "run.json"
# On the controller, in the run's directory: the playbook that drives the run, written by
# its claim (a new run's or a resume's) and kept: the ansible-playbook process's pid, its
# start time (/proc/<pid>/stat field 22, clock ticks after boot: a pid reused later has
# another) and the controller's host name. A resume is refused while that process lives.
DRIVER_FILE = "driver.json"
# On the controller, in the run's directory: what the controller decided after attempt n
# failed (attempt-<n>.json), written when the decision is made: the culprit and its
# cause (tf_causes.attempt_failure), the lost hosts, which host ran which worker, what was
# decided and why. The verdict's timeline and the report read it, never derive it again.
ATTEMPT_RECORD = "attempt-{attempt}.json"

# On the controller, in <tf_runs_dir>/<run_id>/: the verdict's summary and the report, a
# flag file per attempt that a failing host's wait raises for every other host's wait,
# and the stall watchdog's per-host progress records of each attempt.
SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.html"
ATTEMPT_FAILED_FLAG = ".attempt-{attempt}.failed"
ATTEMPT_PROGRESS_DIR = ".attempt-{attempt}.progress"
# Written by the wait of the chief's host when the chief (the coordinator of a
# ParameterServerStrategy run) exited 0: every host's wait then stops its servers.
ATTEMPT_COORDINATOR_ENDED = ".attempt-{attempt}.coordinator-ended"
# On every host, in <base>/runs/<run_id>/: the heartbeat the wait renews; a supervisor
# whose heartbeat is older than --controller-timeout stops its job (controller-lost).
HEARTBEAT_FILE = "controller.heartbeat"

# A worker's state as the wait sees it (tf_worker_status): launched but not yet running
# the job (armed, or before its state record), running, or exited (exit.json written, or
# found gone).
WORKER_STARTING = "starting"
WORKER_RUNNING = "running"
WORKER_EXITED = "exited"
WORKER_STATES = (WORKER_STARTING, WORKER_RUNNING, WORKER_EXITED)


def attempt_failed_flag(attempt: int) -> str:
    """The name of attempt ``attempt``'s failure flag in the run's controller directory."""
    return ATTEMPT_FAILED_FLAG.format(attempt=int(attempt))


def attempt_coordinator_ended(attempt: int) -> str:
    """The name of attempt ``attempt``'s record that its coordinator ended, beside its
    failure flag."""
    return ATTEMPT_COORDINATOR_ENDED.format(attempt=int(attempt))


def attempt_record_file(attempt: int) -> str:
    """The name of the record of the decision made after attempt ``attempt``."""
    return ATTEMPT_RECORD.format(attempt=int(attempt))


def attempt_progress_dir(attempt: int) -> str:
    """The name of attempt ``attempt``'s stall records directory on the controller."""
    return ATTEMPT_PROGRESS_DIR.format(attempt=int(attempt))


def stacks_signal() -> int:
    """The signal that makes a job dump its stacks: SIGRTMIN + STACKS_SIGNAL_OFFSET, a
    real-time signal that nothing else sends and whose default action ends a process
    (so it is only ever sent to a job that runs under the wrapper)."""
    return int(signal.SIGRTMIN) + STACKS_SIGNAL_OFFSET


def signal_name(number: int) -> str:
    """A signal's name for any number a process can die of: ``SIGKILL``, and for the
    real-time signals, which Python's ``signal.Signals`` does not name (it raises),
    ``SIGRTMIN+3`` (``SIGRTMAX-2``, ``SIG37`` outside both)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        pass
    low, high = int(signal.SIGRTMIN), int(signal.SIGRTMAX)
    if low <= number <= high:
        return f"SIGRTMIN+{number - low}" if number - low <= (high - low) // 2 else f"SIGRTMAX-{high - number}"
    return f"SIG{number}"


# A run id becomes a directory name on every host and on the controller.
RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
RUN_ID_RULE = "use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit, without '..'"

# Control characters (C0, DEL, C1); ESC among them starts terminal escape sequences.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Characters that show nothing of what they are: format characters, line and paragraph
# separators.
_HIDDEN_CATEGORIES = frozenset({"Cf", "Zl", "Zp"})


def run_id_is_safe(run_id: Any) -> bool:
    """Whether ``run_id`` is safe as one path component (see RUN_ID_RULE)."""
    text = "" if run_id is None else str(run_id)
    return bool(RUN_ID_PATTERN.fullmatch(text)) and ".." not in text


def run_dir_of(base_dir: str, run_id: str) -> str:
    """A run's directory under a host's (or the controller's) base directory."""
    return os.path.join(base_dir, RUNS_DIR, run_id)


def attempt_dir_of(run_dir_path: str, attempt: int) -> str:
    """The directory of one attempt's worker directories: the run's own for the first
    launch (0), ``retry-<n>/`` for restart n."""
    return run_dir_path if attempt == 0 else os.path.join(run_dir_path, f"{RETRY_PREFIX}{attempt}")


def worker_dir_name(index: Any) -> str:
    return f"{WORKER_PREFIX}{int(index)}"


def worker_index(name: str) -> int | None:
    """The index of a worker directory's name (``worker-3``: 3); None for another name."""
    rest = name[len(WORKER_PREFIX):] if name.startswith(WORKER_PREFIX) else ""
    return int(rest) if rest.isdigit() else None


def retry_index(name: str) -> int | None:
    """The attempt of a restart directory's name (``retry-2``: 2); None for another name."""
    rest = name[len(RETRY_PREFIX):] if name.startswith(RETRY_PREFIX) else ""
    return int(rest) if rest.isdigit() else None


def secrets_line(go_token: str = "", announce_key: str = "") -> bytes:
    """The line the launch writes on a supervisor's stdin: the given secrets as one JSON
    object and a newline; empty when there are none (the supervisor then gets no
    SECRETS_FLAG). Raises ValueError when it would exceed SECRETS_LINE_BYTES."""
    given = {name: value for name, value in ((SECRET_GO_TOKEN, go_token), (SECRET_ANNOUNCE_KEY, announce_key)) if value}
    if not given:
        return b""
    line = json.dumps(given, sort_keys=True).encode("utf-8") + b"\n"
    if len(line) > SECRETS_LINE_BYTES:
        raise ValueError(f"the launch's secrets take {len(line)} bytes, more than {SECRETS_LINE_BYTES}")
    return line


def parse_secrets_line(line: bytes) -> dict[str, str]:
    """The secrets of a line secrets_line() wrote: {key: value} of SECRET_KEYS, each a
    non-empty string. Raises ValueError saying what is wrong with anything else (no
    newline within SECRETS_LINE_BYTES, not a JSON object, an unknown key, a value that
    is not a non-empty string); the message never quotes the line."""
    if not line:
        raise ValueError("no secrets line (stdin ended at once)")
    if len(line) > SECRETS_LINE_BYTES or not line.endswith(b"\n"):
        raise ValueError(f"no complete secrets line within {SECRETS_LINE_BYTES} bytes")
    try:
        data = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ValueError("the secrets line is not JSON") from None
    if not isinstance(data, dict):
        raise ValueError("the secrets line is not a JSON object")
    unknown = sorted(str(key) for key in data if key not in SECRET_KEYS)
    if unknown:
        raise ValueError(f"the secrets line has unknown keys {unknown}")
    bad = sorted(key for key, value in data.items() if not isinstance(value, str) or not value)
    if bad:
        raise ValueError(f"the secrets line's {', '.join(bad)} is not a non-empty string")
    return dict(data)


def read_json(path: str) -> dict[str, Any] | None:
    """A JSON object from ``path``; None when the file is missing, unreadable or holds
    anything but an object."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            data = json.load(handle)
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def write_json_atomic(path: str, data: Any) -> None:
    """Write JSON so that a reader sees either the old file or the whole new one (the
    temporary name carries the writer's pid: two writers never share one)."""
    tmp = os.path.join(os.path.dirname(path) or ".", f".{os.path.basename(path)}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def make_private_dirs(path: str) -> None:
    """``path`` and its missing parents, each one created here 0700 whatever the umask;
    directories that exist are left as they are."""
    missing = []
    while path and not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            continue
        os.chmod(directory, 0o700)


def cluster_checksum(cluster: Any) -> str:
    """Checksum of a cluster dict in canonical JSON form (the same on every host)."""
    canonical = json.dumps(cluster, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


# --- Task types (the inventory's tf_chief, tf_workers, tf_ps and tf_evaluator) -----------
# TensorFlow's task types in the order the runbook lists them in TF_CONFIG's cluster and
# numbers its own processes: the runbook's index of a process (its worker-<i> directory)
# is its place in the cluster read in this order; the evaluator, never in the cluster,
# comes after them all. A cluster of ``worker`` tasks alone is the runbook's first shape:
# there the runbook's index is the task's own index.
CLUSTER_TASK_TYPES = ("chief", "worker", "ps")
EVALUATOR = "evaluator"
TASK_TYPES = CLUSTER_TASK_TYPES + (EVALUATOR,)
# The runbook's own ParameterServerStrategy server (a ps or worker task that only serves),
# shipped next to the supervisor; the line it prints once its server listens (the startup
# pattern of a server), and the line it prints when it ends because the coordinator did.
SERVER_ENTRY = "tf_ps_server.py"
SERVER_STARTED = "server_started"
SERVER_STOPPED = "server_stopped"
# The sidecar evaluator (a host in tf_evaluator): the chief's supervisor pushes each
# complete checkpoint to the evaluator's supervisor over the evaluator's port (it runs no
# TensorFlow server), with the code shipped next to the supervisor; the flag the default
# job gets in the evaluator's place when the inventory names no evaluation script.
CHECKPOINT_PUSH_FILE = "tf_checkpoint_push.py"
EVALUATE_FLAG = "--evaluate"
# Files that name a checkpoint rather than hold one: TensorFlow's CheckpointManager (and
# so Keras' BackupAndRestore and the PreemptionCheckpointHandler) keeps ``checkpoint``;
# the default job (files/multiworker_train.py) keeps ``latest``. Told by name, anywhere in
# a checkpoint tree; a copy (tf_checkpoint_copy) or a push (tf_checkpoint_push) swaps
# them in after every other file.
POINTER_FILES = ("checkpoint", "latest")


def cluster_tasks(cluster: Any) -> list[tuple[str, int, str]]:
    """Every task of a TF_CONFIG cluster as (type, index, endpoint), in the runbook's
    order (CLUSTER_TASK_TYPES; a type the runbook does not know is refused)."""
    if not isinstance(cluster, dict):
        raise ValueError(f"cluster is {type(cluster).__name__}, not a mapping")
    unknown = sorted(str(name) for name in cluster if name not in CLUSTER_TASK_TYPES)
    if unknown:
        raise ValueError(f"cluster has task type(s) {', '.join(unknown)}; the runbook knows {', '.join(CLUSTER_TASK_TYPES)}")
    return [(kind, n, str(endpoint)) for kind in CLUSTER_TASK_TYPES for n, endpoint in enumerate(cluster.get(kind) or [])]


def task_position(config: Any) -> int:
    """The runbook's index of the process whose TF_CONFIG is ``config``: its task's place
    in ``cluster_tasks``, or after them all for the evaluator. Raises ValueError for a
    task that is not in its cluster."""
    task = config["task"]
    kind, index = str(task.get("type", "worker")), int(task["index"])
    tasks = cluster_tasks(config["cluster"])
    if kind == EVALUATOR:
        return len(tasks) + index
    for position, (other, number, _endpoint) in enumerate(tasks):
        if (other, number) == (kind, index):
            return position
    raise ValueError(f"task {kind}:{index} is not in the cluster")


def killed_exit_record(reason: str, stopped_by: str, started_at: Any, finished_at: float) -> dict[str, Any]:
    """The exit record of a worker whose supervisor was gone or killed before it could
    write one: SIGKILL, with who stopped it and why."""
    return {
        "returncode": 137,
        "signal": "SIGKILL",
        "reason": reason,
        "stopped_by": stopped_by,
        "started_at": started_at,
        "finished_at": finished_at,
        "joined": None,
    }


def printable(text: Any) -> str:
    """``text`` safe to print on a terminal: every control character shown as an escape
    (``\\x1b``), so that a worker's log line cannot move the cursor, recolour or retitle
    the operator's terminal, or hide earlier output; and every invisible format character
    (Unicode category Cf: the bidirectional overrides U+202E and U+2066-2069, zero-width
    characters) and line or paragraph separator as ``\\u202e``, so that a line cannot
    show other text than it holds."""
    shown = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))
    if shown.isascii():
        return shown
    return "".join(f"\\u{ord(c):04x}" if unicodedata.category(c) in _HIDDEN_CATEGORIES else c for c in shown)
