#!/usr/bin/python
# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""End this host's preflight probe listeners and wait until the ports are free again (after a
refused preflight, or for a listener that outlived its host's reach); give up the ports the
probe reserved. The module only parses its options and calls ``module_utils/tf_probe_listen``
and ``tf_ports_auto``."""

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_preflight_stop
short_description: End a host's preflight probe listeners
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - Tells the probe listener of this host and run (started by
    M(tf_runbook.multiworker.tf_preflight_host)) to end, and waits until O(ports) are free.
    Only this run's own listener obeys; a port some other process holds gets nothing.
  - With O(release), gives up the ports reserved for this run and host in the host's
    register of ports, so that a later run may take them.
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
options:
  ports:
    description: The ports the listener holds.
    type: list
    elements: int
    default: []
  run_id:
    description: The run whose listener ends.
    type: str
    default: ""
  me:
    description: This host's inventory name (with O(run_id), the token the listener obeys).
    type: str
    default: ""
  listener_pid:
    description: The listener process M(tf_runbook.multiworker.tf_preflight_host) started
      (0 when none); only the ports it holds are told to stop. Unset, every port is.
    type: int
  timeout:
    description: Seconds to wait for the ports to be free.
    type: float
    default: 10
  release:
    description: Give up this run's and host's reservations in the register of ports (a refused preflight).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Runs in check mode too (the listeners of a dry run are real); a reservation is never made there.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Stop this host's probe listeners (after a failed preflight)
  tf_runbook.multiworker.tf_preflight_stop:
    ports: [2222, 2223]
    run_id: mnist-20260101-1200
    me: "{{ inventory_hostname }}"
    listener_pid: "{{ host_probe.listener_pid }}"
    release: true
"""

RETURN = r"""
released:
  description: The ports given up in the register of ports ([] without O(release)).
  type: list
  elements: int
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_ports_auto import REGISTRY, release
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_probe_listen import probe_token, stop_listeners

ARGUMENT_SPEC = {
    "ports": {"type": "list", "elements": "int", "default": []},
    "run_id": {"type": "str", "default": ""},
    "me": {"type": "str", "default": ""},
    "listener_pid": {"type": "int"},
    "timeout": {"type": "float", "default": 10},
    "release": {"type": "bool", "default": False},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    token = probe_token(params["run_id"], params["me"]) if params["run_id"] else ""
    still = stop_listeners(params["ports"], params["timeout"], token, params["listener_pid"])
    released = []
    if params["release"] and params["run_id"] and not module.check_mode:
        released = release(REGISTRY, params["run_id"], params["me"])
    if still:
        module.fail_json(msg=f"ports {still} are still taken after the probe listeners were told to stop")
    module.exit_json(changed=False, released=released)


if __name__ == "__main__":
    main()
