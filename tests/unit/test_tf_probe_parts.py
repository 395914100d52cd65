"""The preflight probe is four dispatchers (issue 40, point 2), one module per job
(``tf_preflight_host``, ``tf_preflight_reach``, ``tf_preflight_stop``, ``tf_preflight_versions``):
each parses its options and calls the concerns in ``plugins/module_utils/tf_probe_*.py``. These
test the pieces the older tests (test_tf_probe.py, test_tf_preflight.py) reach only
through the module: the busy-port look, the one ``nearest_existing``, the host's look
with a fake command runner, and the dispatch itself."""

from __future__ import annotations

import ast
import os
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.tf_runbook.multiworker.plugins.module_utils import (
    tf_base_dir,
    tf_probe_addresses,
    tf_probe_host,
    tf_probe_listen,
    tf_probe_ports,
    tf_probe_reach,
)
from ansible_collections.tf_runbook.multiworker.plugins.modules import (
    tf_preflight_host,
    tf_preflight_reach,
    tf_preflight_stop,
    tf_preflight_versions,
)
from conftest import PLUGINS
from helpers import free_port, run_module

PROBE_MODULES = [tf_preflight_host, tf_preflight_reach, tf_preflight_stop, tf_preflight_versions]


def code_lines(path: Path) -> int:
    """Lines of ``path`` that are not its documentation blocks (DOCUMENTATION, EXAMPLES,
    RETURN and the module's docstring)."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    docs = 0
    for node in tree.body:
        is_doc = isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in ("DOCUMENTATION", "EXAMPLES", "RETURN") for t in node.targets
        )
        is_docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and node is tree.body[0]
        if is_doc or is_docstring:
            docs += (node.end_lineno or node.lineno) - node.lineno + 1
    return len(text.splitlines()) - docs


@pytest.mark.parametrize("module", PROBE_MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_each_probe_module_only_dispatches(module: Any) -> None:
    path = Path(module.__file__)
    assert code_lines(path) < 100
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assert [node.name for node in tree.body if isinstance(node, ast.FunctionDef)] == ["main"]
    # No mode: a module does one job; its options are that job's.
    assert "mode" not in module.ARGUMENT_SPEC


def test_the_reach_options_are_one_spec_for_the_reach_and_the_one_run_probe() -> None:
    reach = tf_preflight_host.ARGUMENT_SPEC["reach"]["options"]
    assert reach is tf_probe_reach.REACH_SPEC
    assert {k: v for k, v in tf_preflight_reach.ARGUMENT_SPEC.items() if k in reach} == reach
    # The host's own options are its look's; listening and reaching are suboptions apart.
    assert not set(reach) & set(tf_preflight_host.ARGUMENT_SPEC)
    assert set(tf_preflight_host.ARGUMENT_SPEC["listen"]["options"]) == {"peers", "lifetime"}
    # Reading the versions in the look takes the versions module's own options.
    assert tf_preflight_host.ARGUMENT_SPEC["versions"]["options"] is tf_preflight_versions.ARGUMENT_SPEC


def test_a_listener_nobody_must_reach_is_not_started(tmp_path: Path) -> None:
    """``listen.peers`` empty (no host must reach this one): the ports are looked at and
    nothing listens."""
    port = free_port()
    result = run_module(PLUGINS / "modules" / "tf_preflight_host.py",
                        {"me": "e", "run_id": "r1", "ports": [port], "base_dir": str(tmp_path),
                         "listen": {"peers": [], "lifetime": 30}})
    assert result["busy_ports"] == [] and result["listener_pid"] == 0 and result["listener_gone"] is True


def test_the_versions_module_asks_the_interpreter_and_refuses_none() -> None:
    path = PLUGINS / "modules" / "tf_preflight_versions.py"
    code = "import json, sys; print(json.dumps({'python': sys.version.split()[0]}))"
    result = run_module(path, {"python": sys.executable, "code": code})
    assert result["versions"]["python"] == sys.version.split()[0]
    result = run_module(path, {"python": "", "code": code})
    assert result["failed"] is True and "needs python" in result["msg"]


def test_the_stop_module_frees_the_ports_of_its_listener(tmp_path: Path) -> None:
    port = free_port()
    pid = tf_probe_listen.start_listener([port], ["never-comes"], 60, tf_probe_listen.probe_token("r1", "a"))
    result = run_module(PLUGINS / "modules" / "tf_preflight_stop.py",
                        {"ports": [port], "run_id": "r1", "me": "a", "listener_pid": pid})
    assert result.get("failed") is not True and result["released"] == []
    assert tf_probe_ports.bind_error(port) == 0


def test_a_taken_port_is_named_with_the_process_that_holds_it() -> None:
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        busy = tf_probe_ports.busy_ports([port])
    assert len(busy) == 1 and busy[0]["port"] == port and busy[0]["error"]
    assert busy[0]["pid"] == os.getpid()
    assert tf_probe_ports.busy_ports([port]) == []  # closed: free again


def test_nearest_existing_is_one_function_with_two_readings_of_a_dangling_link(tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "gone")
    inside = str(link / "a" / "b")
    # The base directory's rule (lstat): the link itself exists; the disk and the
    # identity of the probe (stat) need a path that can be followed: its parent.
    assert tf_base_dir.nearest_existing(inside) == str(link)
    assert tf_base_dir.nearest_existing(inside, follow_links=True) == str(tmp_path)
    assert tf_base_dir.nearest_existing("/") == "/"


class FakeRunner:
    """A Runner that records each command and answers from a table of argv[-1] prefixes."""

    def __init__(self, answers: dict[str, tuple[int, str, str]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], timeout: float) -> tuple[int, str, str]:
        self.calls.append(argv)
        for prefix, answer in self.answers.items():
            if argv[-1].startswith(prefix):
                return answer
        raise OSError(2, "No such file or directory")


def python3(tmp_path: Path) -> str:
    path = tmp_path / "python3"
    path.write_text("#!/bin/sh\n", encoding="utf-8")
    path.chmod(0o755)
    return str(path)


def test_the_host_look_runs_a_named_interpreter_once_when_its_versions_are_not_read(tmp_path: Path) -> None:
    run = FakeRunner({"import sys": (0, "python 3.11.2", "")})
    seen = tf_probe_host.look_host(run, [], str(tmp_path / "base"), "r1", interpreter=python3(tmp_path),
                                   addresses=["127.0.0.1", "localhost"])
    assert seen["interpreter_state"]["python"] == "3.11.2"
    assert [argv[1] for argv in run.calls if argv[0] == python3(tmp_path)] == ["-c"]
    # The names it resolved go back, not the IP addresses (which stand for themselves).
    assert list(seen["resolved"]) == ["localhost"] and "127.0.0.1" in seen["resolved"]["localhost"]
    assert "127.0.0.1" in seen["sources"]
    assert seen["checkpoint_state"] == {} and "versions" not in seen
    assert seen["busy_ports"] == [] and seen["run_launched"] == "" and seen["free_mb"] > 0


def test_the_host_look_reads_the_versions_instead_where_it_is_given_python(tmp_path: Path) -> None:
    run = FakeRunner({"print": (0, '{"python": "3.12.1"}', "")})
    seen = tf_probe_host.look_host(run, [], str(tmp_path), "r1", interpreter=python3(tmp_path),
                                   python=python3(tmp_path), versions_code="print(1)",
                                   checkpoint_dir=str(tmp_path / "ckpt"))
    assert seen["versions"] == {"python": "3.12.1"}
    assert "python" not in seen["interpreter_state"] and "fault" not in seen["interpreter_state"]
    assert seen["checkpoint_state"]["exists"] is False and seen["checkpoint_state"]["parent"] == str(tmp_path)


def test_an_interpreter_that_is_not_python3_is_a_fault_of_the_look(tmp_path: Path) -> None:
    run = FakeRunner({"import sys": (0, "python 2.7.18", "")})
    seen = tf_probe_host.look_host(run, [], str(tmp_path), "r1", interpreter=python3(tmp_path))
    assert seen["interpreter_state"]["fault"] == "it is Python 2.7.18"


@pytest.mark.parametrize(
    ("address", "expected"),
    [("10.0.0.1", ["10.0.0.1"]), ("::1", ["::1"]), ("localhost", None), ("no-such-host.invalid", [])],
)
def test_addresses_resolve_here_and_literals_stand_for_themselves(address: str, expected: Any) -> None:
    resolved = tf_probe_addresses.resolve_addresses([address])
    if expected is None:
        assert resolved[address], resolved  # a name this host knows: at least one address
    else:
        assert resolved == {address: expected}
