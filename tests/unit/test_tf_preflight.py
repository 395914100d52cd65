"""Preflight: what the host probes see, and the problems that refuse a run."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import tf_firewall
import tf_preflight
from ansible_collections.tf_runbook.multiworker.plugins.module_utils import (
    tf_probe_addresses,
    tf_probe_host,
    tf_probe_interpreter,
    tf_probe_listen,
    tf_probe_ports,
    tf_probe_reach,
)
from conftest import PLUGINS
from helpers import kill_quietly, run_module, wait_until

# The modules, run as Ansible runs them; their functions live in module_utils/tf_probe_*.py.
HOST_MODULE = PLUGINS / "modules" / "tf_preflight_host.py"
REACH_MODULE = PLUGINS / "modules" / "tf_preflight_reach.py"

SPEC = {
    "workers": [
        {"index": 0, "host": "a", "address": "10.0.0.1", "port": 2222},
        {"index": 1, "host": "b", "address": "10.0.0.2", "port": 2222},
        {"index": 2, "host": "b", "address": "10.0.0.2", "port": 2223},
    ]
}


def clean(**overrides: object) -> dict[str, object]:
    return {"busy_ports": [], "free_mb": 50_000, "base_dir": "/srv/tf", "run_launched": "", "gpus": 0, **overrides}


def ansible_module() -> Any:
    """A real AnsibleModule with no options, for the modules' run_command helpers."""
    from ansible.module_utils.basic import AnsibleModule
    from ansible.module_utils.testing import patch_module_args

    with patch_module_args({}):
        return AnsibleModule(argument_spec={})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- problems from the host probes ---------------------------------------------------


def test_clean_hosts_have_no_problems() -> None:
    assert tf_preflight.tf_preflight_host_problems({"a": clean(), "b": clean()}, SPEC, 1024, "r1") == []


def test_a_taken_port_names_host_worker_port_and_process() -> None:
    probes = {"a": clean(), "b": clean(busy_ports=[{"port": 2223, "pid": 4242, "process": "python3", "error": "Address in use"}])}
    [problem] = tf_preflight.tf_preflight_host_problems(probes, SPEC, 1024, "r1")
    assert problem.startswith("host b: worker 2's port 2223 is already in use by pid 4242 (python3)")


def test_a_taken_port_whose_owner_is_hidden_says_so() -> None:
    probes = {"a": clean(busy_ports=[{"port": 2222, "error": "Address in use"}]), "b": clean()}
    [problem] = tf_preflight.tf_preflight_host_problems(probes, SPEC, 1024, "r1")
    assert "host a: worker 0's port 2222" in problem and "a process this user cannot see" in problem


def test_too_little_disk_names_host_path_and_both_sizes() -> None:
    [problem] = tf_preflight.tf_preflight_host_problems({"a": clean(free_mb=300), "b": clean()}, SPEC, 1024, "r1")
    assert problem == "host a: only 300 MB free under /srv/tf, below tf_preflight_min_free_mb=1024"


def test_a_run_id_launched_before_names_the_record() -> None:
    probes = {"a": clean(), "b": clean(run_launched="/srv/tf/runs/r1/worker-1/state.json")}
    [problem] = tf_preflight.tf_preflight_host_problems(probes, SPEC, 1024, "r1")
    assert "host b: run id 'r1' was already launched there (/srv/tf/runs/r1/worker-1/state.json)" in problem


def test_gpu_counts_that_differ_are_listed_per_host() -> None:
    [problem] = tf_preflight.tf_preflight_host_problems({"a": clean(gpus=2), "b": clean(gpus=1)}, SPEC, 1024, "r1")
    assert problem == "hosts show different numbers of GPUs: a=2, b=1"


def test_equal_gpu_counts_and_no_gpus_pass() -> None:
    assert tf_preflight.tf_preflight_host_problems({"a": clean(gpus=4), "b": clean(gpus=4)}, SPEC, 1024, "r") == []
    assert tf_preflight.tf_preflight_host_problems({"a": clean(), "b": clean()}, SPEC, 1024, "r") == []


def test_unreachable_endpoints_name_both_hosts_and_the_reason() -> None:
    results = {"a": [{"index": 2, "host": "b", "address": "10.0.0.2", "port": 2223, "reason": "no answer within 5 s"}], "b": []}
    assert tf_preflight.tf_preflight_unreachable(results) == [
        "host a cannot reach worker 2 on host b at 10.0.0.2:2223: no answer within 5 s"
    ]


def test_a_host_that_cannot_reach_its_own_worker_is_told_its_address_is_not_its_own() -> None:
    """A cluster on one host probes itself: an address of another machine fails there."""
    results = {"w": [{"index": 1, "host": "w", "address": "192.0.2.10", "port": 2223, "reason": "no answer within 5 s"}]}
    assert tf_preflight.tf_preflight_unreachable(results) == [
        "host w cannot reach worker 1 on host w at 192.0.2.10:2223: no answer within 5 s; the address does not lead "
        "back to host w itself: its tf_worker_address (default: ansible_host) must be an address this machine answers on"
    ]


def test_a_refused_probe_names_the_failed_hosts_and_those_ssh_could_not_reach_in_play_order() -> None:
    registered = ["probe", "reach"]
    hosts = {
        "a": {"probe": {"ports_held": []}},  # ran, failed nothing: in the rescue for another host
        "b": {"probe": {"unreachable": True, "msg": "Connection refused"}},
        "c": {"ansible_failed_result": {"msg": "port taken"}, "probe": {}},
        "d": {"probe": {"skipped": True}, "reach": {"unreachable": True}},  # the two-step connect's
        "e": {},  # the probe never came to it
    }
    assert tf_preflight.tf_preflight_refused_hosts(hosts, registered) == [
        "b did not answer over SSH", "c", "d did not answer over SSH"]
    assert tf_preflight.tf_preflight_refused_hosts({"a": {"probe": {"unreachable": True}}}, ["reach"]) == []


def test_versions_that_agree_pass_and_python_patch_levels_may_differ() -> None:
    versions = {
        "a": {"python": "3.11.2", "tensorflow": "2.21.0", "numpy": "2.3.5"},
        "b": {"python": "3.11.9", "tensorflow": "2.21.0", "numpy": "2.3.5"},
    }
    assert tf_preflight.tf_preflight_versions(versions, "minor") == []
    assert tf_preflight.tf_preflight_versions(versions, "exact") == [
        "python versions differ across hosts: a=3.11.2, b=3.11.9"
    ]


@pytest.mark.parametrize("name", ["python", "tensorflow", "numpy"])
def test_each_version_drift_is_named_with_every_hosts_value(name: str) -> None:
    base = {"python": "3.11.2", "tensorflow": "2.21.0", "numpy": "2.3.5"}
    other = dict(base, **{name: {"python": "3.12.1", "tensorflow": "2.20.0", "numpy": "1.26.4"}[name]})
    [problem] = tf_preflight.tf_preflight_versions({"a": base, "b": other})
    assert problem == f"{name} versions differ across hosts: a={base[name]}, b={other[name]}"


def test_an_interpreter_that_does_not_run_or_lacks_tensorflow_is_named() -> None:
    versions = {
        "a": {"python": "3.11.2", "tensorflow": None, "numpy": "2.3.5"},
        "b": {"error": "/opt/py/bin/python does not run: No such file"},
        "c": {"python": "3.11.2", "tensorflow": "2.21.0", "numpy": "2.3.5"},
    }
    problems = tf_preflight.tf_preflight_versions(versions)
    assert "host b: worker interpreter /opt/py/bin/python does not run: No such file" in problems
    assert "tensorflow versions differ across hosts: a=missing, c=2.21.0" in problems


