#!/usr/bin/python
# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Judge a finished run from the files the collect phase fetched to the controller."""

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_verdict
short_description: Check a collected run and write its summary.json
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - Reads C(<run_dir>/<host>/worker-<index>/) and C(<run_dir>/<host>/retry-<n>/worker-<index>/)
    as fetched by the tf_collect role (C(worker.log), C(exit.json), C(tf_config.json) and the
    chief's marker, if any), parses every log once, and runs the run's checks, each with the
    workers it concerns.
  - Reads every output format of C(module_utils/tf_metrics.py) (the metrics contract's
    C(worker=I ...) lines, Keras' own C(model.fit(verbose=2)) epoch lines, and any format
    registered there). A check the job's output does not allow is reported as C(not checked)
    (C(ok) null), never as ok or failed.
  - Judges a restarted run as a whole. Each epoch counts once, from the latest attempt that
    printed it (C(epoch_sources) in summary.json). An attempt that begins after epoch E
    (C(resumed_from_epoch=E), or its first epoch is E+1) is accepted only when every worker
    completed and agreed on epochs 1..E in the attempts before; anything else fails
    C(epochs_once). The workers of one attempt must begin at the same epoch (C(restore_agree);
    the others get cause C(restore-mismatch)).
  - Gives every worker a cause (exit.json's, or one derived from its exit status and
    C(stopped_by)); the failure reason starts with the culprit's cause. A stalled run names
    the workers stuck in their own code (from their captured stacks), else says that every
    worker stalled. A run an operator stopped is reported as stopped at epoch N of T, with no
    culprit.
  - Writes C(<run_dir>/summary.json) (mode 0600, the run directory 0700) and returns the same
    data with a printable table (for a long run, only the first and last epochs and those a
    check names).
  - Runs on the controller; never fails itself for what the run holds, the caller decides.
    Whatever the run directory holds, a summary.json is written. A O(run_dir) that does not
    exist is refused and nothing is written, since no host gave a file of the run and this
    controller never launched it (a mistyped C(-e tf_run_id) of C(collect.yml)).
  - An action plugin of the same name runs the judgement in the task's own process on the
    controller, without starting a module; the code is in C(module_utils/tf_verdict_*.py).
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
options:
  run_dir:
    description: The run's directory on the controller.
    type: path
    required: true
  run_id:
    description: The run id.
    type: str
    required: true
  marker:
    description:
      - What only the chief writes, as a path relative to its worker directory (the default
        job's completion marker, or for example C(model/model.keras)).
      - For a job that prints no C(worker=) lines, the default marker written by no worker
        is reported as not checked.
    type: str
    default: multiworker-complete.txt
  expected_size:
    description: Cluster size the run was launched with; 0 to take it from the TF_CONFIGs.
    type: int
    default: 0
  wait_outcome:
    description:
      - The wait's outcome of the last attempt (the C(tf_wait_outcome) filter's result).
        Its C(failed_workers) (each with C(index), C(host), C(returncode), C(reason), C(cause),
        C(log_tail)) names a culprit the collected files do not show, C(lost_hosts) a lost
        host, C(stalled) (null, or C(seconds) and C(detail)) a stall.
      - Not given (null) keeps what the run's earlier summary.json recorded (C(collect.yml)
        alone), and summary.json's C(judged_again) says so.
    type: dict
  attempts:
    description:
      - How each attempt ended (C(tf_attempts_history)), a list of C(attempt) (its number),
        C(ok) and C(outcome) (the wait's outcome of that attempt); the report's timeline takes
        each attempt's failed workers from it.
      - Not given (null) keeps what the earlier summary.json recorded.
    type: list
    elements: dict
  devices:
    description:
      - Worker index (as a string) to its C(CUDA_VISIBLE_DEVICES) (null, not set), from the
        preflight; recorded for the report.
      - Not given (null) keeps what the earlier summary.json recorded.
    type: dict
  left_out:
    description:
      - Host to the files over C(tf_collect_max_mb) that stayed on it, each C(path) and
        C(bytes); listed in the table and summary.json.
      - Not given (null) keeps what the earlier summary.json recorded.
    type: dict
  context:
    description:
      - Extra data recorded as is in summary.json's C(context) (for example a note); the
        verdict never reads it. The inputs above are recorded beside it as C(wait),
        C(attempts), C(devices) and C(left_out).
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
    details: In check mode no summary.json is written.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Judge a collected run of the default job, on the controller, with a note in summary.json
  tf_runbook.multiworker.tf_verdict:
    run_dir: runs/20250114T100200Z-abc123
    run_id: 20250114T100200Z-abc123
    wait_outcome: "{{ tf_wait_outcome }}"
    attempts: "{{ tf_attempts_history }}"
    context:
      note: nightly regression run
  register: verdict
  delegate_to: localhost
  run_once: true

- name: Judge a run whose chief saves its model as model/model.keras
  tf_runbook.multiworker.tf_verdict:
    run_dir: runs/20250114T100200Z-abc123
    run_id: 20250114T100200Z-abc123
    marker: model/model.keras
    expected_size: 4
  register: verdict

- name: Fail when a check failed
  ansible.builtin.assert:
    that: verdict.failed_checks | length == 0
    fail_msg: "{{ verdict.table | join('\n') }}"
"""

RETURN = r"""
summary:
  description:
    - The content of summary.json. Besides the run's status, cluster, checks and metrics, per
      worker C(cause) (C(kind), one of the run contract's causes, and C(detail)) and C(stacks)
      (null unless captured), C(epoch_sources) (epoch to the attempt it was judged from),
      C(stall) (null, or C(culprits) and C(detail)), C(stopped) (null, or C(by), C(epoch) and
      C(of)), C(judged_again) (null, or what was kept from the earlier judgement) and the
      report's C(timeline) (per attempt, each worker row with its C(cause)).
  type: dict
  returned: always
table:
  description: Lines of the verdict table.
  type: list
  elements: str
  returned: always
failed_checks:
  description: Each failed check, as its name, a colon and its detail.
  type: list
  elements: str
  returned: always
not_checked:
  description: Each check the job's output did not allow, as its name, a colon and its detail.
  type: list
  elements: str
  returned: always
status:
  description: The run's status, as in summary.json.
  type: str
  returned: always
reason:
  description: Why the run failed, its culprit's cause first, as in summary.json; null when it passed.
  type: str
  returned: always
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_metrics import lines_of, parse_contract
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_metrics import parse_keras as _parse_keras
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_causes import stopped_as_victim
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_verdict_checks import (
    CHECK_NAMES,
    DEFAULT_MARKER,
    judge,
    skipped,
    stopped_by_runbook,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_verdict_run import (
    attempts_in,
    load_attempts,
    load_run,
    marker_inside,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_verdict_summary import (
    ARGUMENT_SPEC,
    INPUTS,
    failure_reason,
    left_out_lines,
    summarize_run,
    table,
    timeline_of,
    verdict,
)

# The names other code and tests use; the code lives in module_utils/tf_verdict_*.py.
__all__ = [
    "ARGUMENT_SPEC", "CHECK_NAMES", "DEFAULT_MARKER", "add_timeline", "attempts_in", "failure_reason", "judge",
    "left_out_lines", "load_run", "marker_inside", "parse_keras", "parse_log", "skipped", "stopped_as_victim",
    "stopped_by_runbook", "summarize", "table", "verdict",
]  # fmt: skip


def parse_log(text: str) -> dict[str, Any]:
    """The metrics contract in one worker's log (see tf_metrics.parse_contract)."""
    return parse_contract(lines_of(text))


def parse_keras(text: str) -> dict[str, Any]:
    """Keras' own epoch lines in one worker's log (see tf_metrics.parse_keras)."""
    return _parse_keras(lines_of(text))


def summarize(run_id: str, run_dir: str, marker_name: str, expected_size: int, context: dict[str, Any]) -> dict[str, Any]:
    """summary.json of a run, with the inputs given as a context of recorded keys (``wait``,
    ``attempts``, ``devices``, ``left_out``), as summary.json records them."""
    inputs = {option: context.get(key) for option, key in INPUTS.items()}
    extra = {k: v for k, v in context.items() if k not in INPUTS.values()}
    return summarize_run(run_id, run_dir, marker_name, expected_size, inputs, extra)


def add_timeline(summary: dict[str, Any], run_dir: str, marker_name: str) -> dict[str, Any]:
    """Add the report's ``timeline`` (one entry per attempt) to a summary."""
    summary["timeline"] = timeline_of(summary, run_dir, load_attempts(run_dir, marker_name))
    return summary


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result = verdict(module.params, module.check_mode)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
