"""Range checks of the runbook's timeouts and counts (argument specs only check types).

The ranges are each role's own, in ``roles/<role>/meta/ranges.yml`` beside its argument
spec; these filters read every role's of this collection, so that role tf's contract
check refuses a value out of range before a run does anything. The rules are in
``plugins/plugin_utils/tf_ranges.py``, shared with the action tf_role_inputs.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_ranges import (
    collection_range_problems,
    collection_ranges,
)


def tf_range_names(_value: Any = None) -> list[str]:
    """Names of the range-checked variables."""
    return sorted(collection_ranges())


def tf_range_problems(values: dict[str, Any], host: str) -> list[str]:
    """One message per value outside its range."""
    return collection_range_problems(values, host)


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {"tf_range_names": tf_range_names, "tf_range_problems": tf_range_problems}
