"""Range checks of the runbook's timeouts and counts (argument specs only check types)."""

from __future__ import annotations

import math
from typing import Any


# name: (lowest, highest or None, what 0 means or None when 0 is below the range)
RANGES: dict[str, tuple[int, int | None, str | None]] = {
    "tf_worker_port": (1, 65535, None),
    "tf_worker_slots": (1, None, None),
    "tf_job_timeout": (0, None, "no job deadline"),
    "tf_startup_timeout": (0, None, "no startup deadline"),
    "tf_controller_timeout": (0, None, "the run is not tied to the controller"),
    "tf_peer_timeout": (0, None, "workers do not watch their peers"),
    "tf_stall_timeout": (0, None, "no stall watchdog"),
    "tf_logs_lines": (1, None, None),
    "tf_restart_attempts": (0, None, "no restart"),
    "tf_run_attempt": (0, None, "the first launch"),
    "tf_launch_stop_grace": (0, None, "SIGKILL at once"),
    "tf_launch_go_timeout": (0, None, "derived from the number of hosts and --forks"),
    "tf_stop_grace": (0, None, "SIGKILL at once"),
    "tf_wait_poll_interval": (1, None, None),
    "tf_wait_deadline_margin": (0, None, "no margin"),
    "tf_preflight_min_free_mb": (0, None, "no free-space check"),
    "tf_preflight_probe_timeout": (1, None, None),
    "tf_preflight_listener_lifetime": (1, None, None),
    "tf_train_dir_max_mb": (1, None, None),
    "tf_collect_max_mb": (0, None, "logs and records only, no artifacts"),
    "tf_firewall_expiry_margin": (0, None, "the rules expire with the job deadline"),
}


def tf_range_names(_value: Any = None) -> list[str]:
    """Names of the range-checked variables."""
    return sorted(RANGES)


def tf_range_problems(values: dict[str, Any], host: str) -> list[str]:
    """One message per value outside its range."""
    problems = []
    for name, value in sorted(values.items()):
        if value is None or value == "" or name not in RANGES:
            continue
        low, high, zero = RANGES[name]
        try:
            number = float(value)
            if not math.isfinite(number) or number != int(number):
                raise ValueError
        except (TypeError, ValueError):
            problems.append(f"host {host}: {name} must be a whole number, got {value!r}")
            continue
        if number < low or (high is not None and number > high):
            span = f"{low}..{high}" if high is not None else f"{low} or more"
            meaning = f" (0: {zero})" if zero else ""
            problems.append(f"host {host}: {name} must be {span}{meaning}, got {value!r}")
    return problems


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {"tf_range_names": tf_range_names, "tf_range_problems": tf_range_problems}
