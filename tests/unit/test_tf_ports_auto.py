"""tf_worker_port: auto (issue 41, hosts shared by runs): the pick of a block of ports, the
host's register of reservations under its lock, the listing of the runs alive, and the
cluster spec built again with the picked ports."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.tf_runbook.multiworker.plugins.filter.tf_cluster import (
    tf_cluster_ports,
    tf_cluster_spec,
    tf_ports_on,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_ports_auto
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_ports_auto import (
    HOLD,
    is_auto,
    live_runs,
    pick_block,
    release,
    reserve,
    run_line,
)

NOW = 1_765_000_000.0


def own(tmp_path: Path) -> Path:
    """This user's register under the prefix ``tmp_path / "ports"``."""
    return tmp_path / f"ports-{os.getuid()}"


def nothing_listens(port: int) -> bool:
    return False


def all_free(port: int) -> bool:
    return True


@pytest.mark.parametrize(
    ("count", "taken", "refused", "expected"),
    [
        (1, set(), set(), [20000]),
        (2, {20000}, set(), [20001, 20002]),
        # A block is consecutive: one taken port in it moves the whole block past it.
        (2, {20001}, set(), [20002, 20003]),
        (2, set(), {20001}, [20002, 20003]),
        (2, {20000, 20003}, {20005}, [20001, 20002]),
        # Nothing fits in the range.
        (2, {20001, 20003}, set(), []),
        (5, set(), set(), []),
    ],
)
def test_pick_block_takes_the_lowest_free_consecutive_ports(
    count: int, taken: set[int], refused: set[int], expected: list[int]
) -> None:
    assert pick_block(count, 20000, 20003, taken, lambda p: p not in refused) == expected


@pytest.mark.parametrize(("count", "first", "last"), [(0, 1, 5), (1, 0, 5), (1, 5, 4), (1, 65000, 65536)])
def test_pick_block_refuses_a_range_that_is_no_range(count: int, first: int, last: int) -> None:
    with pytest.raises(ValueError, match="cannot pick"):
        pick_block(count, first, last, set(), all_free)


@pytest.mark.parametrize(("value", "auto"), [("auto", True), ("AUTO", True), (" auto ", True), ("autox", False),
                                             (2222, False), ("2222", False), (None, False)])
def test_is_auto(value: Any, auto: bool) -> None:
    assert is_auto(value) is auto


def test_two_runs_reserving_at_once_get_different_ports(tmp_path: Path) -> None:
    registry = str(tmp_path / "ports")
    first = reserve(registry, "run-a", "w0", nothing_listens, all_free, count=2, first=20000, last=20010, now=NOW)
    second = reserve(registry, "run-b", "w0", nothing_listens, all_free, count=2, first=20000, last=20010, now=NOW)
    assert first == [20000, 20001]
    assert second == [20002, 20003]
    # Each user's register is their own (0755: every user reads it, its owner alone writes
    # it), and its files are readable.
    assert os.stat(own(tmp_path)).st_mode & 0o7777 == 0o755 and os.stat(own(tmp_path)).st_uid == os.getuid()
    assert os.stat(own(tmp_path) / ".lock").st_mode & 0o777 == 0o600
    record = json.loads((own(tmp_path) / "20002.json").read_text())
    assert record["run_id"] == "run-b" and record["host"] == "w0" and record["ports"] == [20002, 20003]


def _reserve_in_process(registry: str, run_id: str, queue: Any) -> None:
    queue.put(reserve(registry, run_id, "w0", nothing_listens, all_free, count=2, first=20000, last=20050))


