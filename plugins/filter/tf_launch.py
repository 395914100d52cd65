"""Turn the result of the launch (tf_worker_launch) into the list the wait phase polls."""

from __future__ import annotations

from typing import Any


def tf_launched_workers(result: dict[str, Any] | None, went: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One entry per worker the launch tried to start, in index order: its index,
    directory, supervisor pid and launch error (None when it started). None of a dry run
    (check mode), a skipped task or a host without a result.

    ``went`` is the result of an armed launch's go (tf_worker_go, for every worker of the
    run): a worker of this host that the go did not start gets the go's error as its
    launch error, so that the wait reports it failed at once instead of waiting for its
    armed supervisor to give up."""
    not_started = {
        int(entry["index"]): entry.get("error") or "no answer"
        for entry in (went or {}).get("workers") or []
        if not entry.get("started")
    }
    launched = []
    for worker in (result or {}).get("workers") or []:
        pid, error = worker.get("supervisor_pid"), worker.get("error")
        if pid is None and not error:
            continue
        if not error and int(worker["index"]) in not_started:
            error = f"the launch's go did not start it: {not_started[int(worker['index'])]}"
        launched.append(
            {
                "index": int(worker["index"]),
                "dir": worker["dir"],
                "supervisor_pid": None if pid is None else int(pid),
                "launch_error": error or None,
            }
        )
    return sorted(launched, key=lambda entry: entry["index"])


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


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {
            "tf_launched_workers": tf_launched_workers,
            "tf_launch_job_seconds": tf_launch_job_seconds,
            "tf_launch_controller_timeout": tf_launch_controller_timeout,
            "tf_launch_go_timeout": tf_launch_go_timeout,
        }
