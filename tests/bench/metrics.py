"""Pure parts of the bench: phases, per-host counts, log parsing and tables.

Nothing here knows the runbook's role or task names: phases come from the phase
playbook a play was read from (the public entry points), with its play name only to tell
the verdict from the fetch inside collect.yml.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

PHASES = ("preflight", "deploy", "launch", "wait", "collect", "verdict")
"""The runbook's phases, in order; the CPU table also has start-up (before the first
play) and exit (after the last play's stats: Python's exit, connection teardown)."""

CPU_ROWS = ("startup", *PHASES, "exit")

# Actions that run on the controller alone: a result of one is not a remote module run.
CONTROLLER_ACTIONS = frozenset(
    f"{prefix}{name}"
    for prefix in ("", "ansible.builtin.", "ansible.legacy.")
    for name in ("set_fact", "assert", "debug", "fail", "meta", "include_role", "include_tasks",
                 "import_role", "import_tasks", "add_host", "group_by", "set_stats", "include_vars",
                 "pause", "validate_argument_spec")
) | frozenset(f"tf_runbook.multiworker.{name}" for name in ("tf_role_inputs", "tf_report"))

_FILE_PHASE = {"preflight": "preflight", "deploy": "deploy", "launch": "launch", "wait": "wait", "attempts": "wait",
               "collect": "collect", "verdict": "verdict", "stop": "stop", "status": "status"}
_VERDICT_NAME = re.compile(r"\b(judge|verdict)", re.IGNORECASE)
_NAME_PHASE = (
    (re.compile(r"\b(judge|verdict)", re.I), "verdict"),
    (re.compile(r"\b(fetch|collect)", re.I), "collect"),
    (re.compile(r"\b(wait)", re.I), "wait"),
    (re.compile(r"\b(launch|start)", re.I), "launch"),
    (re.compile(r"\b(deploy)", re.I), "deploy"),
    (re.compile(r"\b(refuse|check|preflight|cluster spec)", re.I), "preflight"),
)


def phase_of(play_file: str, play_name: str) -> str:
    """The phase of a play, from the playbook file it came from (and its name in collect.yml).

    A play of collect.yml that judges (its name says judge or verdict) is the verdict;
    the others there fetch, so they are the collect phase. A play from a file that is no
    phase playbook (a restructured tree) is placed by its name, else "other:<file stem>".
    """
    stem = Path(play_file).stem if play_file else ""
    phase = _FILE_PHASE.get(stem)
    if phase == "collect" and _VERDICT_NAME.search(play_name or ""):
        return "verdict"
    if phase:
        return phase
    for pattern, named in _NAME_PHASE:
        if pattern.search(play_name or ""):
            return named
    return f"other:{stem or 'unknown'}"


def phase_cpu(events: Sequence[Mapping[str, Any]], total_usec: int) -> dict[str, float]:
    """CPU seconds per phase from the callback's marks and the cgroup's final usage.

    Each play's share runs from its start mark to the next mark (the next play, or the
    playbook's stats); before the first play is start-up, after the stats is exit. A
    mark without a reading (no cgroup) makes the whole table empty rather than wrong.
    """
    marks = [e for e in events if e.get("event") in ("play", "stats")]
    if not marks or any(m.get("cpu_usec") is None for m in marks):
        return {}
    out: dict[str, float] = defaultdict(float)
    out["startup"] = marks[0]["cpu_usec"] / 1e6
    for here, nxt in zip(marks, [*marks[1:], None]):
        end = nxt["cpu_usec"] if nxt else total_usec
        if here["event"] == "stats":
            out["exit"] += (end - here["cpu_usec"]) / 1e6
        else:
            out[phase_of(here.get("file", ""), here.get("name", ""))] += (end - here["cpu_usec"]) / 1e6
    out["total"] = total_usec / 1e6
    return dict(out)


def phase_wall(events: Sequence[Mapping[str, Any]], started: float, ended: float) -> dict[str, float]:
    """Wall seconds per phase, the same way as phase_cpu (times instead of usage)."""
    marks = [e for e in events if e.get("event") in ("play", "stats")]
    if not marks:
        return {}
    out: dict[str, float] = defaultdict(float)
    out["startup"] = marks[0]["t"] - started
    for here, nxt in zip(marks, [*marks[1:], None]):
        end = nxt["t"] if nxt else ended
        key = "exit" if here["event"] == "stats" else phase_of(here.get("file", ""), here.get("name", ""))
        out[key] += end - here["t"]
    out["total"] = ended - started
    return dict(out)


def task_cpu(events: Sequence[Mapping[str, Any]], total_usec: int, run_id: str = "") -> dict[str, float]:
    """CPU seconds per task, keyed "phase: task name" (same names summed), from task marks.

    A task's share runs from its start mark to the next mark of any kind; the time from a
    play's start to its first task is "phase: (play start)". A task name that shows the
    run id shows "<run id>" instead, so that runs compare. Empty without readings.
    """
    marks = [e for e in events if e.get("event") in ("play", "task", "stats")]
    if not marks or any(m.get("cpu_usec") is None for m in marks):
        return {}
    out: dict[str, float] = defaultdict(float)
    phase = "startup"
    for here, nxt in zip(marks, [*marks[1:], None]):
        end = nxt["cpu_usec"] if nxt else total_usec
        if here["event"] == "play":
            phase = phase_of(here.get("file", ""), here.get("name", ""))
            key = f"{phase}: (play start)"
        elif here["event"] == "task":
            name = str(here.get("name", "?"))
            key = f"{phase}: {name.replace(run_id, '<run id>') if run_id else name}"
        else:
            key = "exit"
        out[key] += (end - here["cpu_usec"]) / 1e6
    return dict(out)


def repeated_tasks(cpu: Mapping[str, float]) -> list[tuple[str, int, float]]:
    """Tasks (by name) found in more than one phase: (name, phases, CPU summed), costliest first."""
    sums: dict[str, float] = defaultdict(float)
    phases: dict[str, set[str]] = defaultdict(set)
    for key, value in cpu.items():
        phase, sep, name = key.partition(": ")
        if not sep or name == "(play start)":
            continue
        sums[name] += value
        phases[name].add(phase)
    rows = [(name, len(phases[name]), sums[name]) for name in sums if len(phases[name]) > 1]
    return sorted(rows, key=lambda row: (-row[2], row[0]))


def top(values: Mapping[str, float], count: int) -> list[tuple[str, float]]:
    return sorted(values.items(), key=lambda kv: (-kv[1], kv[0]))[:count]


def module_runs(events: Iterable[Mapping[str, Any]]) -> dict[str, Counter[str]]:
    """Per host: task results (`results`), of which remote module runs (`remote`).

    Skipped results are no runs. A loop's items each count and its summary result does
    not; each retry of an `until` and each async status poll is a run of its own. A
    result of an action that runs on the controller alone (set_fact, assert, ...) is
    counted in `results` but not in `remote`.
    """
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for e in events:
        if e.get("event") != "result" or e.get("kind") == "skipped" or e.get("loop"):
            continue
        counts = out[e["host"]]
        counts["results"] += 1
        if e.get("action") not in CONTROLLER_ACTIONS:
            counts["remote"] += 1
            if e.get("delegated") in ("localhost", "127.0.0.1"):
                counts["delegated_local"] += 1
    return dict(out)


def read_events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# -- the ssh wrapper's log (tests/bench/oplog.sh) ----------------------------------------

_ARG_OPTS = {"ssh": set("BbcDEeFIiJLlmOoPpQRSWw"), "sftp": set("BbcDFiJlNoPRSsX"), "scp": set("cDFiJlOoPSX")}


def parse_record(data: bytes, stdin: bytes = b"") -> dict[str, Any]:
    """One oplog record: kind NUL time NUL argc NUL argv... NUL."""
    fields = data.split(b"\0")
    kind, when, argc = fields[0].decode(), float(fields[1].decode()), int(fields[2])
    argv = [f.decode("utf-8", "replace") for f in fields[3:3 + argc]]
    if len(argv) != argc:
        raise ValueError(f"truncated record: {argc} arguments announced, {len(argv)} read")
    return {"kind": kind, "t": when, "argv": argv, "stdin": stdin.decode("utf-8", "replace")}


def read_oplog(directory: Path) -> list[dict[str, Any]]:
    records = []
    for path in sorted(directory.iterdir()) if directory.exists() else []:
        if path.suffix == ".in":
            continue
        stdin = path.with_name(path.name + ".in")
        records.append(parse_record(path.read_bytes(), stdin.read_bytes() if stdin.exists() else b""))
    return records


def _positional(kind: str, argv: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """Arguments that are no options, and the options that take a value."""
    takes = _ARG_OPTS.get(kind, set())
    rest: list[str] = []
    opts: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if rest or not arg.startswith("-") or arg == "-":
            rest.append(arg)
        elif len(arg) == 2 and arg[1] in takes and i + 1 < len(argv):
            opts.setdefault(arg[1], argv[i + 1])
            i += 1
        elif len(arg) > 2 and arg[1] in takes:
            opts.setdefault(arg[1], arg[2:])
        i += 1
    return rest, opts


def classify(record: Mapping[str, Any]) -> tuple[str, str]:
    """(remote address, operation) of one invocation: exec, put, fetch or control."""
    kind, argv = record["kind"], list(record["argv"])
    rest, opts = _positional(kind, argv)
    if kind == "sftp":
        host = rest[0] if rest else "?"
        verb = (record.get("stdin") or "").split(" ", 1)[0]
        op = {"put": "put", "get": "fetch"}.get(verb, "sftp")
    elif kind == "scp":
        remote = next((a for a in rest if ":" in a.lstrip("[").split("]")[-1] or a.startswith("[")), "?")
        host = remote.rsplit(":", 1)[0]
        op = "fetch" if rest and rest[0] == remote else "put"
    else:
        host = rest[0] if rest else "?"
        command = " ".join(rest[1:])
        if "O" in opts:
            op = "control"
        elif re.match(r"^(/bin/sh -c ')?dd (if|of)=", command):
            op = "fetch" if "dd if=" in command else "put"
        else:
            op = "exec"
    host = host.split("@", 1)[-1].strip("[]")
    return host, op


def ssh_ops(records: Iterable[Mapping[str, Any]], names: Mapping[str, str]) -> dict[str, Counter[str]]:
    """Per inventory host (address mapped through `names`): exec, put, fetch, control."""
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for record in records:
        address, op = classify(record)
        out[names.get(address, address)][op] += 1
    return dict(out)


def accepted_logins(sshd_log: str) -> int:
    """New SSH connections an sshd accepted (its log at LogLevel VERBOSE or INFO)."""
    return sum(1 for line in sshd_log.splitlines() if "Accepted publickey for" in line)


# -- aggregation and tables -------------------------------------------------------------

def median(values: Sequence[float]) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def per_host(counts: Mapping[str, Mapping[str, int]], key: str, hosts: int) -> float:
    """Mean over `hosts` hosts of one count (hosts with none count as 0)."""
    return sum(c.get(key, 0) for c in counts.values()) / hosts if hosts else float("nan")


def fmt(value: Any, digits: int = 2) -> str:
    if isinstance(value, float):
        return "n/a" if value != value else f"{value:.{digits}f}"
    return str(value)


def md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], digits: int = 2) -> list[str]:
    """A Markdown table; floats with `digits` decimals, NaN as n/a."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row of {len(row)} cells under {len(headers)} headers: {row!r}")
        lines.append("| " + " | ".join(fmt(cell, digits) for cell in row) + " |")
    return lines