def test_reservations_made_by_processes_at_the_same_time_never_overlap(tmp_path: Path) -> None:
    # The lock, not luck: eight processes started together (two preflights in one second).
    registry = str(tmp_path / "ports")
    queue: Any = multiprocessing.get_context("fork").Queue()
    procs = [multiprocessing.get_context("fork").Process(target=_reserve_in_process, args=(registry, f"r{i}", queue))
             for i in range(8)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(30)
    picked = [queue.get(timeout=5) for _ in procs]
    ports = [port for block in picked for port in block]
    assert len(ports) == 16 and len(set(ports)) == 16


def test_another_inventory_host_of_the_same_run_on_one_machine_gets_its_own_ports(tmp_path: Path) -> None:
    registry = str(tmp_path / "ports")
    assert reserve(registry, "run-a", "w0", nothing_listens, all_free, count=1, first=20000, last=20010) == [20000]
    assert reserve(registry, "run-a", "w1", nothing_listens, all_free, count=1, first=20000, last=20010) == [20001]


def test_the_same_run_and_host_keeps_its_ports_when_it_picks_again(tmp_path: Path) -> None:
    registry = str(tmp_path / "ports")
    reserve(registry, "run-a", "w0", nothing_listens, all_free, count=2, first=20000, last=20010, now=NOW)
    reserve(registry, "run-b", "w0", nothing_listens, all_free, count=1, first=20000, last=20010, now=NOW)
    # Its own reservation does not keep a run from its own ports, and nobody else got them.
    assert reserve(registry, "run-a", "w0", nothing_listens, all_free, count=2, first=20000, last=20010,
                   now=NOW + 5) == [20000, 20001]
    assert json.loads((own(tmp_path) / "20000.json").read_text())["since"] == NOW


def test_a_reservation_over_and_not_listened_on_is_picked_again(tmp_path: Path) -> None:
    registry = str(tmp_path / "ports")
    reserve(registry, "old", "w0", nothing_listens, all_free, count=1, first=20000, last=20010, now=NOW)
    later = NOW + HOLD + 1
    assert reserve(registry, "new", "w0", nothing_listens, all_free, count=1, first=20000, last=20010,
                   now=later) == [20000]
    # ... but not while TensorFlow listens on it, however old the reservation.
    reserve(registry, "long", "w0", nothing_listens, all_free, count=1, first=20001, last=20010, now=NOW)
    assert reserve(registry, "next", "w0", lambda p: p == 20001, lambda p: p != 20001, count=1, first=20001,
                   last=20010, now=later) == [20002]


def test_a_dry_run_picks_without_writing(tmp_path: Path) -> None:
    registry = str(tmp_path / "ports")
    assert reserve(registry, "run-a", "w0", nothing_listens, all_free, count=1, first=20000, last=20010,
                   write=False) == [20000]
    assert not own(tmp_path).exists()
    reserve(registry, "run-b", "w0", nothing_listens, all_free, count=1, first=20000, last=20010)
    assert reserve(registry, "run-a", "w0", nothing_listens, all_free, count=1, first=20000, last=20010,
                   write=False) == [20001]
    assert sorted(p.name for p in own(tmp_path).iterdir()) == [".lock", "20000.json"]


def test_given_ports_are_recorded_and_released(tmp_path: Path) -> None:
    registry = str(tmp_path / "ports")
    assert reserve(registry, "fixed", "w0", nothing_listens, all_free, ports=[2222, 2223], now=NOW) == [2222, 2223]
    runs = live_runs(registry, nothing_listens, now=NOW + 1)
    assert [(r["run_id"], r["ports"], r["state"]) for r in runs] == [("fixed", [2222, 2223], "reserved")]
    assert release(registry, "other", "w0") == []
    assert release(registry, "fixed", "w0") == [2222, 2223]
    assert live_runs(registry, nothing_listens, now=NOW + 1) == []


def test_live_runs_lists_each_run_with_its_user_since_and_ports(tmp_path: Path) -> None:
    registry = str(tmp_path / "ports")
    reserve(registry, "run-a", "w0", nothing_listens, all_free, count=2, first=20000, last=20010, now=NOW)
    reserve(registry, "run-b", "w0", nothing_listens, all_free, count=2, first=20000, last=20010, now=NOW + 1)
    reserve(registry, "gone", "w0", nothing_listens, all_free, count=1, first=20000, last=20010, now=NOW - HOLD - 9)
    runs = live_runs(registry, lambda p: p in (20000, 20001, 20002), now=NOW + 60)
    user = tf_ports_auto._user(os.getuid())
    assert [(r["run_id"], r["user"], r["since"], r["ports"], r["listening"], r["state"]) for r in runs] == [
        ("run-a", user, NOW, [20000, 20001], [20000, 20001], "running"),
        ("run-b", user, NOW + 1, [20002, 20003], [20002], "running"),
    ]
    assert run_line(runs[1], now=NOW + 125) == (
        f"w0: run run-b of {user}, running since 2025-12-06 05:46:41 UTC (2 min 4 s), ports 20002,20003")
    # A reattach asks for one run, over or not.
    every = live_runs(registry, nothing_listens, now=NOW + 60, every=True)
    assert {(r["run_id"], r["state"]) for r in every} == {("run-a", "reserved"), ("run-b", "reserved"),
                                                          ("gone", "ended")}


def test_the_register_ignores_files_that_are_not_reservations(tmp_path: Path) -> None:
    registry = own(tmp_path)
    registry.mkdir()
    (registry / "notes.txt").write_text("x")
    (registry / "20000.json").write_text("{not json")
    (registry / "20001.json").write_text("[1]")
    assert live_runs(str(tmp_path / "ports"), nothing_listens) == []
    assert reserve(str(tmp_path / "ports"), "r", "w0", nothing_listens, all_free, count=1, first=20000, last=20005) == [20000]


# --- the cluster spec with auto hosts -------------------------------------------------------


def hosts(*ports: Any, slots: int = 1) -> list[dict[str, Any]]:
    return [{"host": f"h{i}", "address": f"10.0.0.{i + 1}", "port": port, "slots": slots}
            for i, port in enumerate(ports)]


def test_an_auto_host_waits_for_its_ports_and_then_gets_every_check() -> None:
    spec = tf_cluster_spec(hosts("auto", 2222, slots=2))
    assert spec["auto"] == {"h0": 2}
    assert tf_ports_on(spec, "h0") == [] and tf_ports_on(spec, "h1") == [2222, 2223]
    done = tf_cluster_ports(spec, {"h0": [20004, 20005]}, resolver=lambda a: [a])
    assert "auto" not in done
    assert done["cluster"] == {"worker": ["10.0.0.1:20004", "10.0.0.1:20005", "10.0.0.2:2222", "10.0.0.2:2223"]}
    assert done == tf_cluster_spec(hosts(20004, 2222, slots=2))
    # A spec without auto hosts comes back as it is.
    assert tf_cluster_ports(done, {}) is done


def test_two_auto_hosts_of_one_address_are_checked_once_their_ports_are_known() -> None:
    entries = [{"host": "a", "address": "10.0.0.1", "port": "auto", "slots": 1},
               {"host": "b", "address": "10.0.0.1", "port": "auto", "slots": 1}]
    spec = tf_cluster_spec(entries)
    assert tf_cluster_ports(spec, {"a": [20000], "b": [20001]}, resolver=lambda a: [a])["size"] == 2
    with pytest.raises(AnsibleFilterError, match="endpoint 10.0.0.1:20000 is also used by host a"):
        tf_cluster_ports(spec, {"a": [20000], "b": [20000]}, resolver=lambda a: [a])


def test_a_spare_with_auto_ports_gets_them_too() -> None:
    entries = hosts(2222, "auto") + [{"host": "s", "address": "10.0.0.9", "port": "auto", "slots": 1, "spare": True}]
    spec = tf_cluster_spec(entries)
    assert spec["auto"] == {"h1": 1, "s": 1}
    done = tf_cluster_ports(spec, {"h1": [20000], "s": [20007]}, resolver=lambda a: [a])
    assert done["spares"][0]["endpoints"] == ["10.0.0.9:20007"]


@pytest.mark.parametrize("picked", [{}, {"h0": []}, {"h0": [1, 2]}, {"h0": 20000}])
def test_ports_missing_for_an_auto_host_are_refused_naming_it(picked: dict[str, Any]) -> None:
    spec = tf_cluster_spec(hosts("auto", 2222))
    with pytest.raises(AnsibleFilterError, match=r"host h0: tf_worker_port auto needs 1 port\(s\) picked"):
        tf_cluster_ports(spec, picked)


def test_a_word_that_is_not_auto_is_refused_naming_host_and_value() -> None:
    with pytest.raises(AnsibleFilterError, match="host h1: tf_worker_port must be an integer or auto, got 'autox'"):
        tf_cluster_spec(hosts(2222, "autox"))


def test_a_runs_ports_come_back_from_its_record() -> None:
    from ansible_collections.tf_runbook.multiworker.plugins.filter.tf_cluster import tf_cluster_host_ports

    done = tf_cluster_spec(hosts(20004, 2222, slots=2))
    recorded = tf_cluster_host_ports(done)
    assert recorded == {"h0": [20004, 20005], "h1": [2222, 2223]}
    # A resume of the auto run builds the same cluster (the same checksum) from the record.
    again = tf_cluster_ports(tf_cluster_spec(hosts("auto", 2222, slots=2)), recorded, resolver=lambda a: [a])
    assert again["checksum"] == done["checksum"]


def test_the_probes_pick_binds_for_real_and_says_when_nothing_fits(tmp_path: Path) -> None:
    import socket

    from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_ports_auto import host_ports

    registry = str(tmp_path / "ports")
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        # A port something listens on is passed over, and one it cannot fit is refused.
        picked = host_ports("r", "w0", 2, [port, 65535], [], True, registry)
        assert picked[0] > port and picked[1] == picked[0] + 1
        with pytest.raises(ValueError, match=rf"host w0: tf_worker_port auto found no 1 consecutive free port\(s\) "
                                             rf"in {port}..{port}"):
            host_ports("r2", "w0", 1, [port, port], [], True, registry)
    with pytest.raises(ValueError, match=r"must be \[first, last\] within 1..65535, got \[5\]"):
        host_ports("r3", "w0", 1, [5], [], True, registry)


def test_a_run_whose_controller_still_beats_keeps_its_ports_between_two_attempts(tmp_path: Path) -> None:
    # A run older than the hold, restarting: nothing listens for a moment, but the wait
    # renewed its heartbeat seconds ago, so another run's pick passes its ports over.
    registry = str(tmp_path / "ports")
    run_dir = tmp_path / "base" / "runs" / "long"
    run_dir.mkdir(parents=True)
    beat = run_dir / "controller.heartbeat"
    beat.write_text("")
    later = NOW + HOLD + 60
    os.utime(beat, (later - 5, later - 5))
    reserve(registry, "long", "w0", nothing_listens, all_free, count=1, first=20000, last=20010, now=NOW,
            run_dir=str(run_dir))
    assert reserve(registry, "new", "w0", nothing_listens, all_free, count=1, first=20000, last=20010,
                   now=later) == [20001]
    assert [r["state"] for r in live_runs(registry, nothing_listens, now=later) if r["run_id"] == "long"] == ["reserved"]
    # A heartbeat as old as the hold: the run is over, its port free again.
    os.utime(beat, (NOW, NOW))
    assert reserve(registry, "next", "w0", nothing_listens, all_free, count=1, first=20000, last=20010,
                   now=later) == [20000]


def test_a_spare_whose_ports_nobody_gave_is_left_out_and_a_worker_is_not() -> None:
    entries = hosts("auto", "auto") + [{"host": "s", "address": "10.0.0.9", "port": "auto", "slots": 1, "spare": True}]
    spec = tf_cluster_spec(entries)
    done = tf_cluster_ports(spec, {"h0": [20000], "h1": [20000]}, resolver=lambda a: [a])
    assert done["spares"] == [] and done["size"] == 2
    with pytest.raises(AnsibleFilterError, match=r"host h1: tf_worker_port auto needs 1 port\(s\) picked, got None"):
        tf_cluster_ports(spec, {"h0": [20000]}, resolver=lambda a: [a])


# --- a run's reservations end with it, and what the listings show ----------------------------


def test_a_run_that_ended_releases_its_reservations_and_is_no_longer_listed(tmp_path: Path) -> None:
    registry = str(tmp_path / "ports")
    done, other = tmp_path / "base" / "runs" / "done", tmp_path / "base" / "runs" / "other"
    reserve(registry, "done", "w0", nothing_listens, all_free, count=2, first=20000, last=20010, run_dir=str(done))
    reserve(registry, "done", "w1", nothing_listens, all_free, count=1, first=20000, last=20010, run_dir=str(done))
    reserve(registry, "other", "w0", nothing_listens, all_free, count=1, first=20000, last=20010, run_dir=str(other))
    assert sorted(r["run_id"] for r in live_runs(registry, nothing_listens)) == ["done", "done", "other"]
    # A port the run still listens on stays (a detached run collected while it trains).
    assert tf_ports_auto.release_run(str(done), lambda p: p == 20002, registry) == [20000, 20001]
    assert [(r["run_id"], r["ports"]) for r in live_runs(registry, lambda p: p == 20002)] == [
        ("done", [20002]), ("other", [20003])]
    assert tf_ports_auto.release_run(str(done), nothing_listens, registry) == [20002]
    assert [r["run_id"] for r in live_runs(registry, nothing_listens)] == ["other"]
    # Its ports are free for the next pick at once, not an hour later.
    assert reserve(registry, "next", "w0", nothing_listens, all_free, count=3, first=20000, last=20010) == [
        20000, 20001, 20002]
    # Nothing to release where this user has no register.
    assert tf_ports_auto.release_run(str(done), nothing_listens, str(tmp_path / "none")) == []


# --- no free port ---------------------------------------------------------------------------


def listeners_on_a_free_block(count: int) -> tuple[int, list[Any]]:
    """``count`` consecutive ports, each with a listening socket of this test on it."""
    import socket

    for start in range(39100, 39900, count + 1):
        socks = []
        try:
            for port in range(start, start + count):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("0.0.0.0", port))
                sock.listen(1)
        except OSError:
            for sock in socks:
                sock.close()
            continue
        return start, socks
    raise AssertionError("no block of free ports to hold on this machine")


