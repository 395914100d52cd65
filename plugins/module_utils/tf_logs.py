# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which lines of a worker's log are TensorFlow's own C++ logging (issue 39): logs.yml
leaves them out by default (tf_logs_filter) and says how many it hid.

TensorFlow's C++ code logs through absl (``I0000 00:00:1733512345.123456   12345
cuda_dnn.cc:8310] ...``: severity and date, time, thread id, file and line), and older
versions in their own format (``2025-01-14 10:02:11.123456: I tensorflow/core/util/
port.cc:153] oneDNN custom operations are on ...``); absl also warns once that it logs to
stderr before it was set up. Such lines say what the library did, rarely what the job
did, and a worker prints dozens of them before its first epoch.

Pure functions over lines; standard library only.
"""

from __future__ import annotations

import re

CPP_LOG_LINE = re.compile(
    r"^(?:"
    # absl / glog: I1206 09:41:16.123456  12345 file.cc:123] (I0000 00:00:<epoch> before absl knows the time)
    r"[IWEF]\d{4} \d{2}:\d{2}:\d[\d.]*\s+\d+\s+[\w./+-]+:\d+\]"
    # TensorFlow's own: 2025-01-14 10:02:11.123456: I tensorflow/core/util/port.cc:153]
    r"|\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?: [IWEF] [\w./+-]+:\d+\]"
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r")"
)


def is_cpp_log(line: str) -> bool:
    """Whether ``line`` is a line of TensorFlow's C++ logging."""
    return CPP_LOG_LINE.match(line.strip()) is not None


def quiet_tail(lines: list[str], count: int) -> tuple[list[str], int]:
    """The last ``count`` of ``lines`` that are not C++ log lines, and how many C++ log
    lines lay among and after them (those the reader would otherwise have seen)."""
    shown: list[str] = []
    hidden = 0
    for line in reversed(lines):
        if len(shown) >= count:
            break
        if is_cpp_log(line):
            hidden += 1
        else:
            shown.append(line)
    return shown[::-1], hidden