def test_the_versions_leave_out_a_host_whose_interpreter_the_lookup_refused() -> None:
    """Its versions could not be read: the lookup's "does not exist there" names the
    cause, not a second "does not run"."""
    read = {"python": "3.11.2", "tensorflow": "2.21.0", "numpy": "2.3.5"}
    probes = {
        "a": {"versions": read, "interpreter_state": {"path": "/p", "exists": True, "is_file": True, "executable": True}},
        "b": {"versions": {"error": "/x does not run: No such file"}, "interpreter_state": {"path": "/x", "exists": False}},
        "c": {"versions": {"error": "/bin/false does not run: it exited with status 1, saying nothing"},
              "interpreter_state": {"path": "/bin/false", "exists": True, "is_file": True, "executable": True}},
        "d": {"interpreter_state": {"path": "py9", "found": False}},
        "e": {},
    }
    assert tf_preflight.tf_preflight_probe_versions(probes) == {
        "a": read, "c": {"error": "/bin/false does not run: it exited with status 1, saying nothing"},
        "e": {"error": "no versions were read"}}
    problems = tf_preflight.tf_preflight_versions(tf_preflight.tf_preflight_probe_versions(probes))
    assert not any("host b" in problem or "host d" in problem for problem in problems)
    assert "host c: worker interpreter /bin/false does not run: it exited with status 1, saying nothing" in problems


def test_a_package_no_host_has_is_not_drift() -> None:
    """A job without TensorFlow (the runbook runs any script) on hosts without it."""
    versions = {host: {"python": "3.11.2", "tensorflow": None, "numpy": None} for host in ("a", "b")}
    assert tf_preflight.tf_preflight_versions(versions) == []


def test_script_checks(tmp_path: Path) -> None:
    good = tmp_path / "train.py"
    good.write_text("print('ok')\n")
    bad = tmp_path / "broken.py"
    bad.write_text("def broken(:\n    pass\n")
    assert tf_preflight.tf_preflight_script_problems(str(good)) == []
    [missing] = tf_preflight.tf_preflight_script_problems(str(tmp_path / "nope.py"))
    assert missing == f"tf_train_script {tmp_path}/nope.py: cannot be read on the controller: No such file or directory"
    [syntax] = tf_preflight.tf_preflight_script_problems(str(bad))
    assert syntax.startswith(f"tf_train_script {bad}: line 1:")
    [directory] = tf_preflight.tf_preflight_script_problems(str(tmp_path))
    assert "is a directory" in directory


def test_a_relative_or_home_script_is_read_where_the_user_meant_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative tf_train_script is the file next to where ansible-playbook was started,
    ~ is the controller user's home: the check reads the file the deploy sends."""
    home = tmp_path / "home"
    project = tmp_path / "project"
    home.mkdir()
    project.mkdir()
    (project / "mytrain.py").write_text("print('mine')\n")
    (home / "train.py").write_text("print('home')\n")
    monkeypatch.chdir(project)
    monkeypatch.setenv("HOME", str(home))
    assert tf_preflight.tf_controller_path("mytrain.py") == str(project / "mytrain.py")
    assert tf_preflight.tf_controller_path("../project/./mytrain.py") == str(project / "mytrain.py")
    assert tf_preflight.tf_controller_path("~/train.py") == str(home / "train.py")
    assert tf_preflight.tf_controller_path("/abs/train.py") == "/abs/train.py"
    assert tf_preflight.tf_controller_path("") == ""
    assert tf_preflight.tf_controller_path(["a"]) == ["a"]
    assert tf_preflight.tf_preflight_script_problems("mytrain.py") == []
    assert tf_preflight.tf_preflight_script_problems("~/train.py") == []
    [missing] = tf_preflight.tf_preflight_script_problems("other.py")
    assert missing == (
        f"tf_train_script other.py ({project}/other.py): cannot be read on the controller: No such file or directory"
    )


# -- the host probe --------------------------------------------------------------------


def test_a_free_port_binds_and_a_listening_one_names_its_owner() -> None:
    port = free_port()
    assert tf_probe_ports.bind_error(port) == 0
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        assert tf_probe_ports.bind_error(port) != 0
        owner = tf_probe_ports.port_owner(port)
    assert owner["pid"] == os.getpid()
    assert owner["process"] == Path(f"/proc/{os.getpid()}/comm").read_text().strip()


def test_probe_host_reports_busy_ports_disk_and_earlier_launches(tmp_path: Path) -> None:
    port, other = free_port(), free_port()
    (tmp_path / "runs" / "r1" / "retry-1" / "worker-3").mkdir(parents=True)
    (tmp_path / "runs" / "r1" / "retry-1" / "worker-3" / "exit.json").write_text("{}")
    (tmp_path / "runs" / "r2" / "worker-0").mkdir(parents=True)  # created, never launched
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", port))
        sock.listen()
        seen = tf_probe_host.probe_host([port, other], str(tmp_path / "not" / "yet"), "r1")
    assert [b["port"] for b in seen["busy_ports"]] == [port]
    assert seen["free_mb"] > 0
    assert seen["run_launched"] == ""  # that base dir does not exist yet
    assert tf_probe_host.probe_host([], str(tmp_path), "r1")["run_launched"].endswith("retry-1/worker-3/exit.json")
    assert tf_probe_host.probe_host([], str(tmp_path), "r2")["run_launched"] == ""
    # Backups in the run's own checkpoint directory, its worker directories gone: a new
    # run there would resume from them. The runbook's dot files alone do not count.
    backups = tmp_path / "runs" / "r3" / "checkpoints"
    backups.mkdir(parents=True)
    (backups / ".tf-runbook-owner.json").write_text("{}")
    assert tf_probe_host.probe_host([], str(tmp_path), "r3")["run_launched"] == ""
    (backups / "ckpt-3.index").write_text("x")
    assert tf_probe_host.probe_host([], str(tmp_path), "r3")["run_launched"] == str(backups)


def test_gpus_are_counted_from_the_drivers_listing(tmp_path: Path) -> None:
    gpus = tmp_path / "driver" / "nvidia" / "gpus"
    for bus in ("0000:17:00.0", "0000:65:00.0"):
        (gpus / bus).mkdir(parents=True)
    assert tf_probe_host.count_gpus(str(tmp_path)) == 2


def test_listeners_hear_every_peer_then_end_and_free_their_ports() -> None:
    ports = [free_port(), free_port()]
    result: dict[str, object] = {}
    thread = threading.Thread(target=lambda: result.update(tf_probe_listen.listen(ports, ["a", "b"], 20)))
    thread.start()
    endpoints = [{"index": i, "host": "h", "address": "127.0.0.1", "port": p} for i, p in enumerate(ports)]
    assert tf_probe_reach.connect_all(endpoints, "a", 5) == []
    assert tf_probe_reach.connect_all(endpoints, "b", 5) == []
    thread.join(10)
    assert not thread.is_alive()
    assert result["heard"] == {str(p): ["a", "b"] for p in ports}
    assert all(tf_probe_ports.bind_error(p) == 0 for p in ports)


def test_stop_ends_listeners_that_still_wait() -> None:
    ports = [free_port()]
    thread = threading.Thread(target=lambda: tf_probe_listen.listen(ports, ["never"], 60))
    thread.start()
    assert tf_probe_reach.connect_all([{"index": 0, "host": "h", "address": "127.0.0.1", "port": ports[0]}], "a", 5) == []
    assert tf_probe_listen.stop_listeners(ports, 10) == []
    thread.join(10)
    assert not thread.is_alive()


def test_an_endpoint_nobody_listens_on_is_reported_with_the_reason() -> None:
    port = free_port()
    [failure] = tf_probe_reach.connect_all([{"index": 1, "host": "b", "address": "127.0.0.1", "port": port}], "a", 0.5)
    assert failure["index"] == 1 and "refused" in failure["reason"].lower()


def test_the_probe_module_runs_as_ansible_runs_it(tmp_path: Path) -> None:
    """The module file itself, through AnsibleModule's JSON arguments."""
    args = {"ports": [free_port()], "base_dir": str(tmp_path), "run_id": "x"}
    result = run_module(HOST_MODULE, args)
    assert result["busy_ports"] == [] and result["run_launched"] == "" and result["free_mb"] > 0


# -- firewall rules ------------------------------------------------------------------


