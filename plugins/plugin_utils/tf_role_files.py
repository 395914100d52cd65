# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading the roles' own metadata (``meta/argument_specs.yml``, ``meta/ranges.yml``) on
the controller.

Every input check reads them again, in a worker process of its own: with PyYAML's pure
Python parser that took about half of each check's own time (7 ms for role tf's argument
spec, measured), with its LibYAML parser a tenth of it. The pure Python parser stays the
fallback where PyYAML was built without LibYAML; both parse the same safe subset.
"""

from __future__ import annotations

from typing import Any

import yaml

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: str) -> Any:
    """The YAML document in ``path``, parsed safely (OSError and yaml.YAMLError as raised)."""
    with open(path, encoding="utf-8") as handle:
        return yaml.load(handle, Loader=SAFE_LOADER)  # noqa: S506 - a safe loader, LibYAML's when built
