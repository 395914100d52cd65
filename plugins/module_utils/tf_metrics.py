# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The output formats a job's log is read in, in one place (issue 25).

Standard library only: it is also shipped next to the supervisor on the hosts.
"""

from __future__ import annotations

# A line that shows a job's progress: an epoch line of the metrics contract
# (``worker=0 epoch=2/5 loss=...``) or Keras' epoch header (``Epoch 2/5``). The wait shows
# the latest such line, and the stall watchdog counts time since the last one.
PROGRESS_PATTERN = r"(?:^|\s)epoch=\d|^Epoch \d+/\d+"
