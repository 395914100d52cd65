"""The shared test helpers (tests/helpers.py) do what the integration tests rely on."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

import helpers


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_port_held_takes_the_port_and_gives_it_back() -> None:
    port = free_port()
    with helpers.port_held(port, "127.0.0.1") as holder:
        assert helpers.pid_running(holder.pid)
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) == 0
    assert holder.returncode is not None and not helpers.pid_running(holder.pid)


def test_tree_digest_sees_every_file_and_every_change(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x").write_text("1")
    (tmp_path / "y").write_text("2")
    before = helpers.tree_digest(tmp_path)
    assert sorted(before) == ["a/x", "y"]
    (tmp_path / "y").write_text("3")
    assert helpers.tree_digest(tmp_path)["y"] != before["y"]


def test_proc_stat_reads_this_process() -> None:
    stat = helpers.proc_stat(os.getpid())
    assert stat is not None
    comm, fields = stat
    assert comm.endswith(")") and int(fields[1]) == os.getppid() and int(fields[2]) == os.getpgrp()
    assert os.getpid() in helpers.processes()
    assert helpers.proc_stat(2**22 + 1) is None


def test_the_playbook_argv_names_inventory_and_extra_vars() -> None:
    argv = helpers.playbook_argv("train.yml", "--check", inventory=Path("/i"), extra={"tf_run_id": "r"})
    assert argv == [str(Path(sys.executable).with_name("ansible-playbook")), "train.yml", "-i", "/i",
                    "-e", '{"tf_run_id": "r"}', "--check"]  # fmt: skip
    assert helpers.playbook_env()["ANSIBLE_CONFIG"] == str(helpers.REPO / "ansible.cfg")


def test_the_playbook_argv_takes_several_playbooks_as_one_run_of_arguments() -> None:
    # ansible-playbook takes its playbooks as one run of positional arguments: a second
    # playbook after the options would be refused.
    argv = helpers.playbook_argv(["a.yml", "b.yml"], "--check", inventory=Path("/i"))
    assert argv[1:] == ["a.yml", "b.yml", "-i", "/i", "--check"]


@pytest.mark.parametrize("path", sorted((helpers.REPO / "tests" / "integration").glob("*.py")), ids=lambda p: p.name)
def test_integration_tests_run_the_runbook_through_the_helpers(path: Path) -> None:
    # One playbook runner (helpers.run_playbook, start_playbook, playbook_argv): a test that
    # builds its own ansible-playbook command line or the clone's environment drifts from it.
    text = path.read_text()
    assert 'with_name("ansible-playbook")' not in text, path.name
    assert 'ANSIBLE_CONFIG=str(REPO / "ansible.cfg")' not in text, path.name


PLAYBOOK_OUTPUT = """PLAY [Preflight] ***
TASK [tf_preflight : Connect to every peer] ***
ok: [h0]
TASK [tf_preflight : End the probe listeners that outlived their host's connect] ***
ok: [h1] => (item=h2)
ok: [h1] => (item=h3)

TASK [tf_preflight : Refuse the run for what failed in the probe] ***
skipping: [h0]
PLAY [Launch] ***
"""


def test_task_output_is_the_named_tasks_results_only() -> None:
    stopped = helpers.task_output(PLAYBOOK_OUTPUT, "End the probe listeners that outlived their host's connect")
    assert "(item=h2)" in stopped and "(item=h3)" in stopped
    assert "Refuse" not in stopped and "skipping" not in stopped
    assert helpers.task_output(PLAYBOOK_OUTPUT, "Refuse the run for what failed in the probe").strip() == (
        "] ***\nskipping: [h0]")


def test_task_output_fails_when_the_task_did_not_run() -> None:
    """A check of a renamed task's output must fail, never pass on an empty string."""
    renamed = PLAYBOOK_OUTPUT.replace("End the probe listeners", "Stop the probe listeners")
    with pytest.raises(AssertionError, match="no task \"End the probe listeners that outlived their host's connect\""):
        helpers.task_output(renamed, "End the probe listeners that outlived their host's connect")


def test_wait_until_returns_the_first_true_value_and_fails_naming_what_it_awaited() -> None:
    answers = iter([None, 0, "", {"port": 1}])
    assert helpers.wait_until(lambda: next(answers), 5, "a port", interval=0) == {"port": 1}
    with pytest.raises(AssertionError, match=r"the sky to fall: not within 0.05 s"):
        helpers.wait_until(lambda: False, 0.05, "the sky to fall")


def test_tcp_server_side_sees_what_the_server_has_not_read_and_when_it_closed() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        try:
            client.sendall(b"abc")
            peer = client.getsockname()[1]
            assert helpers.wait_until(lambda: (helpers.tcp_server_side(port, peer) or {}).get("unread") == 3, 5,
                                      "three bytes queued")  # fmt: skip
            conn, _ = server.accept()
            assert conn.recv(3) == b"abc"
            assert helpers.tcp_server_side(port, peer) == {"state": 1, "unread": 0}
            assert not helpers.server_closed(port, peer)
            client.shutdown(socket.SHUT_WR)  # the client closes first: the server's side waits
            assert helpers.wait_until(lambda: (helpers.tcp_server_side(port, peer) or {}).get("state") == 8, 5,
                                      "close-wait")  # fmt: skip
            assert not helpers.server_closed(port, peer)
            conn.close()
            assert helpers.wait_until(lambda: helpers.server_closed(port, peer), 5, "the server's close")
        finally:
            client.close()
