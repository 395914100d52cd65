# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster spec carried once more as one JSON string, for the tasks that run per host.

ansible-core 2.21 hands a filter a variable as lazy containers: every element read out
of them is templated first, and every element of a value a task's arguments hold is
finalized when the task runs. Measured with a spec of 128 hosts (one element costs tens
of microseconds), a filter that reads the whole spec once per host, or a list of every
host in each host's arguments, costs about 10 ms per host, so the controller's CPU per
host grew with the number of hosts (tests/bench/NOTES.md, issue 42). A string is one
element, whatever its length: a filter that reads ``spec["packed"]`` and parses it
reads plain data at once, and a list handed to a module as one JSON string costs the
same. ``pack`` adds the string where the spec is made (tf_cluster_spec, which every
other maker of a spec calls); ``plain`` gives a filter the spec as plain data, from the
string where the spec still matches it, else from the spec itself (a spec written by
hand, or one an older run recorded).
"""

from __future__ import annotations

import json
from typing import Any

PACKED = "packed"

# What must match between a spec and its packed copy for the copy to stand in for it.
# Every maker of a spec goes through pack(); these catch a spec changed afterwards (a
# combine in a playbook, a hand-written spec with a stale copy).
_MATCHED = ("checksum", "size", "chief", "shape")


def pack(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with ``packed``: the rest of it as one compact JSON string."""
    rest = {key: value for key, value in spec.items() if key != PACKED}
    return {**rest, PACKED: compact(rest)}


def plain(spec: Any) -> Any:
    """The spec as plain data: its packed copy parsed where it matches the spec, else
    ``spec`` as given (whatever it is: the filters' own checks then name it)."""
    if not isinstance(spec, dict):
        return spec
    packed = spec.get(PACKED)
    if not isinstance(packed, str):
        return spec
    try:
        copy = json.loads(packed)
    except ValueError:
        return spec
    if not isinstance(copy, dict) or any(copy.get(key) != spec.get(key) for key in _MATCHED):
        return spec
    if len(copy.get("workers") or []) != len(spec.get("workers") or []):
        return spec
    if (copy.get("auto") or {}) != (spec.get("auto") or {}):
        return spec
    return copy


def compact(value: Any) -> str:
    """``value`` as compact JSON, the form the per-host arguments carry long lists in."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)
