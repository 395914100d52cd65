"""Ranges of the timeouts and counts: a sane upper bound for each timeout, and a
controller timeout that cannot fire between the launch and the wait's first poll."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.tf_runbook.multiworker.plugins.filter.tf_ranges import (
    CONTROLLER_TIMEOUT_MIN,
    HOUR,
    MONTH,
    RANGES,
    tf_range_problems,
)

TIMEOUTS = sorted(name for name in RANGES if name.endswith(("_timeout", "_grace", "_margin", "_interval", "_lifetime")))


@pytest.mark.parametrize("name", TIMEOUTS)
def test_every_timeout_has_an_upper_bound_of_at_most_30_days(name: str) -> None:
    high = RANGES[name][1]
    assert high is not None and high <= MONTH
    assert tf_range_problems({name: high}, "w0") == []
    [problem] = tf_range_problems({name: high + 1}, "w0")
    assert problem.startswith(f"host w0: {name} must be at most {high}")
    assert problem.endswith(f"got {high + 1}")


@pytest.mark.parametrize(
    ("values", "problems"),
    [
        # 0 unties the run from the controller; anything else must outlast the launch.
        ({"tf_controller_timeout": 0}, []),
        ({"tf_controller_timeout": CONTROLLER_TIMEOUT_MIN}, []),
        (
            {"tf_controller_timeout": 1},
            ["host w1: tf_controller_timeout must be 0 (the run is not tied to the controller) or 10 or more, got 1"],
        ),
        (
            {"tf_controller_timeout": "9"},
            ["host w1: tf_controller_timeout must be 0 (the run is not tied to the controller) or 10 or more, got '9'"],
        ),
        ({"tf_job_timeout": 31 * 24 * 3600}, ["host w1: tf_job_timeout must be at most 2592000 (30 days), got 2678400"]),
        ({"tf_stop_grace": 7200}, ["host w1: tf_stop_grace must be at most 3600 (1 hour), got 7200"]),
        ({"tf_wait_poll_interval": HOUR + 1}, ["host w1: tf_wait_poll_interval must be at most 3600 (1 hour), got 3601"]),
        ({"tf_stall_timeout": 0, "tf_restart_attempts": 100}, []),
        ({"tf_restart_attempts": 101}, ["host w1: tf_restart_attempts must be at most 100, got 101"]),
        (
            {"tf_verdict_expected_size": -2},
            ["host w1: tf_verdict_expected_size must be 0 or more (0: the size of the collected cluster), got -2"],
        ),
        ({"tf_verdict_expected_size": 0}, []),
        ({"tf_worker_slots": 2000}, ["host w1: tf_worker_slots must be at most 1024, got 2000"]),
        # A port is a span either way.
        ({"tf_worker_port": 0}, ["host w1: tf_worker_port must be 1..65535, got 0"]),
        # A boolean is not a number of seconds (YAML's `yes`).
        ({"tf_job_timeout": True}, ["host w1: tf_job_timeout must be a whole number, got True"]),
        ({"tf_job_timeout": 1.5}, ["host w1: tf_job_timeout must be a whole number, got 1.5"]),
    ],
)
def test_ranges(values: dict[str, Any], problems: list[str]) -> None:
    assert tf_range_problems(values, "w1") == problems