def test_table_names_are_valid_nft_identifiers_and_differ_per_run() -> None:
    names = {tf_firewall.table_name(r) for r in ("20261203T000000-ab12", "20261203T000000-ab13", "a.b-c")}
    assert len(names) == 3
    assert all(n.startswith("tf_runbook_") and n.replace("_", "").isalnum() for n in names)


def test_ruleset_accepts_loopback_and_members_and_drops_the_rest() -> None:
    v4, v6 = tf_firewall.resolve(["10.0.0.2", "10.0.0.1", "10.0.0.2", "[fd00::1]"])
    assert v4 == ["10.0.0.1", "10.0.0.2"] and v6 == ["fd00::1"]
    rules = tf_firewall.ruleset("tf_runbook_x", [2223, 2222], v4, v6, 1860)
    lines = [line.strip() for line in rules.splitlines()]
    # The guarded ports are set elements that time out: the table carries its own expiry.
    assert "elements = { 2222 timeout 1860s, 2223 timeout 1860s }" in lines and "flags timeout" in lines
    assert 'iifname "lo" tcp dport @ports accept' in lines
    assert "ip saddr { 10.0.0.1, 10.0.0.2 } tcp dport @ports accept" in lines
    assert "ip6 saddr { fd00::1 } tcp dport @ports accept" in lines
    # The drop comes after every accept.
    assert lines.index("tcp dport @ports drop") > max(i for i, line in enumerate(lines) if line.endswith("accept"))
    with pytest.raises(ValueError, match="positive expiry"):
        tf_firewall.ruleset("tf_runbook_x", [2222], v4, v6, 0)


def test_only_runbook_tables_whose_rules_all_expired_are_swept() -> None:
    def port_set(*elements: int) -> dict[str, Any]:
        found: dict[str, Any] = {"name": "ports", "family": "inet", "flags": ["timeout"]}
        if elements:
            found["elem"] = [{"elem": {"val": e, "timeout": 60, "expires": 30}} for e in elements]
        return {"nftables": [{"metainfo": {}}, {"set": found}]}

    listings = {
        "tf_runbook_live": port_set(2222),
        "tf_runbook_gone": port_set(),
        "tf_runbook_old_format": None,
        "someone_elses": port_set(),
    }
    assert tf_firewall.expired_tables(listings) == ["tf_runbook_gone"]


def test_nft_runs_through_run_command_with_its_arguments_and_script_as_given(tmp_path: Path) -> None:
    """The firewall calls nft through the module's run_command: arguments unexpanded, the
    rule script on stdin byte for byte, and nft's exit status and outputs back."""
    fake = tmp_path / "nft"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        "data = sys.stdin.read() if sys.argv[1:] == ['-f', '-'] else None\n"
        "print(json.dumps({'argv': sys.argv[1:], 'stdin': data}))\n"
        "sys.stderr.write('warned')\n"
        "sys.exit(3 if data is None else 0)\n"
    )
    fake.chmod(0o700)
    nft = tf_firewall.nft_runner(ansible_module(), str(fake))
    listed = nft("-j", "list", "set", "inet", "$HOME", "~x")
    assert (listed.returncode, json.loads(listed.stdout), listed.stderr) == (
        3, {"argv": ["-j", "list", "set", "inet", "$HOME", "~x"], "stdin": None}, "warned"
    )
    script = tf_firewall.ruleset("tf_runbook_x", [2222], ["10.0.0.1"], [], 60)
    loaded = nft(script=script)
    assert loaded.returncode == 0 and json.loads(loaded.stdout) == {"argv": ["-f", "-"], "stdin": script}


def test_a_member_that_does_not_resolve_is_named() -> None:
    with pytest.raises(ValueError, match="no-such-host.invalid"):
        tf_firewall.resolve(["no-such-host.invalid"])


def test_the_host_probe_can_leave_listeners_served_by_a_detached_process() -> None:
    ports = [free_port(), free_port()]
    pid = tf_probe_listen.start_listener(ports, ["a"], 30)
    try:
        assert pid > 0 and pid != os.getpid()
        # Bound before start_listener returned: the first connection succeeds at once.
        assert all(tf_probe_ports.bind_error(p) != 0 for p in ports)
        endpoints = [{"index": i, "host": "h", "address": "127.0.0.1", "port": p} for i, p in enumerate(ports)]
        assert tf_probe_reach.connect_all(endpoints, "a", 0.5) == []
        # Every peer said hello on every port: the server ends and frees the ports.
        assert tf_probe_listen.stop_listeners(ports, 10) == []
    finally:
        kill_quietly(pid)


def test_stop_frees_ports_of_a_detached_listener_still_waiting_for_peers() -> None:
    ports = [free_port()]
    tf_probe_listen.start_listener(ports, ["never-comes"], 60)
    assert tf_probe_ports.bind_error(ports[0]) != 0
    assert tf_probe_listen.stop_listeners(ports, 10) == []


def local_endpoints(ports: list[int], host: str = "h") -> list[dict[str, Any]]:
    return [{"index": i, "host": host, "address": "127.0.0.1", "port": p} for i, p in enumerate(ports)]


def test_a_detached_listener_ends_by_itself_once_every_peer_reached_every_port() -> None:
    """No stop: the connects alone end it, and the wait sees its ports free."""
    ports = [free_port(), free_port()]
    pid = tf_probe_listen.start_listener(ports, ["a", "b"], 60)
    try:
        assert tf_probe_reach.connect_all(local_endpoints(ports), "a", 2) == []
        # One peer of two: it still listens, whatever the wait.
        assert tf_probe_listen.await_listener_end(ports, pid, 0.5) == ports
        assert not tf_probe_listen.process_gone(pid)
        assert tf_probe_reach.connect_all(local_endpoints(ports), "b", 2) == []
        started = time.monotonic()
        assert tf_probe_listen.await_listener_end(ports, pid, 10) == []
        assert time.monotonic() - started < 5
        assert tf_probe_listen.process_gone(pid) and all(tf_probe_ports.bind_error(p) == 0 for p in ports)
    finally:
        kill_quietly(pid)


def test_a_detached_listener_missing_a_peer_ends_at_its_deadline() -> None:
    ports = [free_port()]
    pid = tf_probe_listen.start_listener(ports, ["a", "never-comes"], 1.5)
    try:
        started = time.monotonic()
        assert tf_probe_reach.connect_all(local_endpoints(ports), "a", 2) == []
        assert tf_probe_listen.await_listener_end(ports, pid, 10) == []
        waited = time.monotonic() - started
        assert 1.0 <= waited < 5, waited
        assert tf_probe_ports.bind_error(ports[0]) == 0
    finally:
        kill_quietly(pid)


def test_connect_waits_until_its_own_listener_heard_the_last_peer() -> None:
    """tf_preflight_reach, as host a: returns once host b connected too, and
    says that its listener is gone and its ports free."""
    ports = [free_port(), free_port()]
    pid = tf_probe_listen.start_listener(ports, ["a", "b"], 60, tf_probe_listen.probe_token("r1", "a"))  # forks: before any thread
    try:
        args = {"me": "a", "run_id": "r1", "endpoints": local_endpoints(ports, "a"),
                "timeout": 2, "ports": ports, "listener_pid": pid, "wait": 20}
        result: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: result.update(run_module(REACH_MODULE, args)))
        started = time.monotonic()
        thread.start()
        time.sleep(1.5)
        assert thread.is_alive(), f"connect returned before its listener heard every peer: {result}"
        assert tf_probe_reach.connect_all(local_endpoints(ports, "a"), "b", 2, run_id="r1") == []
        thread.join(15)
        assert not thread.is_alive()
        assert result["failures"] == [] and result["listener_gone"] is True and result["ports_held"] == []
        assert 1.5 <= time.monotonic() - started < 15
        assert all(tf_probe_ports.bind_error(p) == 0 for p in ports)
    finally:
        kill_quietly(pid)


