# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ranges of the roles' whole-number inputs (timeouts and counts).

Argument specs check types only. Each role declares the ranges of its own inputs in
``meta/ranges.yml``, beside its ``meta/argument_specs.yml`` (whose schema admits no key of
ours): the action tf_role_inputs checks them with the entry point that lists each input,
and role tf's contract check reads every role's, so that a value out of range is refused
before a run does anything. One entry per input::

    tf_stop_grace: {low: 0, high: 3600, zero: SIGKILL at once}

``low`` is the lowest value; ``high`` the highest (null: none); ``zero`` what 0 means when
0 is accepted below ``low`` or as a value of its own (null: 0 has no meaning of its own);
``span: true`` names the range as ``low..high`` either way (the mechanism's own range, a
TCP port); ``word`` is a word accepted in place of a number (``auto``: ``tf_worker_port``,
picked by the preflight), in any case.
"""

from __future__ import annotations

import functools
import math
import os
from typing import Any

import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_role_files import read_yaml

RANGES_FILE = os.path.join("meta", "ranges.yml")
# Upper bounds of sanity, named in messages: a value past them is a typo (milliseconds,
# an extra digit) far more often than a wish.
MONTH = 30 * 24 * 3600
HOUR = 3600
_FIELDS = {"low", "high", "zero", "span", "word"}


class RangesError(ValueError):
    """A ranges file that cannot be read or does not say what a range needs."""


def parse_ranges(data: Any, source: str) -> dict[str, dict[str, Any]]:
    """The ranges of one role's file, each as {low, high, zero, span}."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise RangesError(f"{source}: must map each input to its range, got {type(data).__name__}")
    ranges = {}
    for name, entry in data.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("low"), int) or set(entry) - _FIELDS:
            raise RangesError(f"{source}: {name} needs an integer low, and only {', '.join(sorted(_FIELDS))}; got {entry!r}")
        high = entry.get("high")
        if high is not None and (not isinstance(high, int) or high < entry["low"]):
            raise RangesError(f"{source}: {name}'s high must be null or an integer of at least low, got {high!r}")
        word = entry.get("word")
        if word is not None and (not isinstance(word, str) or not word):
            raise RangesError(f"{source}: {name}'s word must be a word, got {word!r}")
        ranges[str(name)] = {"low": entry["low"], "high": high, "zero": entry.get("zero"),
                             "span": bool(entry.get("span", False)), "word": word}
    return ranges


def role_ranges(role_path: str) -> dict[str, dict[str, Any]]:
    """The ranges a role declares (none when it has no ranges file)."""
    path = os.path.join(role_path, RANGES_FILE)
    if not os.path.isfile(path):
        return {}
    try:
        data = read_yaml(path)
    except (OSError, yaml.YAMLError) as exc:
        raise RangesError(f"cannot read {path}: {exc}") from exc
    return parse_ranges(data, path)


def all_ranges(roles_dir: str) -> dict[str, dict[str, Any]]:
    """Every role's ranges under ``roles_dir``; an input is declared by one role only."""
    ranges: dict[str, dict[str, Any]] = {}
    owner: dict[str, str] = {}
    for role in sorted(os.listdir(roles_dir)):
        for name, entry in role_ranges(os.path.join(roles_dir, role)).items():
            if name in owner:
                raise RangesError(f"{name} has a range in roles {owner[name]} and {role}: one role declares it")
            owner[name] = role
            ranges[name] = entry
    return ranges


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


def range_problem(name: str, value: Any, entry: dict[str, Any]) -> str | None:
    """Why ``value`` is out of ``entry``'s range (without the host), or None."""
    low, high, zero = entry["low"], entry["high"], entry["zero"]
    word = entry.get("word")
    if word and isinstance(value, str) and value.strip().lower() == word:
        return None
    number = _whole(value)
    also = f" or {word}" if word else ""
    if number is None:
        return f"{name} must be a whole number{also}, got {value!r}"
    if zero is not None and number == 0:
        return None
    if entry["span"] and (number < low or (high is not None and number > high)):
        return f"{name} must be {low}..{high}{also}, got {value!r}"
    if number < low:
        if zero is not None and low > 0:
            return f"{name} must be 0 ({zero}) or {low} or more, got {value!r}"
        meaning = f" (0: {zero})" if zero else ""
        return f"{name} must be {low} or more{meaning}, got {value!r}"
    if high is not None and number > high:
        return f"{name} must be at most {_bound_text(high)}, got {value!r}"
    return None


def range_problems(values: dict[str, Any], host: str, ranges: dict[str, dict[str, Any]]) -> list[str]:
    """One message per value outside its range, naming the host; unset values and names
    without a range are left alone."""
    problems = []
    for name, value in sorted(values.items()):
        if value is None or value == "" or name not in ranges:
            continue
        problem = range_problem(name, value, ranges[name])
        if problem:
            problems.append(f"host {host}: {problem}")
    return problems


# The collection's roles, beside plugins/ (in a clone and in an installed collection).
ROLES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "roles")


@functools.lru_cache(maxsize=None)
def collection_ranges() -> dict[str, dict[str, Any]]:
    """Every role's ranges, read once per controller process."""
    try:
        return all_ranges(os.path.normpath(ROLES_DIR))
    except (RangesError, OSError) as exc:
        raise AnsibleFilterError(f"tf_ranges: {exc}") from exc


def collection_range_problems(values: dict[str, Any], host: str) -> list[str]:
    """One message per value outside the range its role declares."""
    return range_problems(values, host, collection_ranges())


def hosts_range_problems(own: dict[str, Any], host: str, others: dict[str, Any]) -> list[str]:
    """Range problems of every host of the play, in one pass on the controller.

    ``own`` holds the effective value of every range-checked name on ``host`` (role
    defaults, play and role variables included); ``others`` maps each host of the play to
    its host variables (inventory, extra vars, facts), of which only the range-checked
    names it defines are read. Role defaults and play variables are the same on every
    host, so checking them on ``host`` checks them for all. Each message names its host,
    and a problem is named once per host.
    """
    problems = list(collection_range_problems(own, host))
    for other, variables in others.items():
        defined = {name: variables[name] for name in own if name in variables}
        for problem in collection_range_problems(defined, other):
            if problem not in problems:
                problems.append(problem)
    return problems
