"""TF_CONFIG of each worker and the cross-host check of the files read back from hosts."""

from __future__ import annotations

import json
import re
from typing import Any, Callable

import pytest

from tf_cluster import tf_cluster_spec, tf_workers_on
from tf_launch import tf_launch_refusals
from tf_worker_config import (
    AnsibleFilterError,
    tf_config,
    tf_config_check,
    tf_config_files,
    tf_config_problems,
    tf_config_readback,
)

HOSTS = [
    {"host": "node-a", "address": "10.0.0.1", "port": 2222, "slots": 2},
    {"host": "node-b", "address": "10.0.0.2", "port": 2222, "slots": 2},
    {"host": "node-c", "address": "10.0.0.3", "port": 2222, "slots": 1},
]

Content = Callable[[dict[str, Any], int], str]


@pytest.fixture
def spec() -> dict[str, Any]:
    return tf_cluster_spec(HOSTS)


def as_written(spec: dict[str, Any], index: int) -> str:
    """The file content as the worker role writes it (to_json plus a newline)."""
    return json.dumps(tf_config(spec, index)) + "\n"


def read_back(content: str, index: Any) -> dict[str, Any]:
    """One TF_CONFIG as module tf_run_dir reads it back."""
    return {"index": index, "content": content}


def readbacks(spec: dict[str, Any], content: Content = as_written, skip: tuple[int, ...] = ()) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for name in dict.fromkeys(w["host"] for w in spec["workers"]):
        results = [read_back(content(spec, w["index"]), w["index"]) for w in tf_workers_on(spec, name) if w["index"] not in skip]
        entries += tf_config_readback(results, name)
    return entries


def tamper(target: int, change: Callable[[dict[str, Any]], Any]) -> Content:
    """Content function that alters the TF_CONFIG of worker ``target`` only."""

    def content(spec: dict[str, Any], index: int) -> str:
        data = tf_config(spec, index)
        if index == target:
            data = json.loads(json.dumps(data))
            result = change(data)
            if result is not None:
                return result
        return json.dumps(data)

    return content


@pytest.mark.parametrize("index", [0, 1, 2, 3, 4, "3"])
def test_tf_config_of_each_worker(spec: dict[str, Any], index: Any) -> None:
    config = tf_config(spec, index)
    assert config == {"cluster": spec["cluster"], "task": {"type": "worker", "index": int(index)}}


@pytest.mark.parametrize("index", [-1, 5, 17])
def test_tf_config_index_out_of_range(spec: dict[str, Any], index: int) -> None:
    with pytest.raises(AnsibleFilterError, match=rf"worker index {index} is outside 0\.\.4"):
        tf_config(spec, index)


def test_readback_tags_each_config_with_its_host() -> None:
    contents = {3: '{"x": "é"}', 4: "{}"}
    results = [read_back(text, str(index)) for index, text in contents.items()]
    assert tf_config_readback(results, "node-b") == [
        {"host": "node-b", "index": 3, "content": '{"x": "é"}'},
        {"host": "node-b", "index": 4, "content": "{}"},
    ]


def test_config_files_hold_each_local_workers_tf_config(spec: dict[str, Any]) -> None:
    local = [w for w in spec["workers"] if w["host"] == spec["workers"][-1]["host"]]
    files = tf_config_files(local, spec)
    assert [f["index"] for f in files] == [w["index"] for w in local]
    for entry, worker in zip(files, local):
        assert entry["content"] == as_written(spec, worker["index"])


def test_check_passes_for_correct_files(spec: dict[str, Any]) -> None:
    report = tf_config_check(readbacks(spec), spec)
    assert report == {"checksum": spec["checksum"], "workers": 5}


def test_check_accepts_other_json_formatting(spec: dict[str, Any]) -> None:
    def pretty(spec: dict[str, Any], index: int) -> str:
        return json.dumps(tf_config(spec, index), indent=4, sort_keys=True)

    assert tf_config_check(readbacks(spec, pretty), spec)["workers"] == 5


