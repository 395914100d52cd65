"""The TF_CONFIG files every host read back, checked against the cluster spec on the
controller: shared by the filters tf_config_readbacks and tf_config_problems and by the
armed launch's refusals (tf_launch_refusals)."""

from __future__ import annotations

import json
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import cluster_checksum, task_position


def config_readbacks(by_host: dict[str, Any]) -> list[dict[str, Any]]:
    """Every host's read-back TF_CONFIGs as tf_config_check entries."""
    entries: list[dict[str, Any]] = []
    for host, read_back in by_host.items():
        if not isinstance(read_back, list):
            raise AnsibleFilterError(f"host {host}: no TF_CONFIG was read back (got {read_back!r})")
        entries.extend({"host": host, "index": int(item["index"]), "content": item["content"]} for item in read_back)
    return entries


def config_problems(readbacks: list[dict[str, Any]], spec: dict[str, Any]) -> list[str]:
    """Why the TF_CONFIG files as written on the hosts do not make the cluster of ``spec``,
    each naming its host and worker; empty when they do."""
    expected = cluster_checksum(spec["cluster"])
    seen: dict[int, str] = {}
    problems: list[str] = []
    for item in readbacks:
        where = f"host {item['host']} worker-{item['index']}"
        try:
            data = json.loads(item["content"])
            got = cluster_checksum(data["cluster"])
            typed = data["task"].get("type", "worker") != "worker" or set(data["cluster"]) != {"worker"}
            # The runbook's index of the task (its place in the cluster read chief, worker,
            # ps; the task's own index in a cluster of workers alone).
            index = task_position(data) if typed else int(data["task"]["index"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            problems.append(f"{where}: TF_CONFIG is not valid ({exc})")
            continue
        if got != expected:
            problems.append(
                f"{where}: cluster list {data['cluster']} differs from the spec {spec['cluster']}"
            )
        want = spec["workers"][int(item["index"])] if 0 <= int(item["index"]) < len(spec.get("workers") or []) else None
        task = data["task"]
        if want is not None and typed and (task.get("type"), task.get("index")) != (want.get("type"), want.get("task_index")):
            problems.append(
                f"{where}: task is {task.get('type')}:{task.get('index')}, expected {want.get('type')}:{want.get('task_index')}"
            )
        elif index != int(item["index"]):
            problems.append(f"{where}: task.index is {index}, expected {item['index']}")
        if index in seen:
            problems.append(f"{where}: task.index {index} is also used by {seen[index]}")
        seen[index] = where
    size = int(spec["size"])
    hosts = {int(w["index"]): w["host"] for w in spec.get("workers", [])}
    for index in sorted(set(range(size)) - set(seen)):
        problems.append(f"host {hosts.get(index, '?')} worker-{index}: no TF_CONFIG was written")
    for index in sorted(i for i in seen if not 0 <= i < size):
        problems.append(f"{seen[index]}: task.index {index} is outside the cluster 0..{size - 1}")
    return problems