def test_ports_taken_between_the_look_and_the_listen_are_told_as_what_they_most_often_are() -> None:
    """Two inventory names of one machine: the second host's look saw the ports free, and
    the first one's probe took them before it listened."""
    ports = [free_port()]
    with socket.socket() as holder:
        holder.bind(("", ports[0]))
        holder.listen()
        with pytest.raises(OSError) as raised:
            tf_probe_listen.start_listener(ports, ["w0", "w1"], 5, tf_probe_listen.probe_token("r1", "w1"))
    assert tf_probe_listen.listen_failure("w1", [ports[0], 2223], raised.value) == (
        f"Preflight refused the run: host w1: cannot listen on worker port(s) {ports[0]}, 2223: Address already in "
        "use: they were free when the probe looked a moment before, so another host of the play holds them on this "
        "same machine (an inventory that names one machine twice: list it once, with tf_worker_slots), or a process "
        "took them since"
    )
    assert tf_probe_listen.listen_failure("w1", [2222], PermissionError(13, "Permission denied")) == (
        "Preflight refused the run: host w1: cannot listen on worker port(s) 2222: Permission denied"
    )


def test_connect_waits_a_bounded_time_and_says_what_is_still_held() -> None:
    """A peer that never comes: the wait ends at its bound, the listener is left to its
    own deadline (or the role's stop), and the result names its ports."""
    ports = [free_port()]
    pid = tf_probe_listen.start_listener(ports, ["a", "never-comes"], 60, tf_probe_listen.probe_token("r1", "a"))
    try:
        args = {"me": "a", "run_id": "r1", "endpoints": local_endpoints(ports, "a"),
                "timeout": 2, "ports": ports, "listener_pid": pid, "wait": 1}
        started = time.monotonic()
        result = run_module(REACH_MODULE, args)
        assert 1 <= time.monotonic() - started < 10
        assert result["failures"] == [] and result["listener_gone"] is False and result["ports_held"] == ports
        assert not tf_probe_listen.process_gone(pid)
        assert tf_probe_listen.stop_listeners(ports, 10, tf_probe_listen.probe_token("r1", "a"), pid) == []
    finally:
        kill_quietly(pid)


def test_connect_that_failed_does_not_wait_and_one_without_a_listener_has_none_to_wait_for() -> None:
    ports = [free_port()]
    pid = tf_probe_listen.start_listener(ports, ["a", "never-comes"], 60, tf_probe_listen.probe_token("r1", "a"))
    try:
        dead = {"index": 1, "host": "b", "address": "127.0.0.1", "port": free_port()}
        args = {"me": "a", "run_id": "r1", "endpoints": [*local_endpoints(ports, "a"), dead],
                "timeout": 0.5, "ports": ports, "listener_pid": pid, "wait": 30}
        started = time.monotonic()
        result = run_module(REACH_MODULE, args)
        assert time.monotonic() - started < 10  # not the 30 s wait: the run is refused anyway
        assert [f["index"] for f in result["failures"]] == [1]
        assert result["listener_gone"] is False and result["ports_held"] == ports
        assert tf_probe_listen.stop_listeners(ports, 10, tf_probe_listen.probe_token("r1", "a"), pid) == []
    finally:
        kill_quietly(pid)
    # No listener of this host (listener_pid 0): nothing to wait for.
    assert tf_probe_listen.await_listener_end([free_port()], 0, 30) == []


def module_runner() -> tf_probe_interpreter.Runner:
    """The probe's command runner on a real AnsibleModule (run_command, as on a host)."""
    return tf_probe_interpreter.command_runner(ansible_module())


def test_interpreter_versions_come_from_the_interpreter_or_say_why_not() -> None:
    run = module_runner()
    code = "import json, platform; print(json.dumps({'python': platform.python_version()}))"
    assert tf_probe_interpreter.interpreter_versions(sys.executable, code, run) == {"python": ".".join(map(str, sys.version_info[:3]))}
    missing = tf_probe_interpreter.interpreter_versions("/nonexistent/bin/python3", code, run)
    assert missing["error"].startswith("/nonexistent/bin/python3 does not run:")
    broken = tf_probe_interpreter.interpreter_versions(sys.executable, "raise SystemExit('no numpy here')", run)
    assert broken == {"error": f"{sys.executable} does not run: no numpy here"}
    silent = tf_probe_interpreter.interpreter_versions("/bin/false", code, run)
    assert silent == {"error": "/bin/false does not run: it exited with status 1, saying nothing"}
    # Arguments reach the interpreter as given: no ~ or $ expansion by run_command.
    echo = "import json, sys; print(json.dumps({'argv': sys.argv[1:]}))"
    assert tf_probe_interpreter.interpreter_versions(sys.executable, echo, lambda argv, t: run([*argv, "~/x", "$HOME"], t)) == {
        "argv": ["~/x", "$HOME"]
    }


def test_an_interpreter_that_hangs_is_killed_after_the_timeout() -> None:
    started = time.monotonic()
    hung = tf_probe_interpreter.interpreter_versions(sys.executable, "import time; time.sleep(60)", module_runner(), timeout=1)
    assert time.monotonic() - started < 15
    assert hung == {"error": f"{sys.executable} does not run: {sys.executable} timed out after 1 seconds"}


# -- issue 11: run ids per controller, checkpoint directories --------------------------


def test_a_run_id_already_used_on_the_controller_is_refused(tmp_path: Path) -> None:
    """Point 1: the controller's runs/<id> counts, whichever hosts ran it."""
    from tf_preflight import tf_preflight_controller_run

    assert tf_preflight_controller_run("exp1", str(tmp_path)) == []
    (tmp_path / "exp1").mkdir()
    assert tf_preflight_controller_run("exp1", str(tmp_path)) == [
        f"run id 'exp1' was already used on this controller ({tmp_path}/exp1 exists); its files are kept: "
        "give a new -e tf_run_id or leave it empty"
    ]
    # A dangling link is taken as well: nothing is created through it.
    (tmp_path / "exp2").symlink_to(tmp_path / "nowhere")
    assert tf_preflight_controller_run("exp2", str(tmp_path))
    assert tf_preflight_controller_run("exp3", str(tmp_path / "missing")) == []


@pytest.mark.parametrize(
    ("path", "refused"),
    [("", False), (None, False), ("/srv/ckpt", False), ("~/ckpt", False), ("~", False),
     ("ckpt", True), ("./ckpt", True), ("~other", True)],
)
def test_a_relative_checkpoint_dir_is_refused_naming_the_host(path: Any, refused: bool) -> None:
    from tf_preflight import tf_preflight_checkpoint_problems

    problems = tf_preflight_checkpoint_problems({"w0": "", "w1": path})
    assert bool(problems) is refused
    if refused:
        assert problems == [f"host w1: tf_checkpoint_dir {path!r} must be an absolute path or start with ~/ "
                            "(empty: under the run's directory)"]


# -- issue 11, point 12: the probe knows its own listener ------------------------------


class Recorder:
    """An unrelated service on a port: accepts anything, records what it is sent."""

    def __init__(self, banner: bytes = b"") -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.banner = banner
        self.received = b""
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while self.sock.fileno() != -1:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                if self.banner:
                    conn.sendall(self.banner)
                try:
                    while chunk := conn.recv(256):
                        self.received += chunk
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()
        self.thread.join(2)


@pytest.mark.parametrize("banner", [b"", b"SSH-2.0-OpenSSH_9.6\r\n", b"tf-runbook-probe r1 b\n"])
def test_an_unrelated_listener_at_a_wrong_address_does_not_pass_the_probe(banner: bytes) -> None:
    """Any TCP accept used to count as the worker's port; now the answer must be the
    probe of that very host for this run."""
    other = Recorder(banner)
    try:
        endpoint = {"index": 0, "host": "a", "address": "127.0.0.1", "port": other.port}
        [failure] = tf_probe_reach.connect_all([endpoint], "b", 1.0, run_id="r1")
        assert failure["reason"].startswith("the port answered, but not as this run's probe on host a")
        assert "is tf_worker_address right?" in failure["reason"]
    finally:
        other.close()