def test_check_names_host_and_worker_with_reordered_cluster(spec: dict[str, Any]) -> None:
    def reorder(data: dict[str, Any]) -> None:
        data["cluster"]["worker"].reverse()

    with pytest.raises(AnsibleFilterError, match="TF_CONFIG check failed") as info:
        tf_config_check(readbacks(spec, tamper(3, reorder)), spec)
    message = str(info.value)
    assert "host node-b worker-3: cluster list" in message
    assert "differs from the spec" in message
    assert "10.0.0.3:2222" in message
    for other in ("host node-a worker-0", "host node-a worker-1", "host node-b worker-2", "host node-c worker-4"):
        assert other not in message


def test_check_names_host_and_worker_with_smaller_cluster(spec: dict[str, Any]) -> None:
    def drop_last(data: dict[str, Any]) -> None:
        data["cluster"]["worker"].pop()

    with pytest.raises(AnsibleFilterError, match=r"host node-a worker-0: cluster list .* differs from the spec"):
        tf_config_check(readbacks(spec, tamper(0, drop_last)), spec)


def test_check_names_wrong_task_index(spec: dict[str, Any]) -> None:
    def wrong(data: dict[str, Any]) -> None:
        data["task"]["index"] = 3

    with pytest.raises(AnsibleFilterError) as info:
        tf_config_check(readbacks(spec, tamper(2, wrong)), spec)
    message = str(info.value)
    assert "host node-b worker-2: task.index is 3, expected 2" in message


def test_check_names_both_workers_sharing_an_index(spec: dict[str, Any]) -> None:
    def share(data: dict[str, Any]) -> None:
        data["task"]["index"] = 1

    with pytest.raises(
        AnsibleFilterError,
        match=re.escape("host node-c worker-4: task.index 1 is also used by host node-a worker-1"),
    ):
        tf_config_check(readbacks(spec, tamper(4, share)), spec)


def test_check_names_the_missing_worker(spec: dict[str, Any]) -> None:
    with pytest.raises(AnsibleFilterError, match=re.escape("host node-b worker-2: no TF_CONFIG was written")):
        tf_config_check(readbacks(spec, skip=(2,)), spec)


def test_check_names_the_host_of_a_missing_worker(spec: dict[str, Any]) -> None:
    """The documented contract: the check names the host and the worker."""
    with pytest.raises(AnsibleFilterError) as info:
        tf_config_check(readbacks(spec, skip=(2,)), spec)
    message = str(info.value)
    assert "worker-2" in message
    assert "node-b" in message, f"worker 2 belongs to host node-b, but the message does not name it: {message}"


def test_check_rejects_worker_outside_the_cluster(spec: dict[str, Any]) -> None:
    """Indices must be exactly 0..N-1: a sixth TF_CONFIG for worker 5 is not in the spec."""
    extra = tf_config_readback(
        [read_back(json.dumps({"cluster": spec["cluster"], "task": {"type": "worker", "index": 5}}), 5)], "node-c"
    )
    with pytest.raises(AnsibleFilterError, match=r"host node-c worker-5"):
        tf_config_check(readbacks(spec) + extra, spec)


@pytest.mark.parametrize(
    "bad",
    ["not json {", "", "null", "[]", '{"cluster": {"worker": []}}', '{"task": {"index": 1}}', '{"cluster": {}, "task": {"index": "x"}}'],
)
def test_check_names_host_and_worker_with_invalid_content(spec: dict[str, Any], bad: str) -> None:
    with pytest.raises(AnsibleFilterError, match=r"host node-b worker-3: TF_CONFIG is not valid"):
        tf_config_check(readbacks(spec, tamper(3, lambda _data: bad)), spec)


