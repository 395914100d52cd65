# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

# A documentation-only module: the work is the action plugin plugins/action/tf_pip_follow.py,
# which asks the host for the job's status and pip's log until the install ends.

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_pip_follow
short_description: Follow a pip install running in the background on a host, saying how far it is
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - Waits for an C(ansible.builtin.pip) task started with C(async) and C(poll=0) and with
    C(--log) O(log) among its C(extra_args), asking its status (C(ansible.builtin.async_status)) every
    O(interval) seconds, and returns the install's own result once it ends (its record is then removed).
  - Between two asks it reads the step lines of pip's log (C(Collecting), C(Downloading), C(Installing collected
    packages), C(Successfully installed)), filtered on the host by O(python), and prints one line when the step
    changes, and at least every O(every) seconds while it does not, such as
    "w0 - installing the worker requirements - 14 packages collected (2 pinned, with their dependencies),
    312 MB downloaded, downloading tensorflow_cpu-2.21.0-cp311-cp311-manylinux_2_27_x86_64.whl (270 MB);
    1m 05s so far" (with colons where this shows dashes).
  - Fails when the job has no record, or when no record came O(timeout) seconds (the job's own C(async) limit,
    which ends pip) plus 60 seconds after it started, naming the host and pip's log.
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
options:
  job:
    description: The job id the async task registered (C(ansible_job_id)).
    type: str
    required: true
  log:
    description: The file pip logs to (its C(--log) argument); it need not exist yet.
    type: path
    required: true
  python:
    description: An interpreter on the host that reads the log (the virtualenv's bootstrap interpreter).
    type: path
    required: true
  pins:
    description: How many packages the requirements pin, for the lines printed.
    type: int
    default: 0
  target:
    description: Where the packages go (the virtualenv), named in the first line printed.
    type: str
    default: ""
  timeout:
    description: The job's time limit, the C(async) of the task that started it (C(tf_worker_install_timeout)).
    type: int
    required: true
  interval:
    description: Seconds between two asks.
    type: float
    default: 5.0
  every:
    description: Seconds after which the same step is printed again, with the time so far.
    type: float
    default: 30.0
attributes:
  check_mode:
    support: full
    details: Follows whatever job the task gave it; in check mode that is a check of the install.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Install the worker requirements in the background
  ansible.builtin.pip:
    requirements: /home/u/tf-runbook/worker-requirements.txt
    virtualenv: /home/u/tf-runbook/venv
    extra_args: --log /home/u/tf-runbook/pip-install.log
  async: 3600
  poll: 0
  register: install

- name: Follow the install until it ends, saying how far it is
  tf_runbook.multiworker.tf_pip_follow:
    job: "{{ install.ansible_job_id }}"
    log: /home/u/tf-runbook/pip-install.log
    python: /usr/bin/python3
    pins: 2
    timeout: 3600
"""

RETURN = r"""
seconds:
  description: How long the install took from the moment this task started following it.
  type: float
  returned: when the install ended
  sample: 95.2
changed:
  description: The install's own result (C(ansible.builtin.pip)), C(changed), C(cmd), C(stdout) and the rest.
  type: bool
  returned: when the install ended
"""