def test_a_range_whose_every_port_is_held_refuses_the_run_naming_the_host_and_the_range(tmp_path: Path) -> None:
    """tf_worker_port_auto_first/last a few ports, all listened on: the preflight's pick
    refuses the host before anything is launched, naming the host, the range and what to
    do; nothing is reserved."""
    first, socks = listeners_on_a_free_block(3)
    try:
        with pytest.raises(ValueError) as refused:
            tf_ports_auto.host_ports("r", "node7", 1, [first, first + 2], [], True, str(tmp_path / "ports"))
    finally:
        for sock in socks:
            sock.close()
    assert str(refused.value) == (
        f"host node7: tf_worker_port auto found no 1 consecutive free port(s) in {first}..{first + 2} (each listened "
        "on, or reserved by another run: status.yml without -e tf_run_id lists the runs); widen "
        "tf_worker_port_auto_first..tf_worker_port_auto_last")
    assert live_runs(str(tmp_path / "ports"), nothing_listens) == []


# --- two users on one host --------------------------------------------------------------------


@pytest.fixture(scope="module")
def other_user() -> Any:
    """A throwaway Unix user (the tests run as root), removed afterwards."""
    import pwd
    import subprocess

    if os.getuid() != 0:
        pytest.fail("the two-user tests run as root (they create a user with useradd)")
    name = f"tfrbport{os.getpid() % 100000}"
    subprocess.run(["/usr/sbin/useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                   check=True, capture_output=True)  # fmt: skip
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["/usr/sbin/userdel", name], check=False, capture_output=True)


@pytest.fixture()
def shared_tmp() -> Any:
    """A directory both users reach, as /tmp (mode 1777)."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="tf-ports-users-", dir="/tmp"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _as_user(uid: int, gid: int, queue: Any, call: Any, *args: Any) -> None:
    """In a forked child: become the user, then call; the result (or the error) queued."""
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    try:
        queue.put(("ok", call(*args)))
    except Exception as exc:  # noqa: BLE001 - reported to the test
        queue.put(("error", f"{type(exc).__name__}: {exc}"))


def as_user(user: Any, call: Any, *args: Any, timeout: float = 30) -> tuple[str, Any]:
    context = multiprocessing.get_context("fork")
    queue: Any = context.Queue()
    proc = context.Process(target=_as_user, args=(user.pw_uid, user.pw_gid, queue, call, *args))
    proc.start()
    try:
        return queue.get(timeout=timeout)
    finally:
        proc.join(5)
        if proc.is_alive():
            proc.kill()


def _pick(registry: str, run_id: str) -> list[int]:
    return reserve(registry, run_id, "w0", nothing_listens, all_free, count=2, first=20000, last=20050)


def test_two_users_on_one_host_get_their_own_registers_and_different_ports(other_user: Any, shared_tmp: Path) -> None:
    registry = str(shared_tmp / "tf-runbook-ports")
    assert _pick(registry, "root-run") == [20000, 20001]
    status, picked = as_user(other_user, _pick, registry, "their-run")
    assert (status, picked) == ("ok", [20002, 20003])
    theirs = shared_tmp / f"tf-runbook-ports-{other_user.pw_uid}"
    assert theirs.stat().st_uid == other_user.pw_uid and theirs.stat().st_mode & 0o7777 == 0o755
    # Each user's listing shows both runs, by their owners.
    users = {r["run_id"]: r["user"] for r in live_runs(registry, nothing_listens)}
    assert users == {"root-run": "root", "their-run": other_user.pw_name}
    status, seen = as_user(other_user, live_runs, registry, nothing_listens)
    assert status == "ok" and sorted(r["run_id"] for r in seen) == ["root-run", "their-run"]
    # The other user cannot write (or corrupt) this user's register, nor release its runs.
    mine = shared_tmp / f"tf-runbook-ports-{os.getuid()}"
    before = (mine / "20000.json").read_text()
    status, _ = as_user(other_user, lambda: open(mine / "20000.json", "w"))
    assert status == "error"
    status, released = as_user(other_user, release, registry, "root-run", "w0")
    assert (status, released) == ("ok", [])
    assert (mine / "20000.json").read_text() == before


def test_another_users_lock_or_squatted_name_never_blocks_or_corrupts_a_pick(other_user: Any, shared_tmp: Path) -> None:
    import fcntl

    registry = str(shared_tmp / "tf-runbook-ports")
    assert _pick(registry, "root-run") == [20000, 20001]
    # This user holds its own lock for as long as it likes: the other user's pick goes on.
    lock = os.open(shared_tmp / f"tf-runbook-ports-{os.getuid()}" / ".lock", os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert as_user(other_user, _pick, registry, "their-run", timeout=20) == ("ok", [20002, 20003])
    finally:
        os.close(lock)
    # A register named for a user but owned by another (or a link) is neither used nor read.
    fake = shared_tmp / "tf-runbook-ports-4242"
    fake.mkdir()
    (fake / "20004.json").write_text(json.dumps({"run_id": "forged", "host": "w0", "since": 0}))
    assert "forged" not in {r["run_id"] for r in live_runs(registry, nothing_listens)}
    squatted = str(shared_tmp / "squat")
    os.symlink(str(fake), f"{squatted}-{other_user.pw_uid}")
    status, error = as_user(other_user, _pick, squatted, "their-run")
    assert status == "error" and f"squat-{other_user.pw_uid} is not a directory of user {other_user.pw_name}" in error


def _pick_many(registry: str, run_id: str, queue: Any) -> None:
    queue.put(_pick(registry, run_id))


def test_two_users_picking_at_the_same_moment_never_get_the_same_port(other_user: Any, shared_tmp: Path) -> None:
    """No lock is common to two users: each pick reads the others' registers after writing
    its own, and gives way on a clash (the later writer always sees the earlier one)."""
    registry = str(shared_tmp / "tf-runbook-ports")
    context = multiprocessing.get_context("fork")
    queue: Any = context.Queue()

    def start(index: int) -> Any:
        if index % 2:
            target, args = _as_user, (other_user.pw_uid, other_user.pw_gid, queue, _pick, registry, f"u{index}")
        else:
            target, args = _pick_many, (registry, f"r{index}", queue)
        proc = context.Process(target=target, args=args)
        proc.start()
        return proc

    procs = [start(i) for i in range(8)]
    for proc in procs:
        proc.join(60)
    results = [queue.get(timeout=5) for _ in procs]
    blocks = [r[1] if isinstance(r, tuple) else r for r in results]
    ports = [port for block in blocks for port in block]
    assert len(ports) == 16 and len(set(ports)) == 16, blocks
