#!/usr/bin/python
# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""From this host, reach the worker endpoints it must reach, as TensorFlow will, then wait for
this host's own probe listener to end (the two-step probe's second step, where --forks cannot
run every host at once). The module only parses its options and calls
``module_utils/tf_probe_reach``."""

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_preflight_reach
short_description: Reach the worker ports a host must reach before a TensorFlow run is launched
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - Opens a connection to every endpoint of O(endpoints), up to 32 at once, and reports
    those that cannot be reached and why; each must answer as the probe listener of its
    host for O(run_id) (started by M(tf_runbook.multiworker.tf_preflight_host)) before this
    host sends its hello, so that a service that is not the probe gets nothing from it.
  - Then waits, for up to O(wait) seconds, until this host's own listener (O(listener_pid))
    has heard every peer and ended.
  - The probe scales with the slowest round trip, not with the number of hosts.
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
  - tf_runbook.multiworker.probe_reach
options:
  me:
    description: This host's inventory name, sent to each listener.
    type: str
    default: ""
  run_id:
    description: The run about to be launched.
    type: str
    required: true
  ports:
    description: The ports this host's listener holds.
    type: list
    elements: int
    default: []
  listener_pid:
    description: This host's listener to wait for (0, none).
    type: int
    default: 0
attributes:
  check_mode:
    support: full
    details: Runs in check mode too (the preflight probes for real in a dry run); it only connects.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Reach the worker ports this host must reach
  tf_runbook.multiworker.tf_preflight_reach:
    me: "{{ inventory_hostname }}"
    run_id: mnist-20260101-1200
    endpoints:
      - {index: 0, host: w1, address: 10.0.0.11, port: 2222}
      - {index: 1, host: w2, address: 10.0.0.12, port: 2222}
    timeout: 10
    ports: [2222, 2223]
    listener_pid: "{{ host_probe.listener_pid }}"
    wait: 20
  register: reach
"""

RETURN = r"""
failures:
  description: Each endpoint that could not be reached, with C(reason).
  type: list
  elements: dict
  returned: always
  sample: [{"index": 1, "host": "w2", "address": "10.0.0.12", "port": 2222, "reason": "Connection refused"}]
listener_gone:
  description: Whether this host's listener had ended, and freed O(ports), when the module
    returned (true when there was none).
  type: bool
  returned: always
ports_held:
  description: The ports of O(ports) still held when the module returned ([] once the listener is gone).
  type: list
  elements: int
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_json_list import json_list
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_probe_reach import REACH_SPEC, connect_and_await

ARGUMENT_SPEC = {
    "me": {"type": "str", "default": ""},
    "run_id": {"type": "str", "required": True},
    "ports": {"type": "list", "elements": "int", "default": []},
    "listener_pid": {"type": "int", "default": 0},
    **REACH_SPEC,
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    try:
        params["endpoints"] = json_list(params["endpoints"], "endpoints", dict)
    except ValueError as exc:
        module.fail_json(msg=f"host {params['me']}: {exc}")
    result = connect_and_await(params, params["me"], params["run_id"], params["ports"], params["listener_pid"] or 0)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
