# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The output formats a job's log is read in, in one place (issue 25).

Every format the verdict understands is one ``Format`` in ``FORMATS``: how a worker's log
lines become a *series* (metrics per epoch), which lines show progress (the wait and the
stall watchdog), which lines the supervisor timestamps, and how those timed lines become a
worker's clock in the report's timeline. Adding a format is one parser and its tests:
``register(Format(...))``; the supervisor, the wait and the verdict ask this module.

The metrics contract's other lines (``worker=I cluster_workers=N replicas=R``,
``resumed_from_epoch=E``, ``training_complete``) are read by ``parse_contract`` too: they
are the run contract a job prints for the runbook, whatever format its epochs come in.

A series is a dict: ``epochs`` ({epoch: {metric: value text}}, the first of a repeated
epoch), ``counts`` ({epoch: how often it was printed}), ``totals`` (set of epoch totals
the job announced), ``errors`` (lines it could not read, as text) and, where the format
says so, ``resumed`` (the epoch the job resumed after, or None).

Standard library only: it is also shipped next to the supervisor on the hosts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable

# --- The metrics contract: worker=I key=value ... -------------------------------------

CONTRACT_LINE = re.compile(r"^worker=(?P<index>\d+)\s+(?P<rest>.*)$")
PAIR = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_.]*)=(?P<value>\S+)")
# An epoch value of the contract: E, or E/N (epoch E of N).
EPOCH_VALUE = re.compile(r"^(?P<epoch>\d{1,9})(?:/(?P<total>\d{1,9}))?$")

# --- Keras model.fit(verbose=2) -------------------------------------------------------
# "Epoch 2/3", then "5/5 - 0s - loss: 0.6689 - accuracy: 0.5688 - 116ms/epoch - 23ms/step"
# (Keras 3 and verbose=1 put timings or a bar elsewhere; the metrics are the " - name:
# value" parts of the epoch's last step line).
KERAS_EPOCH = re.compile(r"^Epoch (?P<epoch>\d{1,9})/(?P<total>\d{1,9})$")
KERAS_STEP = re.compile(r"^(?:\d+|Unknown)/(?:\d+|Unknown)\b")
KERAS_METRIC = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_.]*): (?P<value>\S+)$")

Series = dict[str, Any]


def small_int(text: str | None) -> int | None:
    """A small non-negative integer, or None (never raises, whatever the text)."""
    if text is None or not text.isdigit() or len(text) > 9:
        return None
    return int(text)


def lines_of(text: str) -> list[str]:
    """The log's lines as a terminal shows them: of a line rewritten with carriage returns
    (a progress bar), only its last state; stripped."""
    out = []
    for raw in text.splitlines():
        parts = [part for part in raw.split("\r") if part.strip()]
        out.append(parts[-1].strip() if parts else "")
    return out


def empty_series() -> Series:
    return {"epochs": {}, "counts": {}, "totals": set(), "errors": []}


def add_epoch(series: Series, epoch: int, metrics: dict[str, str]) -> None:
    """Count one printed epoch; the first of a repeated epoch is kept (the repeat itself
    fails epochs_once)."""
    series["counts"][epoch] = series["counts"].get(epoch, 0) + 1
    series["epochs"].setdefault(epoch, metrics)


def pairs_of(text: str) -> tuple[dict[str, str], list[str]]:
    """The ``key=value`` pairs of a line (the first value of a key) and the keys it
    repeats (issue 24, point 16: a repeated key is a malformed line, never its last value)."""
    pairs: dict[str, str] = {}
    repeated: list[str] = []
    for match in PAIR.finditer(text):
        key = match.group("key")
        if key in pairs:
            if key not in repeated:
                repeated.append(key)
            continue
        pairs[key] = match.group("value")
    return pairs, repeated