def test_check_reports_every_problem_at_once(spec: dict[str, Any]) -> None:
    def reorder(data: dict[str, Any]) -> None:
        data["cluster"]["worker"].reverse()

    entries = readbacks(spec, tamper(0, reorder))
    entries[4]["content"] = "garbage"
    with pytest.raises(AnsibleFilterError) as info:
        tf_config_check(entries, spec)
    message = str(info.value)
    assert "host node-a worker-0: cluster list" in message
    assert "host node-c worker-4: TF_CONFIG is not valid" in message
    assert "host node-c worker-4: no TF_CONFIG was written" in message


def test_problems_are_empty_for_correct_files(spec: dict[str, Any]) -> None:
    assert tf_config_problems(readbacks(spec), spec) == []


def test_problems_name_what_the_check_refuses_without_raising(spec: dict[str, Any]) -> None:
    """The launch decides from the list, before the go, whether to stop the armed workers:
    the same problems tf_config_check raises with, each naming its host and worker."""
    entries = readbacks(spec)
    wrong = {**entries[1], "content": json.dumps({"cluster": {"worker": ["x:1"]}, "task": {"index": 1}})}
    bad = [entries[0], wrong, *entries[2:]]
    problems = tf_config_problems(bad, spec)
    assert len(problems) == 1 and problems[0].startswith(f"host {wrong['host']} worker-1: cluster list")
    with pytest.raises(AnsibleFilterError, match=re.escape("TF_CONFIG check failed: " + problems[0])):
        tf_config_check(bad, spec)
    missing = tf_config_problems(entries[1:], spec)
    assert missing == [f"host {entries[0]['host']} worker-0: no TF_CONFIG was written"]


def launch_results(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every host's launch result as the armed launch registers it: its facts, and what
    its deploy read back."""
    by_host: dict[str, dict[str, Any]] = {}
    for entry in readbacks(spec):
        result = by_host.setdefault(entry["host"], {"facts": {"tf_worker_run_dir": "/r"}, "deploy": {"read_back": []}})
        result["deploy"]["read_back"].append({"index": entry["index"], "content": entry["content"]})
    return by_host


def test_an_armed_launch_that_armed_everywhere_and_read_the_cluster_back_is_not_refused(spec: dict[str, Any]) -> None:
    assert tf_launch_refusals(launch_results(spec), spec) == {"reasons": [], "failed_hosts": []}


def test_a_host_whose_launch_failed_is_named_first_and_its_read_back_not_asked_for(spec: dict[str, Any]) -> None:
    """Its module run started nothing (no facts, nothing read back): the launch must stop
    what the other hosts armed, and say why."""
    results = launch_results(spec)
    results["node-b"] = {"failed": False, "msg": "host node-b: nothing was launched: cannot make /h/runs private"}
    results["node-c"] = {"failed": False, "msg": "Permission denied"}
    wrong = json.dumps({"cluster": {"worker": ["x:1"]}, "task": {"index": 0}})
    results["node-a"]["deploy"]["read_back"][0]["content"] = wrong
    refusal = tf_launch_refusals(results, spec)
    assert refusal["failed_hosts"] == ["node-b", "node-c"]
    problems = refusal["reasons"]
    assert problems[:2] == [
        "host node-b: nothing was launched: cannot make /h/runs private", "host node-c: Permission denied",
    ]
    assert problems[2].startswith("host node-a worker-0: cluster list")
    # The failed hosts' workers wrote no TF_CONFIG: said once, by the failure.
    assert len(problems) == 3, problems
    results["node-a"] = {}
    refusal = tf_launch_refusals(results, spec)
    assert refusal["reasons"][0] == "host node-a: its launch returned no result"
    assert refusal["failed_hosts"] == ["node-a", "node-b", "node-c"]
    results["node-a"] = {"unreachable": True, "changed": False, "msg": "ssh: connect to host a port 22: No route"}
    refusal = tf_launch_refusals(results, spec)
    assert refusal["reasons"][0] == "host node-a: could not be reached: ssh: connect to host a port 22: No route"