def test_the_probe_of_the_right_host_and_run_passes_and_another_run_does_not() -> None:
    port = free_port()
    pid = tf_probe_listen.start_listener([port], ["never"], 30, tf_probe_listen.probe_token("r1", "a"))
    try:
        endpoint = {"index": 0, "host": "a", "address": "127.0.0.1", "port": port}
        assert "not as this run's probe" in tf_probe_reach.connect_all([endpoint], "b", 1.0, run_id="r2")[0]["reason"]
        assert tf_probe_reach.connect_all([endpoint], "b", 2.0, run_id="r1") == []
        assert tf_probe_listen.stop_listeners([port], 10, tf_probe_listen.probe_token("r1", "a"), pid) == []
    finally:
        kill_quietly(pid)


def test_stop_sends_nothing_to_a_process_that_is_not_the_probes_listener() -> None:
    """A busy port (the run was refused for it) is someone else's: no 'stop' reaches it."""
    own_port = free_port()
    token = tf_probe_listen.probe_token("r1", "a")
    pid = tf_probe_listen.start_listener([own_port], ["never"], 30, token)  # forks: before any thread
    other = Recorder()
    try:
        # No listener of ours was started on that host: nothing is sent anywhere.
        assert tf_probe_listen.stop_listeners([other.port], 2, token, 0) == []
        # Ours is stopped; the other port is left alone and not waited for.
        assert tf_probe_listen.stop_listeners([own_port, other.port], 10, token, pid) == []
        assert tf_probe_ports.bind_error(own_port) == 0
        time.sleep(0.3)
        assert other.received == b""
        assert tf_probe_ports.bind_error(other.port) != 0
    finally:
        other.close()
        kill_quietly(pid)


def test_a_stop_for_another_run_does_not_end_the_listener() -> None:
    port = free_port()
    result: dict[str, object] = {}
    thread = threading.Thread(target=lambda: result.update(tf_probe_listen.listen([port], ["never"], 3, "tf-runbook-probe r1 a")))
    thread.start()
    wait_until(lambda: tf_probe_ports.bind_error(port) != 0, 10, "the listener holding its port")
    with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
        conn.sendall(tf_probe_listen.stop_message("tf-runbook-probe r2 a"))
    thread.join(10)
    assert result["stopped"] is False  # it lived its lifetime out


# -- issue 11, points 6 and 11: addresses as each host sees them -----------------------


def test_hosts_resolve_every_worker_address_and_know_their_sources() -> None:
    resolved = tf_probe_addresses.resolve_addresses(["127.0.0.1", "localhost", "0:0::1", "no-such-host.invalid"])
    assert resolved["127.0.0.1"] == ["127.0.0.1"] and resolved["0:0::1"] == ["::1"]
    assert "127.0.0.1" in resolved["localhost"] and resolved["no-such-host.invalid"] == []
    assert tf_probe_addresses.source_addresses({"a": ["127.0.0.1"]}) == ["127.0.0.1"]


def test_a_name_and_an_ip_of_one_machine_sharing_a_port_are_refused_as_a_host_sees_them() -> None:
    spec = {"workers": [
        {"index": 0, "host": "a", "address": "gpu-a", "port": 2222},
        {"index": 1, "host": "b", "address": "10.0.0.2", "port": 2222},
        {"index": 2, "host": "c", "address": "gpu-c", "port": 2222},
        {"index": 3, "host": "c", "address": "gpu-c", "port": 2223},
    ]}
    probes = {
        "a": {"resolved": {"gpu-a": ["10.0.0.1"], "10.0.0.2": ["10.0.0.2"], "gpu-c": ["10.0.0.2"]}},
        "b": {"resolved": {"gpu-a": ["10.0.0.1"], "10.0.0.2": ["10.0.0.2"], "gpu-c": []}},
        "c": {},
    }
    assert tf_preflight.tf_preflight_address_problems(probes, spec) == [
        "host a resolves worker 1's address '10.0.0.2' (host b) and worker 2's 'gpu-c' (host c) to the same "
        "10.0.0.2 port 2222; two workers cannot share an address and port",
        "host b: worker address 'gpu-c' of host c does not resolve there",
    ]
    fine = {"a": {"resolved": {"gpu-a": ["10.0.0.1"], "10.0.0.2": ["10.0.0.2"], "gpu-c": ["10.0.0.3"]}}}
    assert tf_preflight.tf_preflight_address_problems(fine, spec) == []


def test_a_table_whose_ports_only_counted_down_holds_the_same_rules() -> None:
    listed = "table inet t {{\n\tset ports {{\n\t\telements = {{ 2940 timeout 10m expires {left} }}\n\t}}\n}}\n"
    first, later = listed.format(left="9m59s996ms"), listed.format(left="9m41s2ms")
    assert tf_firewall.same_rules(first, later)
    assert not tf_firewall.same_rules(first, first.replace("2940", "2941"))
    assert not tf_firewall.same_rules(first, first.replace("timeout 10m", "timeout 20m"))
    assert not tf_firewall.same_rules(None, first)
    assert tf_firewall.same_rules(None, None)


# -- inputs refused before anything is written on a host (issue 24, point 18) ----------


def test_good_inputs_pass(tmp_path: Path) -> None:
    template = tmp_path / "report.html.j2"
    template.write_text("{{ run_id }}")
    own = {
        "tf_startup_pattern": "cluster_workers=",
        "tf_worker_base_dir": "~/tf-runbook",
        "tf_worker_venv_dir": "",
        "tf_firewall_allow": ["192.0.2.7", "2001:db8::1", "[::1]", "monitor.example.org", "gw"],
        "tf_verdict_report_template": str(template),
        "tf_verdict_expected_size": 0,
        "tf_runs_dir": str(tmp_path / "runs"),
        "tf_controller_timeout": 60,
        "tf_wait_poll_interval": 10,
    }
    assert tf_preflight.tf_preflight_input_problems(own, "w0", {"w0": {}, "w1": {"tf_worker_base_dir": "/srv/tf"}}, 2) == []


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"tf_startup_pattern": "joined("}, "tf_startup_pattern 'joined(' is not a valid regular expression: missing ),"),
        ({"tf_startup_pattern": 5}, "tf_startup_pattern must be a regular expression (a string), got a whole number: 5"),
        ({"tf_worker_base_dir": "tf-runbook"}, "tf_worker_base_dir 'tf-runbook' must be an absolute path or start with ~/"),
        ({"tf_worker_base_dir": ""}, "tf_worker_base_dir '' must be an absolute path or start with ~/"),
        ({"tf_worker_base_dir": "~alice/tf"}, "tf_worker_base_dir '~alice/tf' must be an absolute path or start with ~/"),
        ({"tf_worker_base_dir": "/srv/tf\nrm"}, "tf_worker_base_dir '/srv/tf\\nrm' holds a line break"),
        ({"tf_worker_base_dir": "/srv/\x00tf"}, "tf_worker_base_dir '/srv/\\x00tf' holds a NUL character"),
        ({"tf_worker_venv_dir": "venv"}, "tf_worker_venv_dir 'venv' must be an absolute path or start with ~/ (empty: venv "),
        ({"tf_firewall_allow": ["10.0.0.0/8"]}, "tf_firewall_allow entry '10.0.0.0/8' is a network: the firewall accepts"),
        ({"tf_firewall_allow": ["10.0.0.300"]}, "tf_firewall_allow entry '10.0.0.300' is not an IP address or host name"),
        ({"tf_firewall_allow": ["bad host"]}, "tf_firewall_allow entry 'bad host' is not an IP address or host name"),
        ({"tf_firewall_allow": ["10.0.0.1:22"]}, "tf_firewall_allow entry '10.0.0.1:22' is not an IP address or host name"),
        ({"tf_firewall_allow": "10.0.0.1"}, "tf_firewall_allow must be a list of IP addresses or host names, got '10.0.0.1'"),
        ({"tf_verdict_report_template": "/nonexistent/r.j2"}, "tf_verdict_report_template /nonexistent/r.j2 does not exist on"),
        ({"tf_verdict_report_template": "/"}, "tf_verdict_report_template / is not a file"),
        ({"tf_runs_dir": "runs"}, "tf_runs_dir 'runs' must be an absolute path or start with ~/"),
        ({"tf_runs_dir": "/etc/hostname"}, "tf_runs_dir /etc/hostname exists and is not a directory"),
        ({"tf_verdict_expected_size": 3}, "tf_verdict_expected_size 3 is not the cluster's 2 worker(s)"),
        ({"tf_verdict_marker": "../model.keras"},
         'tf_verdict_marker "../model.keras" must be a relative path inside the worker directory (multiworker-complete'),
        ({"tf_verdict_marker": "/tmp/done"}, 'tf_verdict_marker "/tmp/done" must be a relative path inside the worker'),
        ({"tf_verdict_marker": "a/../../b"}, 'tf_verdict_marker "a/../../b" must be a relative path inside the worker'),
        ({"tf_verdict_marker": ""}, 'tf_verdict_marker "" must be a relative path inside the worker directory'),
        ({"tf_verdict_marker": ["done"]},
         "tf_verdict_marker must be a relative path inside the worker directory (multiworker-complete.txt, "
         "model/model.keras), got a list: ['done']"),
        (
            {"tf_controller_timeout": 15, "tf_wait_poll_interval": 10},
            "tf_controller_timeout 15 must be at least twice tf_wait_poll_interval (10)",
        ),
    ],
)
def test_each_bad_input_is_refused_naming_host_and_value(values: dict[str, Any], problem: str) -> None:
    [found] = tf_preflight.tf_preflight_input_problems(values, "w0", {"w0": values}, 2)
    assert found.startswith(f"host w0: {problem}"), found


