"""Run ids: format, ordering, uniqueness, and which values are safe as a directory name."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from tf_run_id import AnsibleFilterError, tf_run_id_check, tf_run_id_new

RUN_ID = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{6}$")


def test_new_id_has_timestamp_and_random_part() -> None:
    run_id = tf_run_id_new("")
    assert RUN_ID.match(run_id), run_id


def test_new_id_uses_the_given_utc_time_and_token() -> None:
    now = datetime(2024, 2, 29, 23, 5, 9, tzinfo=timezone.utc)
    assert tf_run_id_new(None, now=now, token="0a1b2c") == "20240229T230509Z-0a1b2c"


def test_new_id_is_utc_now() -> None:
    before = datetime.now(timezone.utc).replace(microsecond=0)
    run_id = tf_run_id_new()
    after = datetime.now(timezone.utc)
    stamp = datetime.strptime(run_id.split("-")[0], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
    assert before <= stamp <= after


def test_new_ids_sort_by_time_whatever_the_random_part() -> None:
    start = datetime(2024, 12, 31, 23, 59, 58, tzinfo=timezone.utc)
    times = [start + timedelta(seconds=s) for s in (0, 1, 2, 3600, 86400 * 40)]
    # Later ids get "smaller" random parts, so only the timestamp can order them.
    tokens = ["ffffff", "eeeeee", "999999", "111111", "000000"]
    ids = [tf_run_id_new(now=t, token=tok) for t, tok in zip(times, tokens)]
    assert sorted(ids) == ids
    assert sorted(reversed(ids)) == ids


def test_two_new_ids_differ() -> None:
    ids = {tf_run_id_new() for _ in range(20)}
    assert len(ids) == 20


def test_new_id_ignores_its_input() -> None:
    now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert tf_run_id_new("something/../odd", now=now, token="abcdef") == "20250102T030405Z-abcdef"


def test_new_id_passes_the_check() -> None:
    run_id = tf_run_id_new()
    assert tf_run_id_check(run_id) == run_id


@pytest.mark.parametrize(
    "run_id",
    ["20240102T030405Z-abcdef", "a", "Z", "7", "run_1.2-x", "A" * 64, "nightly.v2", "x-y_z"],
)
def test_check_accepts_safe_ids(run_id: str) -> None:
    assert tf_run_id_check(run_id) == run_id


def test_check_accepts_non_string_and_returns_text() -> None:
    assert tf_run_id_check(12345) == "12345"


@pytest.mark.parametrize(
    "run_id",
    [
        "",
        ".",
        "..",
        "a/b",
        "../x",
        "x/..",
        "a..b",
        " x",
        "x ",
        "x y",
        "x\ty",
        "a" * 65,
        ".hidden",
        "-rf",
        "_x",
        "x$y",
        "x\\y",
        "été",
        pytest.param("x\n", id="trailing-newline"),
        pytest.param("x\ny", id="inner-newline"),
    ],
)
def test_check_rejects_unsafe_ids_naming_the_value(run_id: str) -> None:
    with pytest.raises(AnsibleFilterError, match=re.escape(f"tf_run_id {run_id!r} is not safe")):
        tf_run_id_check(run_id)


@pytest.mark.parametrize("value", [None, ""])
def test_check_rejects_missing_id(value: Any) -> None:
    with pytest.raises(AnsibleFilterError, match=r"tf_run_id '' is not safe as a directory name"):
        tf_run_id_check(value)
