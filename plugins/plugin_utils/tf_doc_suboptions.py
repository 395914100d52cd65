# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One doc fragment's options shown again as the suboptions of one option of another
module (``run_dir``'s as ``tf_worker_launch``'s ``deploy``, ``probe_reach``'s as
``tf_preflight_host``'s ``reach``): the text of each option is written once."""

from __future__ import annotations


def as_suboptions(documentation: str, head: str) -> str:
    """``documentation``'s options, indented under ``head`` (the YAML of the option that
    holds them, ending in ``suboptions:``)."""
    options = documentation.split("options:\n", 1)[1]
    indented = "".join("    " + line if line.strip() else line for line in options.splitlines(keepends=True))
    return head + indented