def parse_contract(lines: list[str]) -> dict[str, Any]:
    """The metrics contract in one worker's lines: the indices the worker printed, its
    header values (``cluster_workers``, ``replicas``, ``global_batch``, ``epochs``), its
    metrics per epoch, how often each epoch was printed (``counts``), the totals it
    announced (``epochs=N`` in the header, or ``epoch=E/N``), the epoch it resumed after
    (``resumed``), lines it could not read (``errors``) and whether it printed
    ``training_complete``."""
    parsed: dict[str, Any] = {"indices": set(), "header": {}, "complete": False, "resumed": None}
    parsed.update(empty_series())
    for number, line in enumerate(lines, start=1):
        match = CONTRACT_LINE.match(line)
        if not match:
            continue
        index = small_int(match.group("index"))
        if index is None:
            parsed["errors"].append(f"line {number}: worker index {match.group('index')[:20]} is not a small integer")
            continue
        parsed["indices"].add(index)
        rest = match.group("rest").strip()
        if rest == "training_complete":
            parsed["complete"] = True
            continue
        pairs, repeated = pairs_of(rest)
        if "epoch" in pairs:
            raw = pairs.pop("epoch")
            value = EPOCH_VALUE.match(raw)
            if not value:
                parsed["errors"].append(f"line {number}: epoch={raw[:40]} is not an epoch number (E or E/N)")
                continue
            epoch = int(value.group("epoch"))
            if repeated:
                shown = ", ".join(key[:40] for key in repeated)
                parsed["errors"].append(f"line {number}: epoch {epoch}: key {shown} repeated in one line")
            if value.group("total"):
                parsed["totals"].add(int(value.group("total")))
            add_epoch(parsed, epoch, pairs)
        elif "resumed_from_epoch" in pairs:
            parsed["resumed"] = small_int(pairs["resumed_from_epoch"])
        elif "replicas" in pairs or "cluster_workers" in pairs:
            parsed["header"] = pairs
            total = small_int(pairs.get("epochs"))
            if total is not None:
                parsed["totals"].add(total)
    return parsed


def parse_keras(lines: list[str]) -> Series:
    """Keras' own epoch lines (``model.fit(verbose=2)``): metrics per epoch (timings are
    not metrics), how often each epoch began, and the totals of its ``Epoch E/N`` lines."""
    series = empty_series()
    current: int | None = None
    pending: dict[str, str] | None = None

    def close() -> None:
        if current is not None:
            series["epochs"].setdefault(current, pending)

    for line in lines:
        header = KERAS_EPOCH.match(line)
        if header:
            close()
            current = int(header.group("epoch"))
            pending = None
            series["counts"][current] = series["counts"].get(current, 0) + 1
            series["totals"].add(int(header.group("total")))
            if series["counts"][current] > 1:
                current = None  # a repeated epoch: keep the first one's metrics
            continue
        if current is not None and KERAS_STEP.match(line):
            metrics = {}
            for part in line.split(" - ")[1:]:
                metric = KERAS_METRIC.match(part.strip())
                if metric and metric.group("name") != "ETA":  # a progress bar's time left
                    metrics[metric.group("name")] = metric.group("value")
            pending = metrics  # a progress bar's later line replaces its earlier one
    close()
    series["epochs"] = {e: m for e, m in series["epochs"].items() if m is not None}
    return series


# --- Clocks: a worker's timed lines (exit.json's timed_lines) as the report's times ----

Clock = dict[str, Any]


def empty_clock() -> Clock:
    return {"joined_at": None, "epoch_at": {}, "completed_at": None}


def contract_clock(timed: list[tuple[float, str]]) -> Clock:
    """When the worker joined (its ``cluster_workers`` line), finished each epoch (its
    epoch line) and printed ``training_complete``."""
    clock = empty_clock()
    for at, line in timed:
        match = CONTRACT_LINE.match(line.strip())
        if not match:
            continue
        rest = match.group("rest").strip()
        pairs = pairs_of(rest)[0]
        if rest == "training_complete":
            clock["completed_at"] = clock["completed_at"] or at
        elif "epoch" in pairs:
            value = EPOCH_VALUE.match(pairs["epoch"])
            if value:
                clock["epoch_at"].setdefault(str(int(value.group("epoch"))), at)
        elif "cluster_workers" in pairs or "replicas" in pairs:
            clock["joined_at"] = clock["joined_at"] or at
    return clock


