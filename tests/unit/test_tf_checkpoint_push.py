"""The sidecar evaluator's checkpoints (issue 41): the chief's supervisor pushes them to
the evaluator's over TCP (roles/tf_worker/files/tf_checkpoint_push.py), a local pair in
one process here."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import load_module

KEY = b"k" * 32


@pytest.fixture
def push(supervisor_path: Path) -> ModuleType:
    load_module("tf_supervisor", supervisor_path)  # puts the shared modules on the path
    return load_module("tf_checkpoint_push", supervisor_path.parent / "tf_checkpoint_push.py")


def backup(root: Path, epoch: int, keep_previous: bool = True) -> None:
    """A backup of the default job's layout: a new directory, then ``latest`` naming it."""
    target = root / "worker-0" / f"epoch-{epoch}-x"
    target.mkdir(parents=True)
    (target / "latest.weights.h5").write_bytes(bytes([epoch]) * (3000 + epoch))
    names = [f"{epoch} epoch-{epoch}-x"] + ([f"{epoch - 1} epoch-{epoch - 1}-x"] if keep_previous and epoch > 1 else [])
    (root / "worker-0" / "latest").write_text("".join(n + "\n" for n in names))
    for old in (root / "worker-0").glob("epoch-*"):
        if old.name not in {n.split()[1] for n in names}:
            for f in old.iterdir():
                f.unlink()
            old.rmdir()


class Pair:
    """A receiver serving a local port, and a pusher aimed at it."""

    def __init__(self, push: ModuleType, chief: Path, evaluator: Path, run_id: str = "run1", key: bytes = KEY) -> None:
        server = socket.create_server(("127.0.0.1", 0))
        self.port = server.getsockname()[1]
        self.receiver = push.Receiver(server, evaluator, KEY, "run1")
        self.receiver.start()
        self.pusher = push.Pusher(chief, ("127.0.0.1", self.port), key, run_id)

    def close(self) -> None:
        self.receiver.close()


@pytest.fixture
def pair(push: ModuleType, tmp_path: Path) -> Any:
    made: list[Pair] = []

    def make(**kwargs: Any) -> Pair:
        made.append(Pair(push, tmp_path / "chief", tmp_path / "evaluator", **kwargs))
        return made[-1]

    (tmp_path / "chief").mkdir()
    yield make
    for p in made:
        p.close()


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_each_checkpoint_arrives_whole_pointers_last_and_pruned_as_the_chief_prunes(pair: Any, tmp_path: Path) -> None:
    p = pair()
    chief, evaluator = tmp_path / "chief", tmp_path / "evaluator"
    (chief / ".tf-runbook-owner.json").write_text("{}")
    assert p.pusher.push() is True and p.pusher.pushes == 0  # no pointer yet: nothing to push
    for epoch in (1, 2, 3):
        backup(chief, epoch)
        assert p.pusher.push() is True, p.pusher.last_error
        without_own = {k: v for k, v in tree(chief).items() if not k.startswith(".tf-runbook-")}
        assert tree(evaluator) == without_own
    # Only the new files travel: the third push carried epoch 3's weights, not epoch 2's again.
    assert p.pusher.pushes == 3 and p.receiver.received == 3
    assert not (evaluator / "worker-0" / "epoch-1-x").exists()
    assert p.pusher.push() is True and p.pusher.pushes == 3  # the same pointer: nothing new
    assert p.pusher.finish(0, seconds=5) is True
    assert p.receiver.ended is not None and p.receiver.ended[0] == 0
    assert not list(evaluator.glob(".tf-runbook-staging-*"))


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [({"key": b"x" * 32}, "bad signature"), ({"run_id": "run2"}, "another run's push")],
)
def test_a_push_not_signed_with_the_runs_key_and_id_is_refused(pair: Any, tmp_path: Path, kwargs: dict, why: str) -> None:
    p = pair(**kwargs)
    backup(tmp_path / "chief", 1)
    assert p.pusher.push() is False
    assert why in p.pusher.last_error and why in p.receiver.refused[-1]
    assert not (tmp_path / "evaluator").exists() or tree(tmp_path / "evaluator") == {}
    assert p.receiver.ended is None


def test_a_replayed_message_changes_nothing(push: ModuleType, pair: Any, tmp_path: Path) -> None:
    p = pair()
    backup(tmp_path / "chief", 1)
    header = p.pusher.header("push", [], {}, [])
    pointers: dict[str, bytes] = {}
    assert push.send_message(("127.0.0.1", p.port), KEY, header, tmp_path / "chief", pointers) == "OK"
    assert push.send_message(("127.0.0.1", p.port), KEY, header, tmp_path / "chief", pointers).startswith("NO an old")


