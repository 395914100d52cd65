"""Check what each host hands its workers (environment, GPUs) before a run is launched.

Messages name the host and the variable, never an environment value: values may be secrets.
"""

from __future__ import annotations

import re
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_messages import type_name


ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Set by the runbook itself; a user's value would break the cluster or the resume contract.
RESERVED_NAMES = ("TF_CONFIG",)
RESERVED_PREFIX = "TF_RUNBOOK_"


def _type_name(value: Any) -> str:
    # An unquoted true in YAML is a boolean, where the environment wants its text.
    return "a boolean (quote it: 'true')" if isinstance(value, bool) else type_name(value)


def tf_worker_env_problems(envs: dict[str, Any]) -> list[str]:
    """Each host's environment must map valid names, not the runbook's own, to strings or
    numbers."""
    if not isinstance(envs, dict):
        raise AnsibleFilterError(f"expected tf_worker_env by host, got {type(envs).__name__}")
    problems = []
    for host, env in envs.items():
        if env in (None, ""):
            continue
        if not isinstance(env, dict):
            problems.append(f"host {host}: tf_worker_env must be a mapping of names to values, got {_type_name(env)}")
            continue
        for name, value in env.items():
            name = str(name)
            if not ENV_NAME.match(name):
                problems.append(
                    f"host {host}: tf_worker_env name {name!r} is not a valid environment variable name "
                    "(letters, digits and _, not starting with a digit)"
                )
            elif name in RESERVED_NAMES or name.startswith(RESERVED_PREFIX):
                problems.append(
                    f"host {host}: tf_worker_env cannot set {name}: the runbook sets it for every worker"
                )
            elif isinstance(value, bool) or not isinstance(value, (str, int, float)):
                problems.append(f"host {host}: tf_worker_env {name} must be a string or a number, got {_type_name(value)}")
    return problems


def _per_slot(value: Any) -> int | None:
    """``auto`` is None, a whole number >= 0 is itself; anything else raises ValueError."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return None
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    raise ValueError(value)


def tf_gpu_assignment(spec: dict[str, Any], gpus: dict[str, Any], per_slot: dict[str, Any]) -> dict[str, Any]:
    """Disjoint GPUs for the workers of each host, in slot order.

    ``auto``: the host's GPUs split evenly over its slots (what is left over stays unused;
    a host without GPUs gets no ``CUDA_VISIBLE_DEVICES``); ``0``: every GPU hidden; ``n``:
    ``n`` GPUs for each worker. A host with fewer GPUs than its slots need is a problem.
    """
    if not isinstance(spec, dict) or "workers" not in spec:
        raise AnsibleFilterError("expected the cluster spec (tf_cluster_spec)")
    by_host: dict[str, list[dict[str, Any]]] = {}
    for worker in spec["workers"]:
        by_host.setdefault(worker["host"], []).append(worker)
    problems: list[str] = []
    devices: dict[str, dict[str, str | None]] = {}
    for host, workers in by_host.items():
        workers = sorted(workers, key=lambda w: int(w["slot"]))
        slots = len(workers)
        shown = int(gpus.get(host) or 0)
        wanted = per_slot.get(host, "auto")
        try:
            each = _per_slot(wanted)
        except ValueError:
            problems.append(f"host {host}: tf_worker_gpus_per_slot must be auto or a whole number >= 0, got {wanted!r}")
            continue
        if each is None:
            if shown == 0:
                devices[host] = {str(w["index"]): None for w in workers}
                continue
            if shown < slots:
                problems.append(
                    f"host {host}: {slots} slot(s) need at least {slots} GPU(s) "
                    f"(tf_worker_gpus_per_slot=auto, one or more each), the host shows {shown}"
                )
                continue
            each = shown // slots
        if shown < each * slots:
            problems.append(
                f"host {host}: {slots} slot(s) x tf_worker_gpus_per_slot={each} need {each * slots} GPU(s), "
                f"the host shows {shown}"
            )
            continue
        devices[host] = {
            str(w["index"]): ",".join(str(slot * each + k) for k in range(each)) for slot, w in enumerate(workers)
        }
    return {"problems": problems, "devices": devices}


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {
            "tf_worker_env_problems": tf_worker_env_problems,
            "tf_gpu_assignment": tf_gpu_assignment,
        }