def keras_clock(timed: list[tuple[float, str]]) -> Clock:
    """A Keras job has joined once its first epoch begins (``Epoch 1/N``); epoch E ended
    with the first step line after ``Epoch E/N``."""
    clock = empty_clock()
    current: int | None = None
    for at, line in timed:
        text = line.strip()
        header = KERAS_EPOCH.match(text)
        if header:
            current = int(header.group("epoch"))
            clock["joined_at"] = clock["joined_at"] or at
        elif current is not None and KERAS_STEP.match(text):
            clock["epoch_at"].setdefault(str(current), at)
    return clock


@dataclass(frozen=True)
class Format:
    """One output format of a job's epochs.

    ``parse``: a worker's lines (``lines_of``) to a series. ``progress``: a regex of the
    lines that show progress (searched in each line). ``timed``: a regex of the lines the
    supervisor timestamps (matched on the stripped line). ``clock``: timed lines to the
    worker's clock; by default each timed line is parsed alone and epoch E's time is the
    first line that printed it. ``label``: how the verdict names the format's lines.
    ``contract``: the format is the runbook's own (its index, cluster and completion
    lines are checked).
    """

    name: str
    label: str
    parse: Callable[[list[str]], Series]
    progress: str
    timed: str
    clock: Callable[[list[tuple[float, str]]], Clock] | None = None
    contract: bool = False

    def clock_of(self, timed: list[tuple[float, str]]) -> Clock:
        if self.clock is not None:
            return self.clock(timed)
        clock = empty_clock()
        for at, line in timed:
            for epoch in self.parse(lines_of(line))["epochs"]:
                clock["epoch_at"].setdefault(str(epoch), at)
        return clock


CONTRACT = Format(
    name="contract",
    label="epoch lines",
    parse=parse_contract,
    progress=r"(?:^|\s)epoch=\d",
    timed=r"^worker=",
    clock=contract_clock,
    contract=True,
)
KERAS = Format(
    name="keras",
    label="Keras epoch lines",
    parse=parse_keras,
    progress=r"^Epoch \d+/\d+",
    timed=r"^Epoch \d+/\d+$|^(?:\d+|Unknown)/(?:\d+|Unknown) ",
    clock=keras_clock,
)

# Asked in this order: the first format any worker of an attempt printed epochs in is the
# attempt's source of metrics.
FORMATS: list[Format] = [CONTRACT, KERAS]


def register(fmt: Format) -> None:
    """Add a format (replacing one of the same name), asked after the built-in ones."""
    unregister(fmt.name)
    FORMATS.append(fmt)


def unregister(name: str) -> None:
    FORMATS[:] = [fmt for fmt in FORMATS if fmt.name != name]


def format_named(name: str | None) -> Format | None:
    return next((fmt for fmt in FORMATS if fmt.name == name), None)


def progress_pattern(extra: str = "") -> str:
    """The progress lines of every registered format, and ``extra`` (the user's
    tf_stall_pattern) when it is set."""
    parts = [fmt.progress for fmt in FORMATS] + ([extra] if extra else [])
    return "|".join(f"(?:{part})" for part in parts)


def timed_pattern() -> str:
    """The lines the supervisor timestamps, of every registered format."""
    return "|".join(f"(?:{fmt.timed})" for fmt in FORMATS)


def is_timed(line: str) -> bool:
    """Whether the supervisor timestamps this log line."""
    return re.search(timed_pattern(), line.strip()) is not None


# --- Progress: a worker's timed lines as where its training stands (issue 39) ---------