def test_a_report_that_is_off_needs_no_template() -> None:
    values = {"tf_verdict_report": False, "tf_verdict_report_template": "/nonexistent/r.j2"}
    assert tf_preflight.tf_preflight_input_problems(values, "w0", {}, 2) == []


def test_another_hosts_own_value_is_refused_under_its_name_and_an_inherited_one_once() -> None:
    own = {"tf_worker_base_dir": "~/tf", "tf_startup_pattern": "("}
    others = {"w0": {}, "w1": {"tf_worker_base_dir": "rel"}, "w2": {"tf_startup_pattern": "("},
              "w3": {"tf_worker_base_dir": "rel"}}
    assert tf_preflight.tf_preflight_input_problems(own, "w0", others, 3) == [
        "host w0: tf_startup_pattern '(' is not a valid regular expression: missing ), unterminated subpattern at "
        "position 0",
        "host w1: tf_worker_base_dir 'rel' must be an absolute path or start with ~/",
        "host w3: tf_worker_base_dir 'rel' must be an absolute path or start with ~/",
    ]


def test_the_input_names_are_those_the_check_reads() -> None:
    names = tf_preflight.tf_preflight_input_names()
    assert {"tf_startup_pattern", "tf_worker_base_dir", "tf_worker_venv_dir", "tf_firewall_allow",
            "tf_verdict_report_template", "tf_verdict_expected_size", "tf_runs_dir"} <= set(names)
    assert tf_preflight.FilterModule().filters()["tf_preflight_input_problems"] is tf_preflight.tf_preflight_input_problems


# -- tf_worker_base_dir on the host (issue 24, point 11) -------------------------------


def _state(path: Path) -> dict[str, Any]:
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_base_dir import base_dir_state

    return base_dir_state(str(path))


def test_a_new_base_dir_under_a_writable_parent_passes(tmp_path: Path) -> None:
    state = _state(tmp_path / "new" / "tf")
    assert state["exists"] is False and state["parent"] == str(tmp_path)
    assert tf_preflight.tf_preflight_host_problems({"a": clean(base_dir_state=state)}, SPEC, 1024) == []


def test_a_base_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    [problem] = tf_preflight.tf_preflight_host_problems({"a": clean(base_dir_state=_state(tmp_path / "f"))}, SPEC, 1024)
    assert problem == f"host a: tf_worker_base_dir {tmp_path}/f exists and is not a directory; pick a directory of " \
        "its own for the runbook, e.g. ~/tf-runbook"


def test_a_shared_base_dir_with_other_files_is_refused_and_not_chmodded(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    for name in (".bashrc", "data", "runs"):
        (shared / name).mkdir()
    [problem] = tf_preflight.tf_preflight_host_problems({"a": clean(base_dir_state=_state(shared))}, SPEC, 1024)
    assert problem.startswith(
        f"host a: tf_worker_base_dir {shared} is shared (mode 0755) and holds files that are not the runbook's "
        "(.bashrc, data): the runbook makes its base directory private (0700)"
    )
    assert (shared.stat().st_mode & 0o777) == 0o755  # the probe only looked


@pytest.mark.parametrize(
    ("mode", "names"),
    [
        (0o755, []),  # empty: made private by the runbook, nobody else's files in it
        (0o755, ["runs", "venv", "job-archives", "wheelhouse", "worker-requirements.txt"]),  # the runbook's own
        (0o700, ["notes.txt"]),  # private already: its mode does not change
    ],
)
def test_a_base_dir_of_the_runbooks_own_or_already_private_passes(tmp_path: Path, mode: int, names: list[str]) -> None:
    base = tmp_path / "tf"
    base.mkdir()
    for name in names:
        (base / name).mkdir()
    base.chmod(mode)
    assert tf_preflight.tf_preflight_host_problems({"a": clean(base_dir_state=_state(base))}, SPEC, 1024) == []


def test_a_base_dir_of_another_user_is_refused_with_a_message() -> None:
    state = {"path": "/srv/tf", "user": "alice", "uid": 1000, "exists": True, "is_dir": True, "owner": "root",
             "owner_uid": 0, "mode": "0755"}
    [problem] = tf_preflight.tf_preflight_host_problems({"a": clean(base_dir_state=state)}, SPEC, 1024)
    assert problem.startswith(
        "host a: tf_worker_base_dir /srv/tf belongs to root (uid 0), not to the remote user alice (uid 1000)"
    )


def test_the_probe_reports_a_base_dir_of_another_user(tmp_path: Path) -> None:
    """Root gives a directory to nobody (65534); any other user finds / is root's."""
    other = tmp_path / "theirs"
    if os.geteuid() == 0:
        other.mkdir()
        os.chown(other, 65534, 65534)
        owner_uid = 65534
    else:
        other, owner_uid = Path("/"), 0
    state = tf_probe_host.probe_host([], str(other), "r1")["base_dir_state"]
    assert state["path"] == str(other) and state["exists"] and state["is_dir"]
    [problem] = tf_preflight.tf_preflight_host_problems({"a": clean(base_dir_state=state)}, SPEC, 1024)
    assert problem.startswith(f"host a: tf_worker_base_dir {other} belongs to ")
    assert f"(uid {owner_uid}), not to the remote user " in problem


def test_a_base_dir_the_user_cannot_create_is_refused() -> None:
    state = {"path": "/proc/tf", "user": "alice", "uid": 1000, "exists": False, "parent": "/proc", "parent_writable": False}
    [problem] = tf_preflight.tf_preflight_host_problems({"a": clean(base_dir_state=state)}, SPEC, 1024)
    assert problem.startswith("host a: tf_worker_base_dir /proc/tf does not exist and the remote user alice (uid 1000) "
                              "cannot create it (nearest existing parent: /proc)")


def test_a_runs_dir_of_another_user_is_refused_by_the_probe_and_left_alone(tmp_path: Path) -> None:
    """The launch makes each run's directory under runs/ and runs/ private: one that is
    not the remote user's fails the launch on that host after the others were deployed,
    so the preflight refuses it, naming host and path. Root gives runs/ to nobody (65534);
    any other user gets a runs/ that leads to / (the launch follows it), which is root's."""
    base = tmp_path / "tf"
    base.mkdir()
    runs = base / "runs"
    if os.geteuid() == 0:
        runs.mkdir()
        os.chown(runs, 65534, 65534)
        runs.chmod(0o755)
        owner_uid = 65534
    else:
        runs.symlink_to("/")
        owner_uid = 0
    before = runs.stat()
    state = tf_probe_host.probe_host([], str(base), "r1")["base_dir_state"]
    assert state["runs"] == {"is_dir": True, "owner_uid": owner_uid, "owner": state["runs"]["owner"]}
    [problem] = tf_preflight.tf_preflight_host_problems({"a": clean(base_dir_state=state)}, SPEC, 1024)
    assert problem.startswith(
        f"host a: {base}/runs, where the runbook keeps its runs, belongs to {state['runs']['owner']} "
        f"(uid {owner_uid}), not to the remote user {state['user']} (uid {os.geteuid()}): each run's directory "
        "is made there"
    )
    assert runs.stat() == before  # the probe only looked


@pytest.mark.parametrize(
    ("runs", "expected"),
    [
        ({"is_dir": True, "owner_uid": 1000, "owner": "alice"}, None),
        ({"is_dir": False, "owner_uid": 1000, "owner": "alice"}, "/srv/tf/runs, where the runbook keeps its runs, "
                                                                  "exists and is not a directory; move it away"),
        ({"is_dir": True, "owner_uid": 0, "owner": "root"}, "/srv/tf/runs, where the runbook keeps its runs, belongs "
                                                           "to root (uid 0), not to the remote user alice (uid 1000)"),
        ({"error": "Permission denied"}, "/srv/tf/runs, where the runbook keeps its runs, cannot be read: "
                                         "Permission denied"),
    ],
)
def test_the_base_dirs_runs_must_be_a_directory_of_the_user(runs: dict[str, Any], expected: str | None) -> None:
    state = {"path": "/srv/tf", "user": "alice", "uid": 1000, "exists": True, "is_dir": True, "owner": "alice",
             "owner_uid": 1000, "mode": "0700", "foreign_count": 0, "foreign": [], "runs": runs}
    problems = tf_preflight.tf_preflight_host_problems({"a": clean(base_dir_state=state)}, SPEC, 1024)
    if expected is None:
        assert problems == []
    else:
        [problem] = problems
        assert problem.startswith(f"host a: {expected}"), problem


def test_a_runs_file_is_refused_by_the_probe(tmp_path: Path) -> None:
    base = tmp_path / "tf"
    base.mkdir()
    (base / "runs").write_text("not a directory")
    state = tf_probe_host.probe_host([], str(base), "r1")["base_dir_state"]
    [problem] = tf_preflight.tf_preflight_host_problems({"a": clean(base_dir_state=state)}, SPEC, 1024)
    assert problem == (f"host a: {base}/runs, where the runbook keeps its runs, exists and is not a directory; "
                       "move it away or pick another tf_worker_base_dir")


# -- what the collect brings back, checked before the run ---------------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"tf_collect_files": ["worker.log", "exit.json", "tf_config.json", "*.csv"]}, []),
        ({"tf_collect_files": ["*.log", "*.json"], "tf_collect_artifacts": ["out/*.png", "model", "a..b"]}, []),
        ({"tf_collect_files": ["worker.log", "exit.json", "tf_config.json", "out/metrics.csv"]},
         ["tf_collect_files entry 'out/metrics.csv' is not a file name: its entries match the names of the files in "
          "each worker directory (paths below it go in tf_collect_artifacts)"]),
        ({"tf_collect_files": ["metrics.csv"]},
         ["tf_collect_files leaves out worker.log, exit.json, tf_config.json, which the verdict reads from every "
          "worker: keep the default list and add your own files to tf_collect_artifacts"]),
        ({"tf_collect_artifacts": ["../../etc/passwd", "/etc/hosts", "~/.ssh/id_rsa", "logs/../x"]},
         [f"tf_collect_artifacts entry {entry!r} must be a path relative to each worker directory, without '..': "
          "nothing outside it is collected" for entry in ("../../etc/passwd", "/etc/hosts", "~/.ssh/id_rsa", "logs/../x")]),
    ],
)
def test_collect_patterns_that_cannot_match_or_drop_the_verdicts_records_are_refused(values: dict, expected: list) -> None:
    assert [p for p in tf_preflight.input_problems(values) if "tf_collect" in p] == expected


