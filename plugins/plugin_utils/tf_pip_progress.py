# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How far a pip install is, read from its log (``pip install --log``), for the line the
deploy prints while the worker requirements install (issue 39).

pip prints nothing to a non-terminal until it ends, but its ``--log`` file gets a line as
it takes each step, after a timestamp: ``Collecting <requirement>`` (or ``Processing
<file>`` for a local wheel) per package it resolves, ``Downloading <file> (<size>)`` as a
download starts, ``Installing collected packages: a, b, ...`` once every package is in
hand, and ``Successfully installed ...`` at the end. The pins are few (TensorFlow and
NumPy by default) and pip resolves their dependencies as it goes, so the total is not known
until the install step: the line says how many were collected and how much was
downloaded, and then how many are being installed.
"""

from __future__ import annotations

import re
from typing import Any

# A log line: an ISO timestamp, a space, then pip's message (indented for a sub-step).
_LINE = re.compile(r"^\d{4}-\d\d-\d\dT[\d:,.]+ (?P<message>.*)$")
_COLLECTING = re.compile(r"^(?:Collecting|Processing) (?P<what>\S+)")
_DOWNLOADING = re.compile(r"^\s*Downloading (?P<file>\S+) \((?P<size>[\d.]+) (?P<unit>[kMG]?B)\)")
_INSTALLING = re.compile(r"^Installing collected packages: (?P<names>.*)$")
_UNITS = {"B": 1, "kB": 1000, "MB": 1000**2, "GB": 1000**3}


def pip_progress(log: str) -> dict[str, Any]:
    """What the log of one ``pip install`` says so far: ``collected`` (packages resolved),
    ``downloaded_bytes`` (the downloads started before the last one, which are done),
    ``downloading`` (the file being downloaded, its ``size`` in bytes; None when none is),
    ``installing`` (the number of packages pip installs, once it says; None before) and
    ``done`` (pip said it installed them)."""
    collected = 0
    finished_bytes = 0
    downloading: dict[str, Any] | None = None
    installing: int | None = None
    done = False
    for raw in log.splitlines():
        matched = _LINE.match(raw)
        if matched is None:
            continue
        message = matched.group("message")
        if _COLLECTING.match(message):
            collected += 1
            if downloading is not None:  # the next package: the last download ended
                finished_bytes += downloading["size"]
                downloading = None
        elif found := _DOWNLOADING.match(message):
            if downloading is not None:
                finished_bytes += downloading["size"]
            downloading = {"file": found.group("file"), "size": int(float(found.group("size")) * _UNITS[found.group("unit")])}
        elif found := _INSTALLING.match(message):
            if downloading is not None:
                finished_bytes += downloading["size"]
                downloading = None
            installing = len([name for name in found.group("names").split(",") if name.strip()])
        elif message.startswith("Successfully installed"):
            done = True
    return {"collected": collected, "downloaded_bytes": finished_bytes, "downloading": downloading,
            "installing": installing, "done": done}


def _megabytes(size: int) -> str:
    if size < 1000**2:
        return f"{size / 1000:.0f} kB"
    return f"{size / 1000**2:.0f} MB" if size >= 10 * 1000**2 else f"{size / 1000**2:.1f} MB"


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def progress_line(host: str, progress: dict[str, Any], elapsed: float, pins: int, target: str = "") -> str:
    """One line for the operator: the host, the step pip is at and the time it has taken
    (and where the packages go, ``target``, when given)."""
    head = f"{host}: installing the worker requirements" + (f" into {target}" if target else "")
    if progress["done"]:
        step = "installed; finishing"
    elif progress["installing"] is not None:
        step = f"all {progress['installing']} packages in hand, installing them"
    elif progress["collected"] == 0:
        step = f"starting pip ({pins} pinned package{'' if pins == 1 else 's'})"
    else:
        step = f"{progress['collected']} packages collected ({pins} pinned, with their dependencies)"
        if progress["downloaded_bytes"]:
            step += f", {_megabytes(progress['downloaded_bytes'])} downloaded"
        if progress["downloading"] is not None:
            step += f", downloading {progress['downloading']['file']} ({_megabytes(progress['downloading']['size'])})"
    return f"{head}: {step}; {_clock(elapsed)} so far"
