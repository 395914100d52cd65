"""Ranges of the timeouts and counts: a sane upper bound for each timeout, a controller
timeout that cannot fire between the launch and the wait's first poll, and each range
declared by the role whose argument spec has the input (roles/<role>/meta/ranges.yml)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.tf_runbook.multiworker.plugins.filter.tf_ranges import (
    collection_ranges,
    tf_range_names,
    tf_range_problems,
)
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_ranges import (
    HOUR,
    MONTH,
    RangesError,
    all_ranges,
    parse_ranges,
    role_ranges,
)

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
RANGES = collection_ranges()
CONTROLLER_TIMEOUT_MIN = 10
TIMEOUTS = sorted(name for name in RANGES if name.endswith(("_timeout", "_grace", "_margin", "_interval", "_lifetime")))
# Computed by the runbook, never set by a user: no range.
COMPUTED = {"tf_launch_deadline"}


@pytest.mark.parametrize("name", TIMEOUTS)
def test_every_timeout_has_an_upper_bound_of_at_most_30_days(name: str) -> None:
    high = RANGES[name]["high"]
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
        ({"tf_worker_port": 0}, ["host w1: tf_worker_port must be 1..65535 or auto, got 0"]),
        # ... or the word that picks one (any case), and nothing like it.
        ({"tf_worker_port": "auto"}, []),
        ({"tf_worker_port": "AUTO"}, []),
        ({"tf_worker_port": "autox"}, ["host w1: tf_worker_port must be a whole number or auto, got 'autox'"]),
        ({"tf_worker_port": 70000}, ["host w1: tf_worker_port must be 1..65535 or auto, got 70000"]),
        ({"tf_worker_port_auto_first": 0}, ["host w1: tf_worker_port_auto_first must be 1..65535, got 0"]),
        # A boolean is not a number of seconds (YAML's `yes`).
        ({"tf_job_timeout": True}, ["host w1: tf_job_timeout must be a whole number, got True"]),
        ({"tf_job_timeout": 1.5}, ["host w1: tf_job_timeout must be a whole number, got 1.5"]),
    ],
)
def test_ranges(values: dict[str, Any], problems: list[str]) -> None:
    assert tf_range_problems(values, "w1") == problems


def spec_options(role: Path) -> dict[str, dict[str, Any]]:
    """Every option of every entry point of the role's argument spec."""
    options: dict[str, dict[str, Any]] = {}
    for entry in yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"].values():
        options.update(entry.get("options") or {})
    return options


@pytest.mark.parametrize("role", sorted(p for p in ROLES.iterdir() if (p / "meta" / "argument_specs.yml").is_file()),
                         ids=lambda p: p.name)
def test_each_role_declares_the_ranges_of_its_own_whole_number_inputs(role: Path) -> None:
    options = spec_options(role)
    ranges = role_ranges(str(role))
    # A range sits with the argument spec that has the input, and bounds a whole number.
    # A range with a word (tf_worker_port: auto) bounds a number or that word.
    assert {name: options.get(name, {}).get("type") for name in ranges} == {
        name: "raw" if entry.get("word") else "int" for name, entry in ranges.items()}
    ints = {name for name, option in options.items() if option.get("type") == "int" and name.startswith("tf_")}
    # Every whole-number input the role owns is bounded by it (or by the role that owns it).
    assert ints - COMPUTED - set(RANGES) == set()


def test_the_contract_check_reads_every_roles_ranges_and_the_controller_timeout_minimum() -> None:
    assert tf_range_names() == sorted(all_ranges(str(ROLES)))
    assert RANGES["tf_controller_timeout"]["low"] == CONTROLLER_TIMEOUT_MIN
    assert {"tf_worker_port", "tf_collect_max_mb", "tf_stop_grace", "tf_logs_lines"} <= set(RANGES)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (["tf_x"], "must map each input to its range"),
        ({"tf_x": {"high": 3}}, "tf_x needs an integer low"),
        ({"tf_x": {"low": 0, "hi": 3}}, "tf_x needs an integer low, and only high, low, span, word, zero"),
        ({"tf_x": {"low": 5, "high": 3}}, "tf_x's high must be null or an integer of at least low, got 3"),
    ],
)
def test_a_malformed_ranges_file_is_refused_naming_file_and_input(data: Any, message: str) -> None:
    with pytest.raises(RangesError, match=f"^roles/r/meta/ranges.yml: {message}"):
        parse_ranges(data, "roles/r/meta/ranges.yml")


def test_an_input_two_roles_declare_is_refused(tmp_path: Path) -> None:
    for role in ("a", "b"):
        (tmp_path / role / "meta").mkdir(parents=True)
        (tmp_path / role / "meta" / "ranges.yml").write_text("tf_x: {low: 0}\n")
    (tmp_path / "c").mkdir()  # a role without ranges
    with pytest.raises(RangesError, match="^tf_x has a range in roles a and b: one role declares it$"):
        all_ranges(str(tmp_path))