def test_an_empty_startup_pattern_and_a_restart_on_operator_are_refused() -> None:
    """An empty pattern matches any line (every worker joined at its first line); an
    operator's stop is never restarted, so listing it could only mislead."""
    [empty] = tf_preflight.input_problems({"tf_startup_pattern": ""})
    assert empty.startswith("tf_startup_pattern must not be empty: it would match any line")
    assert tf_preflight.input_problems({"tf_startup_pattern": "cluster_workers="}) == []
    [operator] = tf_preflight.input_problems({"tf_restart_on": ["preempted", "operator"]})
    assert operator.startswith("tf_restart_on holds operator, which is never restarted")
    assert tf_preflight.input_problems({"tf_restart_on": ["preempted", "killed"]}) == []
    assert tf_preflight.input_problems({"tf_restart_on": []}) == []
    [named] = tf_preflight.tf_preflight_input_problems({}, "w0", {"w1": {"tf_restart_on": ["operator"]}}, 2)
    assert named.startswith("host w1: tf_restart_on holds operator")


def test_the_collect_patterns_are_checked_on_every_host() -> None:
    problems = tf_preflight.tf_preflight_input_problems({}, "w0", {"w0": {}, "w1": {"tf_collect_artifacts": ["/x"]}})
    assert problems == ["host w1: tf_collect_artifacts entry '/x' must be a path relative to each worker directory, "
                        "without '..': nothing outside it is collected"]


# -- tf_worker_python and tf_checkpoint_dir on the host, looked at by the probe -------------


def test_the_probe_looks_up_the_worker_interpreter_without_running_it(tmp_path: Path) -> None:
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)
    assert tf_probe_interpreter.interpreter_state("") == {}
    assert tf_probe_interpreter.interpreter_state(str(tmp_path / "none")) == {
        "path": str(tmp_path / "none"), "exists": False, "is_file": False, "executable": False}
    assert tf_probe_interpreter.interpreter_state(str(script))["executable"] is False
    script.chmod(0o755)
    assert tf_probe_interpreter.interpreter_state(str(script)) == {"path": str(script), "exists": True, "is_file": True,
                                                     "executable": True}
    assert tf_probe_interpreter.interpreter_state(str(tmp_path))["is_file"] is False
    assert tf_probe_interpreter.interpreter_state("sh")["found"] == shutil.which("sh")
    assert tf_probe_interpreter.interpreter_state("no-such-python-3.99") == {"path": "no-such-python-3.99", "found": ""}


def test_the_probe_runs_the_worker_interpreter_as_python_3(tmp_path: Path) -> None:
    """Where its versions are not read (a cluster of one host), the file the lookup found
    is run once, through the probe's runner: an executable that is not Python 3 is named
    before the launch."""
    run = module_runner()
    assert tf_probe_interpreter.interpreter_python3(sys.executable, run) == ("%d.%d.%d" % sys.version_info[:3], "")

    text = tmp_path / "notes"
    text.write_text("not a program\n")
    text.chmod(0o755)
    assert tf_probe_interpreter.interpreter_python3(str(text), run) == ("", "it cannot be executed: Exec format error")
    assert tf_probe_interpreter.interpreter_python3("/bin/false", run) == ("", "it exited with status 1, saying nothing")
    version, fault = tf_probe_interpreter.interpreter_python3(shutil.which("bash") or "/bin/bash", run)
    assert version == "" and "syntax error" in fault, fault

    def script(name: str, body: str) -> str:
        path = tmp_path / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
        return str(path)

    assert tf_probe_interpreter.interpreter_python3(script("py2", "echo python 2.7.18"), run) == ("", "it is Python 2.7.18")
    assert tf_probe_interpreter.interpreter_python3(script("echo", 'echo "$@"'), run) == (
        "", "it printed " + repr("-c " + tf_probe_interpreter.PYTHON3_CODE) + " for its version")
    assert tf_probe_interpreter.interpreter_python3(script("mute", "exit 0"), run) == ("", "it printed nothing for its version")
    started = time.monotonic()
    hung = script("hung", "exec sleep 60")
    assert tf_probe_interpreter.interpreter_python3(hung, run, timeout=0.5) == ("", f"{hung} timed out after 0.5 seconds")
    assert time.monotonic() - started < 10


