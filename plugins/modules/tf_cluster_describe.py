# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

# A documentation-only module: the work is the action plugin plugins/action/tf_cluster_describe.py,
# which runs on the controller and never calls a module.

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_cluster_describe
short_description: Describe the workers every host offers and compute the cluster spec, once for the play
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - Reads, for each host of O(hosts), its variables as a task of this play on that host sees them (role
    defaults, play variables, inventory, facts, extra vars) and describes the workers it offers, C(tf_worker_address),
    C(tf_worker_port) and C(tf_worker_slots) templated in that host's context; its task type is C(chief), C(ps) or
    C(evaluator) when the group named by C(tf_chief_group), C(tf_ps_group) or C(tf_evaluator_group) holds it (in that
    order), else C(worker); a host in none of those groups and not in C(tf_workers_group) is a spare.
  - Builds the cluster spec from those entries in the order of O(hosts) (the filter
    C(tf_runbook.multiworker.tf_cluster_spec), which refuses a host listed twice, shared endpoints, bad ports and
    impossible shapes) and sets it as the fact C(tf_cluster_spec), as C(ansible.builtin.set_fact) sets a fact; with
    C(run_once), on every host of the play.
  - A host whose value cannot be templated, or that lacks one of these variables, is refused by name, every such
    host at once.
  - Runs on the controller only (an action plugin), in one task for the play, in place of a task on every host.
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
options:
  hosts:
    description: The hosts to describe, in the cluster's order (the chief's, workers', ps', evaluator's and
      spares' groups, each in inventory order, kept to the play's hosts).
    type: list
    elements: str
    required: true
  resolve:
    description: Resolve host names on the controller, so that one endpoint written as a name and as an address
      is refused as shared.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    details: Reads and computes only; the fact is set in check mode too.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Compute the cluster spec once for every host
  tf_runbook.multiworker.tf_cluster_describe:
    hosts: "{{ groups['tf_workers'] | select('in', ansible_play_hosts_all) | list }}"
  run_once: true
"""

RETURN = r"""
ansible_facts:
  description: The fact set on the play's hosts.
  type: dict
  returned: success
  contains:
    tf_cluster_spec:
      description: The cluster spec (see the filter C(tf_runbook.multiworker.tf_cluster_spec)).
      type: dict
      returned: success
msg:
  description: How many hosts the spec describes, or every host that could not be described.
  type: str
  returned: always
  sample: The cluster spec of 3 host(s)
"""