# What a progress record keeps of the latest epoch's metrics: it travels in state.json and
# in every status of the wait, so a job printing many or long metrics cannot swell it.
PROGRESS_MAX_METRICS = 12
PROGRESS_MAX_TEXT = 40


def progress_of(timed: list[tuple[float, str]]) -> dict[str, Any] | None:
    """Where a worker's training stands, from its timed lines (the supervisor's clock, one
    clock for every host's times): the first registered format that timed an epoch
    (``source_of``'s order), its latest epoch (``epoch``, the one whose end came last),
    ``total`` (the largest total it announced; None without), that epoch's ``metrics``
    (``[name, value]`` pairs in the order printed, at most ``PROGRESS_MAX_METRICS``, texts
    cut to ``PROGRESS_MAX_TEXT``), ``epochs`` (how
    many epochs ended), ``joined_at``, ``first_at``, ``prev_at`` (the end of the epoch
    before the latest; None with one), ``last_at`` and ``completed_at`` (the contract's
    ``training_complete``). None when no format timed an epoch."""
    lines = [line for _at, line in timed]
    for fmt in FORMATS:
        clock = fmt.clock_of(timed)
        ends = sorted(((at, int(epoch)) for epoch, at in clock["epoch_at"].items() if str(epoch).isdigit()))
        if not ends:
            continue
        series = fmt.parse(lines_of("\n".join(lines)))
        last_at, epoch = ends[-1]
        metrics = series["epochs"].get(epoch) or {}
        # Pairs, in the order the job printed them (state.json is written with sorted keys).
        shown = [[str(k)[:PROGRESS_MAX_TEXT], str(v)[:PROGRESS_MAX_TEXT]] for k, v in list(metrics.items())[:PROGRESS_MAX_METRICS]]
        contract = CONTRACT.clock_of(timed) if not fmt.contract else clock
        return {
            "format": fmt.name,
            "epoch": epoch,
            "total": max(series["totals"]) if series["totals"] else None,
            "metrics": shown,
            "epochs": len(ends),
            "joined_at": clock["joined_at"] if clock["joined_at"] is not None else contract["joined_at"],
            "first_at": ends[0][0],
            "prev_at": ends[-2][0] if len(ends) > 1 else None,
            "last_at": last_at,
            "completed_at": contract["completed_at"],
        }
    return None


# --- The sidecar evaluator's lines: evaluator epoch=E name=value ... --------------------
# One line per evaluated checkpoint (the default job's --evaluate prints them); read apart
# from the training's formats: an evaluator's metrics are never a worker's.
EVALUATION_LINE = re.compile(r"^evaluator\s+epoch=(?P<epoch>\d{1,9})(?:\s+(?P<rest>.*))?$")


def parse_evaluations(text: str) -> list[dict[str, Any]]:
    """The evaluator's lines in the order printed: ``epoch`` (the checkpoint's) and its
    ``metrics`` ({name: value text})."""
    found = []
    for line in lines_of(text):
        match = EVALUATION_LINE.match(line)
        if match:
            metrics, _repeated = pairs_of(match.group("rest") or "")
            found.append({"epoch": int(match.group("epoch")), "metrics": metrics})
    return found


def parse_worker(text: str) -> dict[str, Any]:
    """One worker's log read once: the contract (``parse_contract``) and the series of
    every registered format, by name."""
    lines = lines_of(text)
    series = {fmt.name: fmt.parse(lines) for fmt in FORMATS}
    return {"contract": series.get(CONTRACT.name) or parse_contract(lines), "series": series}


def source_of(parsed: Iterable[dict[str, Any]]) -> str | None:
    """The format an attempt's epochs are read in: the first registered format any of its
    workers printed an epoch (or an unreadable epoch line) in; None when none did."""
    workers = list(parsed)
    for fmt in FORMATS:
        for worker in workers:
            series = worker["series"].get(fmt.name) or {}
            if series.get("counts") or series.get("errors"):
                return fmt.name
    return None