def test_the_probe_runs_only_the_interpreter_the_lookup_found(tmp_path: Path) -> None:
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)
    assert tf_probe_interpreter.interpreter_file(tf_probe_interpreter.interpreter_state(str(script))) == ""
    assert tf_probe_interpreter.interpreter_file(tf_probe_interpreter.interpreter_state(str(tmp_path / "none"))) == ""
    assert tf_probe_interpreter.interpreter_file(tf_probe_interpreter.interpreter_state("no-such-python-3.99")) == ""
    assert tf_probe_interpreter.interpreter_file(tf_probe_interpreter.interpreter_state("sh")) == shutil.which("sh")
    script.chmod(0o755)
    assert tf_probe_interpreter.interpreter_file(tf_probe_interpreter.interpreter_state(str(script))) == str(script)


def test_the_probe_tells_whether_the_checkpoint_dir_can_be_made(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    assert tf_probe_host.checkpoint_state("") == {}
    assert tf_probe_host.checkpoint_state(str(tmp_path)) == {"path": str(tmp_path), "exists": True, "is_dir": True,
                                                      "writable": True}
    assert tf_probe_host.checkpoint_state(str(tmp_path / "file"))["is_dir"] is False
    assert tf_probe_host.checkpoint_state(str(tmp_path / "new" / "ckpt")) == {
        "path": str(tmp_path / "new" / "ckpt"), "exists": False, "parent": str(tmp_path), "parent_writable": True}


def test_two_inventory_hosts_that_are_one_machine_with_one_base_dir_are_refused(tmp_path: Path) -> None:
    """The identity is the same for one base directory (existing or not yet), and differs
    for another directory or another path under the same existing parent."""
    base = tmp_path / "tf-runbook"
    base.mkdir()
    same = tf_probe_host.base_dir_identity(str(base))
    assert same and same == tf_probe_host.base_dir_identity(str(tmp_path / "." / "tf-runbook"))
    assert tf_probe_host.base_dir_identity(str(tmp_path / "new" / "base")) == tf_probe_host.base_dir_identity(
        str(tmp_path / "new" / "base"))
    assert tf_probe_host.base_dir_identity(str(tmp_path / "new" / "base")) != tf_probe_host.base_dir_identity(
        str(tmp_path / "new" / "other"))
    assert tf_probe_host.base_dir_identity(str(tmp_path / "other")) != same
    assert tf_probe_host.base_dir_identity(str(base), proc=str(tmp_path / "no-proc")) == ""
    probes = {"w0": clean(base_dir_identity=same, base_dir="/root/tf-runbook"),
              "w1": clean(base_dir_identity=same, base_dir="/root/tf-runbook"),
              "w2": clean(base_dir_identity="other"), "w3": clean(base_dir_identity="")}
    assert tf_preflight.tf_preflight_host_problems(probes, SPEC, 1024) == [
        "hosts w0, w1 are one machine with one tf_worker_base_dir (/root/tf-runbook): their runs would share its "
        "directories; list the machine once, with tf_worker_slots for more workers, or give each host a "
        "tf_worker_base_dir of its own"
    ]
    assert tf_preflight.tf_preflight_host_problems({"w0": probes["w0"], "w2": probes["w2"]}, SPEC, 1024) == []


def test_the_probe_tells_a_checkpoint_dir_inside_the_runs_directory(tmp_path: Path) -> None:
    """The runs directory under tf_worker_base_dir holds every run's own directory: a
    checkpoint directory in it (an earlier run's, the runs directory itself, one reached
    through a symlink) would mix with or take over a run's files."""
    base = tmp_path / "base"
    earlier = base / "runs" / "base1" / "checkpoints"
    earlier.mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(base / "runs" / "base1")
    runs = str(base / "runs")
    assert tf_probe_host.checkpoint_state(str(earlier), str(base))["runs_dir"] == runs
    assert tf_probe_host.checkpoint_state(str(base / "runs"), str(base))["runs_dir"] == runs
    assert tf_probe_host.checkpoint_state(str(base / "runs" / "new" / "ckpt"), str(base))["runs_dir"] == runs
    assert tf_probe_host.checkpoint_state(str(link), str(base))["runs_dir"] == runs
    assert "runs_dir" not in tf_probe_host.checkpoint_state(str(base / "ckpt"), str(base))
    assert "runs_dir" not in tf_probe_host.checkpoint_state(str(base / "runs-old"), str(base))
    assert "runs_dir" not in tf_probe_host.checkpoint_state(str(tmp_path / "elsewhere"), str(base))
    assert "runs_dir" not in tf_probe_host.checkpoint_state(str(earlier))


@pytest.mark.parametrize(
    ("field", "state", "expected"),
    [
        ("interpreter_state", {"path": "/v/bin/python", "exists": True, "is_file": True, "executable": True}, None),
        ("interpreter_state", {"path": "/v/bin/python", "exists": False, "is_file": False, "executable": False},
         "host a: tf_worker_python /v/bin/python does not exist there"),
        ("interpreter_state", {"path": "/v/bin/python", "exists": True, "is_file": True, "executable": False},
         "host a: tf_worker_python /v/bin/python is not an executable file there"),
        ("interpreter_state", {"path": "/v/bin", "exists": True, "is_file": False, "executable": False},
         "host a: tf_worker_python /v/bin is not an executable file there"),
        ("interpreter_state", {"path": "python3.99", "found": ""},
         "host a: tf_worker_python 'python3.99' is not found on the remote user's PATH there; give the "
         "interpreter's full path"),
        ("interpreter_state", {"path": "python3", "found": "/usr/bin/python3"}, None),
        ("interpreter_state", {"path": "/v/bin/python", "exists": True, "is_file": True, "executable": True,
                               "python": "3.11.2"}, None),
        ("interpreter_state", {"path": "/v/bin/tool", "exists": True, "is_file": True, "executable": True,
                               "fault": "it cannot be executed: Exec format error"},
         "host a: tf_worker_python /v/bin/tool does not run as Python 3: it cannot be executed: Exec format error"),
        ("interpreter_state", {"path": "python2", "found": "/usr/bin/python2", "fault": "it is Python 2.7.18"},
         "host a: tf_worker_python 'python2' (/usr/bin/python2) does not run as Python 3: it is Python 2.7.18"),
        ("checkpoint_state", {"path": "/c", "exists": True, "is_dir": True, "writable": True}, None),
        ("checkpoint_state", {"path": "/c", "exists": True, "is_dir": False, "writable": True},
         "host a: tf_checkpoint_dir /c exists and is not a directory"),
        ("checkpoint_state", {"path": "/c", "exists": True, "is_dir": True, "writable": False},
         "host a: tf_checkpoint_dir /c is not writable by the remote user there"),
        ("checkpoint_state", {"path": "/data/c", "exists": False, "parent": "/data", "parent_writable": False},
         "host a: tf_checkpoint_dir /data/c does not exist and the remote user cannot create it (nearest existing "
         "parent: /data)"),
        ("checkpoint_state", {"path": "/data/c", "exists": False, "parent": "/data", "parent_writable": True}, None),
        ("checkpoint_state", {"path": "/h/tf-runbook/runs/base1", "exists": True, "is_dir": True, "writable": True,
                              "runs_dir": "/h/tf-runbook/runs"},
         "host a: tf_checkpoint_dir /h/tf-runbook/runs/base1 is inside /h/tf-runbook/runs, where every run keeps its "
         "own directory: its backups would mix with a run's files, or take over another run's; choose a directory "
         "outside it (empty: each run keeps them in its own directory)"),
    ],
)
def test_a_worker_interpreter_or_checkpoint_dir_the_host_cannot_serve_is_refused(
    field: str, state: dict, expected: str | None
) -> None:
    problems = tf_preflight.tf_preflight_host_problems({"a": clean(**{field: state})}, SPEC, 1024)
    assert problems == ([expected] if expected else [])
