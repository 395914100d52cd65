"""Cluster-wide steps computed once on the controller instead of once per host.

Each Ansible task that runs per host costs the controller a worker process per host,
even when it only sets a fact; a step whose result the play can compute from every
host's data at once runs once (``run_once``) through one of these filters.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_config_readback import config_readbacks
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_ranges import (
    collection_range_problems as tf_range_problems,
)


def tf_config_readbacks(by_host: dict[str, Any]) -> list[dict[str, Any]]:
    """Every host's read-back TF_CONFIGs as tf_config_check entries."""
    return config_readbacks(by_host)


def tf_range_problems_hosts(own: dict[str, Any], host: str, others: dict[str, Any]) -> list[str]:
    """Range problems of every host of the play, in one pass on the controller.

    ``own`` holds the effective value of every range-checked name on ``host`` (role
    defaults, play and role variables included); ``others`` maps each host of the play to
    its host variables (inventory, extra vars, facts), of which only the range-checked
    names it defines are read. Role defaults and play variables are the same on every
    host, so checking them on ``host`` checks them for all. Each message names its host,
    and a problem is named once per host.
    """
    problems = list(tf_range_problems(own, host))
    for other, variables in others.items():
        defined = {name: variables[name] for name in own if name in variables}
        for problem in tf_range_problems(defined, other):
            if problem not in problems:
                problems.append(problem)
    return problems


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {"tf_config_readbacks": tf_config_readbacks, "tf_range_problems_hosts": tf_range_problems_hosts}
