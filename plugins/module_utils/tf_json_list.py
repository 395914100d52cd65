# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""An option that lists every host of the cluster, given as a list or as that list in one
JSON string.

The runbook passes such lists as one string: with ansible-core 2.21 a task's arguments
cost the controller per element, so a list of every host in every host's arguments made
the controller's CPU per host grow with the number of hosts (plugin_utils/tf_spec_packed.py).
A user or a test may still give the list itself. Ansible's own ``list`` type would split
a string at its commas, hence the options' type ``raw`` and this check.
"""

from __future__ import annotations

import json
from typing import Any


def json_list(value: Any, name: str, element: type) -> list[Any]:
    """``value`` as a list whose elements are all ``element``; an empty string or None is
    an empty list. Raises ValueError naming the option and the value otherwise."""
    if value is None:
        return []
    if isinstance(value, str):
        if not value.strip():
            return []
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"option {name}: expected a list or a JSON list, got {value[:200]!r} ({exc})") from None
    if not isinstance(value, list):
        raise ValueError(f"option {name}: expected a list, got {type(value).__name__} {str(value)[:200]!r}")
    wrong = [item for item in value if not isinstance(item, element) or isinstance(item, bool)]
    if wrong:
        raise ValueError(f"option {name}: every element must be a {element.__name__}, got {str(wrong[0])[:200]!r}")
    return value
