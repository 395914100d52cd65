# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading the roles' own metadata (``meta/argument_specs.yml``, ``meta/ranges.yml``) and
the names the runbook spells, on the controller.

Every input check reads them again, in a worker process of its own: with PyYAML's pure
Python parser that took about half of each check's own time (7 ms for role tf's argument
spec, measured), with its LibYAML parser a tenth of it. The pure Python parser stays the
fallback where PyYAML was built without LibYAML; both parse the same safe subset.
"""

from __future__ import annotations

import os
import re
from typing import Any

import yaml

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: str) -> Any:
    """The YAML document in ``path``, parsed safely (OSError and yaml.YAMLError as raised)."""
    with open(path, encoding="utf-8") as handle:
        return yaml.load(handle, Loader=SAFE_LOADER)  # noqa: S506 - a safe loader, LibYAML's when built


# A name of the runbook's: tf_ and lower-case letters, digits and underscores.
RUNBOOK_NAME = re.compile(r"\btf_[a-z0-9_]+")


def runbook_names(roles_dir: str) -> set[str]:
    """Every ``tf_...`` name the roles beside ``roles_dir``'s and the playbooks beside it
    spell (their options, defaults, facts and the variables they read), for telling a
    misspelled variable from one of the runbook's, comment lines left out. Scanned, not
    listed: a list would have to follow every new variable. Unreadable files are skipped."""
    names: set[str] = set()
    top = os.path.dirname(os.path.normpath(roles_dir))
    for root in (roles_dir, os.path.join(top, "playbooks")):
        for directory, subdirs, files in os.walk(root):
            subdirs[:] = [name for name in subdirs if name not in ("molecule", "files", "__pycache__")]
            for name in files:
                if name.endswith((".yml", ".yaml")):
                    try:
                        with open(os.path.join(directory, name), encoding="utf-8") as handle:
                            # Not comments: they may quote a misspelling.
                            for line in handle:
                                if not line.lstrip().startswith("#"):
                                    names.update(RUNBOOK_NAME.findall(line))
                    except (OSError, UnicodeDecodeError):
                        continue
    return names
