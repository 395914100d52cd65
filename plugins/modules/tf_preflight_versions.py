#!/usr/bin/python
# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ask a worker interpreter what it reports (its Python, TensorFlow and numpy versions, or
the GPUs each worker's TensorFlow sees): the module only parses its options and calls
``module_utils/tf_probe_interpreter``."""

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_preflight_versions
short_description: Ask a worker interpreter for its versions
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - Runs O(code) with the worker interpreter O(python) and returns the JSON it prints
    (M(tf_runbook.multiworker.tf_preflight_host) does the same in its look, given C(versions)).
  - A missing interpreter or code that fails is reported in C(versions.error), not as a task error.
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
options:
  python:
    description: The worker interpreter (a path, or a command found on the remote user's C(PATH)).
    type: str
    required: true
  code:
    description: Python code that prints what is asked as JSON.
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    details: It runs O(code), which is expected only to read; nothing else is done.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Ask the worker interpreter for its versions
  tf_runbook.multiworker.tf_preflight_versions:
    python: /home/u/tf-venv/bin/python
    code: "import json, sys; print(json.dumps({'python': sys.version.split()[0]}))"
  register: versions
"""

RETURN = r"""
versions:
  description: What O(code) printed, or C(error).
  type: dict
  returned: always
  sample: {"python": "3.11.2", "tensorflow": "2.16.1", "numpy": "1.26.4"}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_probe_interpreter import (
    VERSIONS_SPEC,
    command_runner,
    interpreter_versions,
)

ARGUMENT_SPEC = VERSIONS_SPEC


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    if not module.params["python"]:
        module.fail_json(msg="tf_preflight_versions needs python, the worker interpreter")
    versions = interpreter_versions(module.params["python"], module.params["code"], command_runner(module))
    module.exit_json(changed=False, versions=versions)


if __name__ == "__main__":
    main()
