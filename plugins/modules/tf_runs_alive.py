#!/usr/bin/python
# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The runs alive on this host, from its register of ports (issue 41: hosts shared by runs)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_runs_alive
short_description: List the TensorFlow runs alive on this host, whoever started them
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - Reads the host's registers of ports (every user's C(/tmp/tf-runbook-ports-<uid>), written by the preflight's probe of every run,
    module_utils/tf_ports_auto.py) and returns the runs alive here, whoever started them, each with its run id,
    the inventory host it runs as, the user who started it, since when, and its ports.
  - A run is C(running) while a process listens on one of its ports, and C(reserved) for up to an hour after its
    preflight reserved them with nothing listening yet (its deploy and launch; between two attempts). A run that
    ended released its reservations (the wait of a host whose workers all succeeded, the collect, an operator's
    stop) and is not listed.
  - With O(run_id), every reservation of that run here instead, alive or not (a reattach finds the ports
    C(tf_worker_port=auto) picked).
  - Changes nothing.
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
options:
  run_id:
    description: Only this run, alive or not; empty for every run alive here.
    type: str
    default: ""
  me:
    description: With O(run_id), the inventory host whose ports of that run to return as RV(ports).
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    details: It only reads.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: List the runs alive on this host
  tf_runbook.multiworker.tf_runs_alive:
  register: alive

- name: Find the ports run 20261206T094223Z-b0774e picked here
  tf_runbook.multiworker.tf_runs_alive:
    run_id: 20261206T094223Z-b0774e
  register: found
"""

RETURN = r"""
runs:
  description: The runs, oldest first, each with C(run_id), C(host) (the inventory host that reserved the ports),
    C(user), C(since) (seconds since the epoch), C(ports), C(listening) (those a process listens on now) and
    C(state) (C(running), C(reserved), or with O(run_id) C(ended)).
  type: list
  elements: dict
  returned: always
  sample: [{"run_id": "exp-a", "host": "w0", "user": "alice", "since": 1765011000.5, "ports": [20000, 20001],
            "listening": [20000, 20001], "state": "running"}]
ports:
  description: With O(run_id) and O(me), the ports that run reserved here as that inventory host ([] when none).
  type: list
  elements: int
  returned: always
lines:
  description: One line per run, as status.yml prints them.
  type: list
  elements: str
  returned: always
  sample: ["w0: run exp-a of alice, running since 2026-12-06 13:30:00 UTC (2 min 5 s), ports 20000,20001"]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_ports_auto import REGISTRY, live_runs, run_line
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_probe_ports import listening_inodes


def main() -> None:
    module = AnsibleModule(argument_spec={"run_id": {"type": "str", "default": ""}, "me": {"type": "str", "default": ""}},
                           supports_check_mode=True)
    run_id, me = module.params["run_id"], module.params["me"]
    runs = live_runs(REGISTRY, lambda port: bool(listening_inodes(port)), every=bool(run_id))
    if run_id:
        runs = [run for run in runs if run["run_id"] == run_id]
    ports = next((run["ports"] for run in runs if run_id and run["host"] == me), [])
    module.exit_json(changed=False, runs=runs, ports=ports, lines=[run_line(run) for run in runs])


if __name__ == "__main__":
    main()
