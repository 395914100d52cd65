"""Cluster-wide filters of plugins/filter/tf_fast.py (one run_once task instead of one
task per host)."""

from __future__ import annotations

import json

import pytest
import tf_worker_config
from ansible.errors import AnsibleFilterError
from ansible_collections.tf_runbook.multiworker.plugins.filter.tf_fast import FilterModule, tf_config_readbacks

SPEC = {"size": 3, "cluster": {"worker": ["a:1", "a:2", "b:1"]}}


def written(index: int, cluster: dict | None = None) -> dict:
    config = {"cluster": cluster or SPEC["cluster"], "task": {"type": "worker", "index": index}}
    return {"index": index, "content": json.dumps(config) + "\n"}


def test_every_hosts_readback_becomes_check_entries_named_by_host() -> None:
    entries = tf_config_readbacks({"a": [written(0), written(1)], "b": [written(2)]})
    assert [(e["host"], e["index"]) for e in entries] == [("a", 0), ("a", 1), ("b", 2)]
    assert tf_worker_config.tf_config_check(entries, SPEC)


def test_a_wrong_file_on_one_host_is_named_by_the_check() -> None:
    entries = tf_config_readbacks({"a": [written(0), written(1)], "b": [written(2, {"worker": ["x:1"]})]})
    with pytest.raises(AnsibleFilterError, match="host b worker-2"):
        tf_worker_config.tf_config_check(entries, SPEC)


@pytest.mark.parametrize("missing", [None, "", {}])
def test_a_host_without_readback_is_named(missing: object) -> None:
    with pytest.raises(AnsibleFilterError, match="host b: no TF_CONFIG was read back"):
        tf_config_readbacks({"a": [written(0)], "b": missing})


def test_the_filter_is_registered() -> None:
    assert FilterModule().filters()["tf_config_readbacks"] is tf_config_readbacks