def verdict(measured: float, target: float, lower_is_better: bool = True) -> str:
    if measured != measured:
        return "not measured"
    met = measured <= target if lower_is_better else measured >= target
    return "met" if met else f"missed by {abs(measured - target):.2f}"


# -- issue 26's figures: marginal CPU, reps per size, the time plan, Mitogen's verdict ----

MARGINAL_PAIRS = ((2, 16), (16, 64), (2, 32))
"""The host-count steps whose CPU per added host issue 26 asks for, in report order."""


def marginal(cpu_by_n: Mapping[int, float], low: int, high: int) -> float:
    """Controller CPU seconds per host added from `low` to `high` hosts (NaN if either is missing)."""
    a, b = cpu_by_n.get(low, float("nan")), cpu_by_n.get(high, float("nan"))
    if a != a or b != b or high == low:
        return float("nan")
    return (b - a) / (high - low)


def marginal_pairs(sizes: Iterable[int]) -> list[tuple[int, int]]:
    """The steps of MARGINAL_PAIRS both of whose sizes were measured; else smallest to largest."""
    present = sorted(set(sizes))
    pairs = [(a, b) for a, b in MARGINAL_PAIRS if a in present and b in present]
    if not pairs and len(present) >= 2:
        pairs = [(present[0], present[-1])]
    return pairs


