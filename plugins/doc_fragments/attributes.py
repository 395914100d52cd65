# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The attributes every module of the collection declares (check mode, diff mode, platform).

A module extends ``tf_runbook.multiworker.attributes`` and gives the ``support`` of each
attribute (with ``details`` where support is partial or needs a word); the descriptions
and the platform live here once.
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check mode and report what it would change without changing it.
  diff_mode:
    description: Returns the changes made (or, in check mode, those it would make) in diff mode.
  platform:
    description: Target OS/families that can be operated against.
    support: full
    platforms: posix
"""
