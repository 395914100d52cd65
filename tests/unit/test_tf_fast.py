"""Cluster-wide filters of plugins/filter/tf_fast.py (one run_once task instead of one
task per host)."""

from __future__ import annotations

import hashlib
import json

import pytest
import tf_worker_config
from ansible.errors import AnsibleFilterError
from ansible_collections.tf_runbook.multiworker.plugins.filter.tf_fast import (
    FilterModule,
    tf_config_readbacks,
    tf_range_problems_hosts,
)

SPEC = {"size": 3, "cluster": {"worker": ["a:1", "a:2", "b:1"]}}


def written(index: int, cluster: dict | None = None) -> dict:
    config = {"cluster": cluster or SPEC["cluster"], "task": {"type": "worker", "index": index}}
    return {"index": index, "content": json.dumps(config) + "\n"}


def test_every_hosts_readback_becomes_check_entries_named_by_host() -> None:
    entries = tf_config_readbacks({"a": [written(0), written(1)], "b": [written(2)]})
    assert entries == [
        {"host": "a", "index": 0, "content": written(0)["content"]},
        {"host": "a", "index": 1, "content": written(1)["content"]},
        {"host": "b", "index": 2, "content": written(2)["content"]},
    ]
    # Issue 24, point 25: the check's report itself, not a dict that is always truthy. The
    # checksum is the SHA-256 of the cluster in canonical JSON, computed here on its own.
    canonical = json.dumps(SPEC["cluster"], sort_keys=True, separators=(",", ":")).encode()
    assert tf_worker_config.tf_config_check(entries, SPEC) == {
        "checksum": hashlib.sha256(canonical).hexdigest(),
        "workers": 3,
    }


def test_a_wrong_file_on_one_host_is_named_by_the_check() -> None:
    entries = tf_config_readbacks({"a": [written(0), written(1)], "b": [written(2, {"worker": ["x:1"]})]})
    with pytest.raises(AnsibleFilterError, match="host b worker-2"):
        tf_worker_config.tf_config_check(entries, SPEC)


@pytest.mark.parametrize("missing", [None, "", {}])
def test_a_host_without_readback_is_named(missing: object) -> None:
    with pytest.raises(AnsibleFilterError, match="host b: no TF_CONFIG was read back"):
        tf_config_readbacks({"a": [written(0)], "b": missing})


OWN = {"tf_worker_slots": 1, "tf_job_timeout": 1800, "tf_wait_poll_interval": ""}


def test_good_values_everywhere_give_no_problem() -> None:
    assert tf_range_problems_hosts(OWN, "w0", {"w0": {"tf_worker_slots": 1}, "w1": {"tf_job_timeout": 0}}) == []


@pytest.mark.parametrize(
    ("others", "expected"),
    [
        # A host variable of another host is checked, under that host's name.
        ({"w0": {}, "w1": {"tf_worker_slots": 0}}, ["host w1: tf_worker_slots must be 1 or more, got 0"]),
        # Names outside the range table are not read.
        ({"w1": {"tf_worker_slots": 2, "other": -1}}, []),
        # Two hosts, two problems, each named once.
        (
            {"w1": {"tf_job_timeout": -5}, "w2": {"tf_job_timeout": -5}},
            [
                "host w1: tf_job_timeout must be 0 or more (0: no job deadline), got -5",
                "host w2: tf_job_timeout must be 0 or more (0: no job deadline), got -5",
            ],
        ),
    ],
)
def test_each_hosts_own_variables_are_checked(others: dict, expected: list[str]) -> None:
    assert tf_range_problems_hosts(OWN, "w0", others) == expected


def test_the_effective_values_are_checked_under_the_running_host() -> None:
    # A play variable or role default is seen only through the running host; its own
    # host variables say the same and are not named twice.
    own = dict(OWN, tf_worker_slots="x")
    assert tf_range_problems_hosts(own, "w0", {"w0": {"tf_worker_slots": "x"}, "w1": {}}) == [
        "host w0: tf_worker_slots must be a whole number, got 'x'"
    ]


def test_the_filters_are_registered() -> None:
    filters = FilterModule().filters()
    assert filters["tf_config_readbacks"] is tf_config_readbacks
    assert filters["tf_range_problems_hosts"] is tf_range_problems_hosts
