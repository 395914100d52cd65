"""Cluster-wide steps computed once on the controller instead of once per host.

Each Ansible task that runs per host costs the controller a worker process per host,
even when it only sets a fact; a step whose result the play can compute from every
host's data at once runs once (``run_once``) through one of these filters.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_config_readback import config_readbacks
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_ranges import hosts_range_problems


def tf_config_readbacks(by_host: dict[str, Any]) -> list[dict[str, Any]]:
    """Every host's read-back TF_CONFIGs as tf_config_check entries."""
    return config_readbacks(by_host)


def tf_range_problems_hosts(own: dict[str, Any], host: str, others: dict[str, Any]) -> list[str]:
    """Range problems of every host of the play (plugin_utils/tf_ranges.hosts_range_problems,
    which the contract's check in tf_role_inputs calls)."""
    return hosts_range_problems(own, host, others)


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {"tf_config_readbacks": tf_config_readbacks, "tf_range_problems_hosts": tf_range_problems_hosts}