def test_a_transfer_cut_short_leaves_no_pointer_and_no_staging(push: ModuleType, pair: Any, tmp_path: Path) -> None:
    p = pair()
    chief, evaluator = tmp_path / "chief", tmp_path / "evaluator"
    backup(chief, 1)
    pointers = push.read_pointers(chief)
    tree_now = push.tree_files(chief)
    files = [[n, s.st_size] for n, s in sorted(tree_now.items()) if not push.is_pointer(n)]
    header = p.pusher.header("push", files, pointers, sorted(tree_now))
    line, _body = push.header_line(KEY, header)
    with socket.create_connection(("127.0.0.1", p.port)) as conn:
        conn.sendall(line + b"\0" * 100)  # the header, then part of the first file: cut
    deadline = time.monotonic() + 10
    while not p.receiver.refused and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "cut short" in p.receiver.refused[-1]
    assert not (evaluator / "worker-0" / "latest").exists()
    assert not list(evaluator.glob(".tf-runbook-staging-*"))
    # A whole push afterwards takes.
    assert p.pusher.push() is True and (evaluator / "worker-0" / "latest").exists()


def test_files_whose_bytes_are_not_the_signed_ones_are_not_swapped_in(push: ModuleType, pair: Any, tmp_path: Path) -> None:
    """The header is signed, the bytes after it are not the ones the trailer covers: refused."""
    p = pair()
    chief, evaluator = tmp_path / "chief", tmp_path / "evaluator"
    (chief / "latest").write_text("1 a\n")
    header = p.pusher.header("push", [], {"latest": b"1 a\n"}, ["latest"])
    line, _body = push.header_line(KEY, header)
    with socket.create_connection(("127.0.0.1", p.port)) as conn:
        conn.sendall(line + b"9 z\n" + b"0" * 64 + b"\n")
        conn.shutdown(socket.SHUT_WR)
        assert push.read_line(conn, 512).startswith(b"NO bad trailer")
    assert not (evaluator / "latest").exists()


@pytest.mark.parametrize("name", ["/etc/passwd", "../x", "a/../../x", ".tf-runbook-owner.json", "a//b", ""])
def test_a_name_outside_the_checkpoint_directory_is_refused(push: ModuleType, name: str) -> None:
    with pytest.raises(push.Refused, match="bad file name"):
        push.safe_name(name)


def test_a_directory_both_hosts_share_is_left_as_it_is(push: ModuleType, tmp_path: Path) -> None:
    """tf_checkpoint_dir on one export: the receiver finds the sender's marker in its own
    directory and swaps nothing in; the marker goes with the sender's end."""
    shared = tmp_path / "shared"
    shared.mkdir()
    server = socket.create_server(("127.0.0.1", 0))
    receiver = push.Receiver(server, shared, KEY, "run1")
    receiver.start()
    pusher = push.Pusher(shared, ("127.0.0.1", server.getsockname()[1]), KEY, "run1")
    try:
        pusher.start()
        backup(shared, 1)
        before = tree(shared)
        assert pusher.push() is True and receiver.shared is True and receiver.received == 1
        assert tree(shared) == before
        assert pusher.finish(0, seconds=5) is True and receiver.ended is not None
        assert not list(shared.glob(".tf-runbook-push-*"))
    finally:
        receiver.close()


def test_the_chiefs_end_is_said_once_to_an_evaluator_that_is_gone(push: ModuleType, tmp_path: Path) -> None:
    """Nothing listens on the evaluator's port (it failed): one try, not END_SECONDS of
    them; the chief's supervisor does not outlive its job for it."""
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    (tmp_path / "chief").mkdir()
    backup(tmp_path / "chief", 1)
    pusher = push.Pusher(tmp_path / "chief", ("127.0.0.1", port), KEY, "run1")
    tries: list[str] = []
    push_once = pusher.push
    pusher.push = lambda kind="push", extra=None: tries.append(kind) or push_once(kind, extra)  # type: ignore[method-assign]
    assert pusher.finish(0, seconds=3) is False
    assert tries == ["end"] and pusher.gone and "ConnectionRefusedError" in pusher.last_error


def test_the_chiefs_end_is_said_once_to_an_evaluator_whose_host_does_not_answer(
    push: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The evaluator's host is cut off: its connect gets no answer. One try of
    CONNECT_SECONDS, not IO_SECONDS per try for END_SECONDS: the chief's supervisor must
    not outlive its job by a minute for an evaluator nobody can reach."""
    (tmp_path / "chief").mkdir()
    backup(tmp_path / "chief", 1)
    timeouts: list[float] = []

    def no_answer(address: tuple[str, int], timeout: float) -> socket.socket:
        timeouts.append(timeout)
        raise TimeoutError("timed out")

    monkeypatch.setattr(push.socket, "create_connection", no_answer)
    pusher = push.Pusher(tmp_path / "chief", ("127.0.0.1", 9), KEY, "run1")
    assert pusher.finish(0, seconds=30) is False
    assert timeouts == [push.CONNECT_SECONDS] and push.CONNECT_SECONDS < push.IO_SECONDS
    assert pusher.gone and "TimeoutError" in pusher.last_error