def spread(a: float, b: float) -> float:
    """How far apart two positive figures are: the larger over the smaller (NaN if not both > 0)."""
    if not (a == a and b == b) or a <= 0 or b <= 0:
        return float("nan")
    return max(a, b) / min(a, b)


def reps_at(size: int, reps: int, overrides: Mapping[int, int]) -> int:
    """Runs to make at `size` hosts: the override for that size, else `reps`."""
    return overrides.get(size, reps)


def parse_size_map(text: str) -> dict[int, int]:
    """ "32:2,64:1" -> {32: 2, 64: 1}; empty text -> {}."""
    out: dict[int, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        size, sep, count = item.partition(":")
        if not sep or not size.isdigit() or not count.isdigit() or int(count) < 1:
            raise ValueError(f"expected SIZE:REPS pairs such as 32:2,64:1, got {item!r}")
        out[int(size)] = int(count)
    return out


def linear_fit(points: Mapping[int, float]) -> tuple[float, float] | None:
    """Least-squares (intercept, slope) of seconds against N; None under two sizes."""
    if len(points) < 2:
        return None
    xs, ys = list(points), list(points.values())
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var
    return my - slope * mx, slope


def estimate_seconds(plan: Sequence[tuple[str, int, int]], run_seconds: Mapping[str, tuple[float, float]],
                     setup_per_host: float = 0.6) -> float:
    """Expected wall time of a plan of (tree, N, runs) rows on namespace hosts.

    `run_seconds[tree]` is (intercept, slope) of one run's wall against N; each size also
    pays its namespace hosts' set-up once (`setup_per_host` seconds per host, plus 2 s).
    """
    total = 0.0
    sizes = set()
    for tree, size, runs in plan:
        a, b = run_seconds[tree]
        total += runs * (a + b * size)
        sizes.add(size)
    return total + sum(2.0 + setup_per_host * n for n in sizes)


def mitogen_recommendation(wall_ratio: float, cpu_ratio: float, smoke_ratio: float, n: int,
                           bar: float = 1.3, smoke_bar: float = 1.05) -> str:
    """One line: should Mitogen become the default, from its figures against the default strategy.

    The ratios are Mitogen's over the default strategy's (below 1 is better): at the
    largest N on namespace hosts (wall and controller CPU) and on the smoke (wall). It is
    recommended only if it is `bar` times faster or cheaper on hosts without making the
    smoke more than `smoke_bar` times slower.
    """
    if wall_ratio != wall_ratio or cpu_ratio != cpu_ratio:
        return f"Mitogen: no recommendation (no good runs of both strategies at N = {n})"
    figures = (f"at N = {n} it took {wall_ratio:.2f}x the default strategy's wall time and "
               f"{cpu_ratio:.2f}x its controller CPU")
    if smoke_ratio == smoke_ratio:
        figures += f", and {smoke_ratio:.2f}x its wall time on the smoke"
    wins = wall_ratio * bar <= 1.0 or cpu_ratio * bar <= 1.0
    smoke_ok = smoke_ratio != smoke_ratio or smoke_ratio <= smoke_bar
    if wins and smoke_ok:
        return f"Mitogen: make it the default: {figures} (bar: {bar}x faster or cheaper, smoke <= {smoke_bar}x)."
    why = "not enough of a gain" if not wins else "the smoke is slower under it"
    return f"Mitogen: keep it opt-in ({why}): {figures} (bar: {bar}x faster or cheaper, smoke <= {smoke_bar}x)."


def module_execs(events: Sequence[Mapping[str, Any]]) -> dict[str, Counter[str]]:
    """Per host: the modules its tasks' actions sent it, per phase, and `total`.

    From the callback's `module` records (one per `_execute_module`: an action plugin that
    polls or fetches counts each module it runs; set_fact and controller-only actions none),
    placed in the phase of the last play that started before them (records are written by
    the worker processes, so the file is not in time order).
    """
    plays = sorted((e["t"], phase_of(e.get("file", ""), e.get("name", "")))
                   for e in events if e.get("event") == "play" and "t" in e)
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for e in events:
        if e.get("event") != "module":
            continue
        phase = "startup"
        for started, name in plays:
            if started > e["t"]:
                break
            phase = name
        counts = out[str(e.get("host", "?"))]
        counts[phase] += 1
        counts["total"] += 1
    return dict(out)


# -- issue 42: a restart's latency, split ------------------------------------------------------

# The restart path's steps as the callback's task marks name them (tf_attempts' tasks): the
# decision recorded, the checkpoint copy's first task, the new attempt's launch.
RESTART_MARKS = {
    "decided": "Record the decision",
    "copy": "Choose the marker of the chief's checkpoint directory",
    "launch": "Launch the new attempt",
}


def _first_mark(marks: list[dict[str, Any]], needle: str, after: float) -> float | None:
    return next((m["t"] for m in marks if m.get("event") == "task" and needle in str(m.get("name", ""))
                 and m["t"] >= after), None)


def restart_split(killed_at: float, failed: list[dict[str, Any]], restarted: list[dict[str, Any]],
                  marks: list[dict[str, Any]]) -> dict[str, float]:
    """A restart's latency from the run's own records, split into its steps.

    `killed_at`: when the bench's SIGKILL was sent; `failed`: every worker's state.json of
    the attempt killed, each with its exit.json's `finished_at`; `restarted`: every worker's
    state.json of the next attempt (`started_at`, `joined_at`); `marks`: the bench callback's
    events. Steps, each from the end of the one before: `detection` (every worker of the
    killed attempt stopped), `decision` (the controller saw it, stopped what was left and
    recorded its decision), `prepare` (to the checkpoint copy's first task), `copy` (to the
    launch's first task), `launch` (to the last worker's start, the go), `join` (to the last
    worker joined); `total` from the kill to the last worker joined. `modules_per_host`: the
    module runs the hosts ran from the kill to the go, per host.
    """
    stopped = max(w["finished_at"] for w in failed)
    decided = _first_mark(marks, RESTART_MARKS["decided"], killed_at)
    copy = _first_mark(marks, RESTART_MARKS["copy"], decided or killed_at)
    launch = _first_mark(marks, RESTART_MARKS["launch"], copy or decided or killed_at)
    started = max(w["started_at"] for w in restarted)
    joined = max(w["joined_at"] for w in restarted)
    if decided is None or launch is None:
        raise ValueError("the run's events hold no decision or no launch of a new attempt after the kill")
    copy = launch if copy is None else copy  # no copy step in this tree: it costs nothing
    hosts = {m["host"] for m in marks if m.get("event") == "module"}
    path = [m for m in marks if m.get("event") == "module" and killed_at <= m["t"] <= started]
    return {
        "detection": stopped - killed_at,
        "decision": decided - stopped,
        "prepare": copy - decided,
        "copy": launch - copy,
        "launch": started - launch,
        "join": joined - started,
        "total": joined - killed_at,
        "modules_per_host": len(path) / max(len(hosts), 1),
    }
