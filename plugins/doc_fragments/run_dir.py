# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of a run's directories, written once for the two modules that take them.

``tf_runbook.multiworker.run_dir`` gives them as a module's own options (``tf_run_dir``);
``tf_runbook.multiworker.run_dir.deploy`` gives the same text as the suboptions of
``tf_worker_launch``'s ``deploy``, which does what ``tf_run_dir`` does in the same module run;
``tf_runbook.multiworker.run_dir.run`` only where a run lives (``base_dir``, ``run_id``), for
``tf_run_resume``.
Both modules' argument specs come from ``module_utils/tf_run_files.py``'s one spec.
"""

from __future__ import annotations

from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_doc_suboptions import as_suboptions


def _only_options(documentation: str, names: tuple[str, ...]) -> str:
    """``documentation``'s options ``names`` alone, each with its whole entry."""
    kept, keep = [], False
    for line in documentation.split("options:\n", 1)[1].splitlines(keepends=True):
        if line.startswith("  ") and not line.startswith("   "):
            keep = line.strip().rstrip(":") in names
        if keep:
            kept.append(line)
    return "\noptions:\n" + "".join(kept)


DEPLOY_HEAD = r"""
options:
  deploy:
    description: The options of M(tf_runbook.multiworker.tf_run_dir) (C(base_dir),
      C(run_id), C(indices), C(attempt), C(checkpoint_root), C(job_files), C(configs),
      C(job_archive), C(job_env), C(visible_devices), C(pythonpath), C(interpreter));
      this attempt's files are written first, in this module run. Omitted, the worker
      directories O(launch.dirs) must exist already.
    type: dict
    suboptions:
"""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  base_dir:
    description: Where this host keeps its runs.
    type: path
    required: true
  run_id:
    description: The run id; one path component.
    type: str
    required: true
  indices:
    description: Worker indices that run on this host.
    type: list
    elements: int
    required: true
  checkpoint_root:
    description: Where the user keeps checkpoints (C(tf_checkpoint_dir)); C(~) is the
      remote user's home; it must then be absolute. Empty means under the run.
    type: path
    default: ""
  attempt:
    description: Restart attempt; 0 is the first launch.
    type: int
    default: 0
  job_files:
    description: Files of the job, each C(name) and C(content), written (mode 0600) into
      the job directory when missing or different.
    type: list
    elements: dict
    default: []
  configs:
    description: Each worker's TF_CONFIG, C(index) and C(content), written to
      C(tf_config.json) in its directory when missing or different, then read back.
    type: list
    elements: dict
    default: []
  job_archive:
    description: A gzipped tar on this host (the user's project directory) unpacked into
      the job directory; members must stay inside it. Refused, before anything is unpacked,
      are absolute or escaping names, members below a symlink, symlinks that point outside
      the job directory or through another symlink of the archive, and anything but files,
      directories and symlinks; each member is checked again on the disk as it is written
      (tarfile's C(data) filter where the host's Python has it, else its real path). Empty
      for none.
    type: path
    default: ""
  job_env:
    description: Environment of every worker of this host, written with C(visible_devices)
      and C(pythonpath) to C(job_env.json) (mode 0600) in each worker's directory, for the
      supervisor. Never returned; the option is C(no_log), so its values are masked in
      the module's results and logs even when the task has no C(no_log).
    type: dict
    default: {}
  visible_devices:
    description: Worker index (a string) to its C(CUDA_VISIBLE_DEVICES); null for none.
    type: dict
    default: {}
  pythonpath:
    description: Put the job directory first on each worker's C(PYTHONPATH).
    type: bool
    default: false
  interpreter:
    description: The interpreter that will run the job; only shown in the diff (C(~) allowed).
    type: path
    default: ""
"""

    # An annotated assignment, as ansible-test's yamllint reads each plain one of this class
    # as a YAML string constant; Ansible reads the attribute like any other fragment.
    DEPLOY: str = as_suboptions(DOCUMENTATION, DEPLOY_HEAD)
    # Where a run lives on a host (base_dir, run_id), for a module that reads a run rather
    # than writes one (tf_run_resume).
    RUN: str = _only_options(DOCUMENTATION, ("base_dir", "run_id"))
