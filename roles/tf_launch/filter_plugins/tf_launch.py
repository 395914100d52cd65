"""Turn the results of the async launch loop into the list the wait phase polls."""

from __future__ import annotations

from typing import Any

DOCUMENTATION = r"""
name: tf_launched_workers
short_description: Workers launched on this host, with their directories and async job ids
description:
  - Takes the registered results of the launch loop and the worker directories; returns
    one C(index), C(dir), C(job_id) entry per worker, in index order.
"""


def tf_launched_workers(results: list[dict[str, Any]], dirs: dict[str, str]) -> list[dict[str, Any]]:
    """One entry per launched worker, in index order."""
    launched = []
    for result in results:
        if result.get("skipped"):
            continue
        index = int(result["item"]["index"])
        launched.append(
            {"index": index, "dir": dirs[str(index)], "job_id": str(result.get("ansible_job_id", ""))}
        )
    return sorted(launched, key=lambda entry: entry["index"])


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {"tf_launched_workers": tf_launched_workers}
