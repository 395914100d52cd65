# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

# A documentation-only module, as ansible.builtin.validate_argument_spec is: the work is the
# action plugin plugins/action/tf_role_inputs.py, which runs on the controller only.

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_role_inputs
short_description: Check a role's inputs for every host of the play in one task
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - Checks the role's variables against one entry point of its C(meta/argument_specs.yml),
    as Ansible's automatic check of the C(main) entry point does, but for every host of the
    play in one task on the controller (run it with C(run_once)), instead of in a worker
    process per host.
  - On the task's host it checks every option's value as that host sees it (role
    defaults, play and role variables, extra vars, its host variables); on every other
    host it checks the options that host sets itself (inventory and group variables,
    facts, C(set_fact)), which are the only ones that can differ. A host variable that a
    play or role variable overrides is checked too, though its value is not used.
  - Whole numbers are also checked against the ranges the role declares in
    C(meta/ranges.yml), beside its argument spec (a low, a high, what 0 means); an
    argument spec checks types only.
  - Each error names its host. The task fails when there is any.
  - With O(later), the same task checks the types of later phases' inputs too.
  - O(problems) adds what argument specs and ranges cannot say (a pattern that does not
    compile, a path that does not exist), computed by the task, so that one task refuses
    the run with every reason at once.
  - The roles of this collection name their entry points after what they do (not
    C(main)), so that Ansible does not check them a second time per host.
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
options:
  role_path:
    description: The role's directory (C(role_path) in its tasks).
    type: path
    required: true
  entry_point:
    description:
      - The entry point of the role's C(meta/argument_specs.yml) to check against.
      - Required unless O(contract) is set (a role without inputs of its own).
    type: str
  hosts:
    description: The hosts to check. By default the play's active hosts
      (C(ansible_play_hosts)).
    type: list
    elements: str
  problems:
    description: Further refusals, each naming its host, found by the task itself; empty
      strings are left out. Any of them fails the task too, after O(refusal).
    type: list
    elements: str
    default: []
  refusal:
    description: What the message says before O(problems) (joined by C(; )).
    type: str
    default: "Refused: "
  facts:
    description:
      - Variables to set once every input passed, as M(ansible.builtin.set_fact) sets them
        (not cached, above play variables), on every host of a C(run_once) task. They are
        what the role settles from its checked inputs, in the same task.
      - Nothing is set when the task fails.
    type: dict
    default: {}
  misspelled:
    description:
      - Also refuse a host variable (inventory, group or extra variable) whose name starts
        with C(tf_), is none of the names the runbook's roles and playbooks spell, and comes
        close to one of them (C(tf_job_timout) for C(tf_job_timeout)), since Ansible would
        ignore it and the run would go on without it. Names further off are left alone
        (C(tf_) is Terraform's prefix in many inventories). The contract's check
        (O(contract)) always does it.
    type: bool
    default: false
  contract:
    description:
      - Check the run's contract first, when no earlier task of the playbook run has
        (C(__tf_contract_checked) unset) - the role's check that comes first does it,
        whichever role that is, so that no play after the first spends a task on it.
      - The contract is role C(tf)'s entry point C(contract), beside this role, over the
        same hosts, with O(misspelled); every role's ranges (C(meta/ranges.yml)) on every
        host of the play; C(tf_stall_pattern) compiles as a regular expression; and
        C(tf_run_id), when given, is safe as a directory name.
      - A refusal of the contract is the task's whole refusal, worded for role C(tf).
      - Once it passes, C(tf_run_id) (the one given, else a new one) and
        C(__tf_contract_checked) join O(facts).
    type: bool
    default: false
  later:
    description:
      - Entry points of the roles a playbook run reaches after this one, each as
        C(role:entry_point) of a role beside this one (the same collection or roles
        directory), checked in the same task and refused with its own part of the message,
        so that their bad values are refused before anything is launched rather than at
        the phase that reads them, hours later. The preflight names every later phase's.
      - Those roles are not in this play, so only the values defined in it are checked,
        the user's (inventory, extra vars, play variables), and not those roles' defaults,
        which are the project's own. None of their options is required here (the runbook
        computes some of them later), and a value whose template names a variable that is
        not set yet is not checked (the runbook sets it later).
      - Their whole numbers are not range-checked here, since every role's ranges are the
        contract's (role C(tf)), checked first (O(contract)).
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    details: It only reads and checks.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Check the inputs of role tf_worker for every host, once
  tf_runbook.multiworker.tf_role_inputs:
    role_path: "{{ role_path }}"
    entry_point: deploy
  run_once: true

- name: Check the inputs of role tf_x and refuse a pattern that does not compile
  tf_runbook.multiworker.tf_role_inputs:
    role_path: "{{ role_path }}"
    entry_point: contract
    problems: ["{{ tf_x_pattern | tf_runbook.multiworker.tf_pattern_problem('tf_x_pattern', inventory_hostname) }}"]
    facts:
      __tf_x_checked: true
  run_once: true
"""

RETURN = r"""
hosts:
  description: The hosts whose inputs were checked, the task's host first.
  type: list
  elements: str
  returned: always
problems:
  description: Empty where the inputs passed. A refusal names every argument error (each
    prefixed with C(host <name>:)) and every non-empty entry of O(problems) in C(msg) alone,
    once, and returns no list that would repeat them.
  type: list
  elements: str
  returned: success
later:
  description: The entry points of O(later) checked, as C(role:entry_point).
  type: list
  elements: str
  returned: always
ansible_facts:
  description: O(facts), where the inputs passed and it is not empty.
  type: dict
  returned: success
validate_args_context:
  description: The role, entry point and path checked, as M(ansible.builtin.validate_argument_spec) returns it.
  type: dict
  returned: always
"""
