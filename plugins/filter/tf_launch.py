"""Turn the result of the launch (tf_worker_launch) into the list the wait phase polls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_run
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run_files import (
    launched_workers,
    published_facts,
)
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_config_readback import (
    config_problems,
    config_readbacks,
)
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_spec_packed import plain


def tf_launched_workers(result: dict[str, Any] | None, went: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The launched workers of a launch's result, with what the go started: the contract's
    launched_workers (module_utils/tf_run_files.py), which the launch module also returns
    as its fact tf_launch_jobs."""
    return launched_workers(result, went)


def tf_launch_facts(
    source: dict[str, Any], run: dict[str, Any] | None = None, went: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The run's facts the launch role publishes on a host (tasks/publish.yml), from a
    launch's result or from the reattach's finder result (published_facts)."""
    try:
        return published_facts(source or {}, run or None, went or None)
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"cannot publish the run's facts: {exc}") from None


def tf_launch_job_seconds(deadline: int | str, started: int | str) -> int:
    """Seconds of the job deadline the supervisor enforces: what is left of the run's
    deadline (epoch seconds), at least 1; 0 (none) when the run has no deadline."""
    if not int(deadline):
        return 0
    return max(int(deadline) - int(started), 1)


def tf_launch_controller_timeout(timeout: int | str, detach: bool, forks: int | str, hosts: int | str) -> int:
    """Controller timeout handed to the supervisors: 0 (run not tied to the controller)
    for a detached run, or when --forks is below the number of hosts (the wait then polls
    hosts in batches and could not keep every host's heartbeat fresh)."""
    if detach or int(forks) < int(hosts):
        return 0
    return int(timeout)


def tf_launch_go_timeout(timeout: int | str, forks: int | str, hosts: int | str) -> int:
    """Seconds an armed supervisor waits for the launch's go: ``timeout`` when above 0;
    else a minute, plus 10 s for every batch of hosts after the first that --forks makes
    the controller arm in turn (the go follows the last batch)."""
    if int(timeout) > 0:
        return int(timeout)
    batches = -(-max(int(hosts), 1) // max(int(forks), 1))
    return 60 + 10 * (batches - 1)


def tf_launch_entry(spec: dict[str, Any], host: str, script: str, job_args: list[str], pattern: str,
                    evaluator: dict[str, Any] | None = None, coordinator_grace: int | str = 0) -> dict[str, Any]:  # fmt: skip
    """What ``host``'s supervisors start: the user's ``script`` with ``job_args`` and the
    startup ``pattern``, or, for the servers of a ParameterServerStrategy cluster (the ps
    and worker tasks where the inventory has tf_ps), the runbook's own server entry
    (tf_run.SERVER_ENTRY), joined once it prints SERVER_STARTED, with
    ``--coordinator-grace`` where ``coordinator_grace`` is above 0: how long the chief's
    port stays shut before a server that no runbook stopped ends by itself; for the
    sidecar evaluator, ``evaluator``'s ``script`` (a file of the job; empty: the training
    script with its arguments and tf_run.EVALUATE_FLAG) with its ``args``, joined once
    started (it joins no cluster). Every entry carries ``evaluator``, the evaluator's
    endpoint (empty without one), for the supervisors' --evaluator."""
    spec = plain(spec)
    kinds = {w.get("type", "worker") for w in spec["workers"] if w["host"] == host}
    endpoint = next((w["endpoint"] for w in spec["workers"] if w.get("type") == tf_run.EVALUATOR), "")
    if spec.get("shape") == "ps" and kinds and kinds <= {"ps", "worker"}:
        grace = int(coordinator_grace or 0)
        server_args = ["--coordinator-grace", str(grace)] if grace > 0 else []
        entry = {"script": tf_run.SERVER_ENTRY, "job_args": server_args, "startup_pattern": tf_run.SERVER_STARTED}
    elif kinds == {tf_run.EVALUATOR}:
        own = evaluator or {}
        if own.get("script"):
            entry = {"script": str(own["script"]), "job_args": list(own.get("args") or []), "startup_pattern": ""}
        else:
            entry = {"script": script, "job_args": [*job_args, tf_run.EVALUATE_FLAG], "startup_pattern": ""}
    else:
        entry = {"script": script, "job_args": list(job_args), "startup_pattern": pattern}
    return {**entry, "evaluator": endpoint}


def tf_launch_refusals(results: dict[str, Any], spec: dict[str, Any]) -> dict[str, list[str]]:
    """Why an armed launch must get no go: ``reasons``, each naming its host, first every
    host whose launch failed (its module run started nothing there, or it could not be
    reached: a launch's result without its ``facts``), then every TF_CONFIG the other
    hosts read back that does not make the cluster of ``spec``; and ``failed_hosts``,
    those whose launch failed. Both empty when every host armed and read the cluster back."""
    failed: dict[str, str] = {}
    read_back: dict[str, Any] = {}
    for host, result in results.items():
        result = result if isinstance(result, dict) else {}
        if "facts" not in result:
            msg = str(result.get("msg") or "its launch returned no result").strip()
            if result.get("unreachable"):
                msg = f"could not be reached: {msg}"
            failed[host] = msg if msg.startswith(f"host {host}:") else f"host {host}: {msg}"
            continue
        read_back[host] = (result.get("deploy") or {}).get("read_back")
    # A failed host's workers wrote no TF_CONFIG: said once, by its failure.
    unwritten = tuple(f"host {host} worker-" for host in failed)
    problems = config_problems(config_readbacks(read_back), spec)
    reasons = [*failed.values(), *(p for p in problems if not (unwritten and p.startswith(unwritten)))]
    return {"reasons": reasons, "failed_hosts": list(failed)}


# The collection's root, whether it is this clone (collections/ links to it) or installed:
# the supervisor and the job's wrapper are role tf_worker's files.
HOST_FILES_DIR = Path(__file__).resolve().parents[2] / "roles" / "tf_worker" / "files"
SHARED_DIR = Path(tf_run.__file__).resolve().parent


def tf_supervisor_files(_value: Any = None) -> list[dict[str, str]]:
    """What the deploy writes into a run's job directory besides the job: the supervisor,
    the job's wrapper and the shared modules they import (tf_run's SUPERVISOR_FILE,
    JOB_WRAPPER and SHARED_MODULES), as ``{name, content}``, read on the controller."""
    files = [(HOST_FILES_DIR, tf_run.SUPERVISOR_FILE), (HOST_FILES_DIR, tf_run.JOB_WRAPPER),
             (HOST_FILES_DIR, tf_run.SERVER_ENTRY), (HOST_FILES_DIR, tf_run.CHECKPOINT_PUSH_FILE)]
    files += [(SHARED_DIR, name) for name in tf_run.SHARED_MODULES]
    try:
        return [{"name": name, "content": (where / name).read_text(encoding="utf-8")} for where, name in files]
    except OSError as exc:
        raise AnsibleFilterError(f"cannot read the runbook's own host file: {exc}") from exc


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {
            "tf_launched_workers": tf_launched_workers,
            "tf_launch_facts": tf_launch_facts,
            "tf_launch_job_seconds": tf_launch_job_seconds,
            "tf_launch_controller_timeout": tf_launch_controller_timeout,
            "tf_launch_go_timeout": tf_launch_go_timeout,
            "tf_launch_refusals": tf_launch_refusals,
            "tf_supervisor_files": tf_supervisor_files,
            "tf_launch_entry": tf_launch_entry,
        }
