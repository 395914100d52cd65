# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The option of a worker's progress lines, written once for the two modules that read a
worker's records (``tf_worker_wait`` and ``tf_worker_status``, both over
``module_utils/tf_worker_records.py``)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  progress_pattern:
    description: Regular expression of the job's own progress lines (tf_stall_pattern),
      in addition to the registered formats' (C(tf_metrics.progress_pattern)); empty for none.
    type: str
    default: ""
"""
