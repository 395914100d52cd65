"""Range checks of the runbook's timeouts and counts (argument specs only check types)."""

from __future__ import annotations

import math
from typing import Any

# Upper bounds of sanity, not of the mechanism: a value past them is a typo (a value in
# milliseconds, an extra digit) far more often than a wish, and each would hide a hang for
# longer than anyone watches a run.
MONTH = 30 * 24 * 3600  # a run's deadlines and margins
HOUR = 3600  # waits inside one step: a poll, a probe, a grace before SIGKILL

# The shortest tf_controller_timeout that is not 0: the wait renews the heartbeat only
# once the launch has returned, its first poll some seconds after the supervisors started.
CONTROLLER_TIMEOUT_MIN = 10

# name: (lowest, highest or None, what 0 means or None when 0 is below the range). When 0
# has a meaning, 0 is accepted and ``lowest`` bounds the other values.
RANGES: dict[str, tuple[int, int | None, str | None]] = {
    "tf_worker_port": (1, 65535, None),
    "tf_worker_slots": (1, 1024, None),
    "tf_job_timeout": (0, MONTH, "no job deadline"),
    "tf_startup_timeout": (0, MONTH, "no startup deadline"),
    "tf_controller_timeout": (CONTROLLER_TIMEOUT_MIN, MONTH, "the run is not tied to the controller"),
    "tf_peer_timeout": (0, MONTH, "workers do not watch their peers"),
    "tf_stall_timeout": (0, MONTH, "no stall watchdog"),
    "tf_logs_lines": (1, 100000, None),
    "tf_restart_attempts": (0, 100, "no restart"),
    "tf_run_attempt": (0, None, "the first launch"),
    "tf_launch_stop_grace": (0, HOUR, "SIGKILL at once"),
    "tf_launch_go_timeout": (0, HOUR, "derived from the number of hosts and --forks"),
    "tf_stop_grace": (0, HOUR, "SIGKILL at once"),
    "tf_wait_poll_interval": (1, HOUR, None),
    "tf_wait_deadline_margin": (0, MONTH, "no margin"),
    "tf_preflight_min_free_mb": (0, None, "no free-space check"),
    "tf_preflight_probe_timeout": (1, HOUR, None),
    "tf_preflight_listener_lifetime": (1, HOUR, None),
    "tf_train_dir_max_mb": (1, None, None),
    "tf_collect_max_mb": (0, None, "logs and records only, no artifacts"),
    "tf_firewall_expiry_margin": (0, MONTH, "the rules expire with the job deadline"),
    "tf_verdict_expected_size": (0, 100000, "the size of the collected cluster"),
}


# Ranges that are the mechanism's own (a TCP port), named as a span either way.
SPANS = frozenset({"tf_worker_port"})


def tf_range_names(_value: Any = None) -> list[str]:
    """Names of the range-checked variables."""
    return sorted(RANGES)


def _whole(value: Any) -> int | None:
    """``value`` as a whole number, or None when it is not one (a bool is not)."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(number) or number != int(number):
        return None
    return int(number)


def _bound_text(high: int) -> str:
    for unit, seconds in (("30 days", MONTH), ("1 hour", HOUR)):
        if high == seconds:
            return f"{high} ({unit})"
    return str(high)


def range_problem(name: str, value: Any) -> str | None:
    """Why ``value`` is out of ``name``'s range (without the host), or None."""
    low, high, zero = RANGES[name]
    number = _whole(value)
    if number is None:
        return f"{name} must be a whole number, got {value!r}"
    if zero is not None and number == 0:
        return None
    if name in SPANS and (number < low or (high is not None and number > high)):
        return f"{name} must be {low}..{high}, got {value!r}"
    if number < low:
        if zero is not None and low > 0:
            return f"{name} must be 0 ({zero}) or {low} or more, got {value!r}"
        meaning = f" (0: {zero})" if zero else ""
        return f"{name} must be {low} or more{meaning}, got {value!r}"
    if high is not None and number > high:
        return f"{name} must be at most {_bound_text(high)}, got {value!r}"
    return None


def tf_range_problems(values: dict[str, Any], host: str) -> list[str]:
    """One message per value outside its range."""
    problems = []
    for name, value in sorted(values.items()):
        if value is None or value == "" or name not in RANGES:
            continue
        problem = range_problem(name, value)
        if problem:
            problems.append(f"host {host}: {problem}")
    return problems


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {"tf_range_names": tf_range_names, "tf_range_problems": tf_range_problems}
