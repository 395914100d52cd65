"""The chief's checkpoint copied host to host between attempts (issue 42,
module_utils/tf_checkpoint_relay.py): real listeners on loopback ports, the chief's pack
sending once along the chain."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.tf_runbook.multiworker.plugins.filter import tf_attempts
from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_checkpoint_copy as sync
from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_checkpoint_relay as relay
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import CHECKPOINT_STAGING_PREFIX
from test_tf_checkpoint_sync import params  # the module's parameters, as its own tests build them

KEY = "k" * 32


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def chief_dir(tmp_path: Path) -> Path:
    chief = tmp_path / "chief"
    (chief / "sub").mkdir(parents=True)
    (chief / "ckpt-2.data-00000-of-00001").write_bytes(os.urandom(3 << 20))
    (chief / "ckpt-2.index").write_bytes(b"index-2")
    (chief / "sub" / "extra").write_text("x")
    (chief / "checkpoint").write_text('model_checkpoint_path: "ckpt-2"\n')
    return chief


def chiefs_files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file() and not p.name.startswith(".tf-runbook-")}  # fmt: skip


def port_free(port: int) -> bool:
    try:
        socket.create_server(("", port)).close()
        return True
    except OSError:
        return False


def copy_setup(tmp_path: Path, hosts: list[str]) -> tuple[Path, dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    chief = chief_dir(tmp_path)
    files = sync.run(params("mark", chief, manifest=True), False)["files"]
    workers = [{"host": "h0", "slot": 0, "address": "127.0.0.1", "port": free_port()}]
    workers += [{"host": h, "slot": 0, "address": "127.0.0.1", "port": free_port()} for h in hosts]
    return chief, files, {}, workers


def wait_port_free(port: int) -> bool:
    for _ in range(100):
        if port_free(port):
            return True
        time.sleep(0.05)
    return False


def test_the_chief_sends_once_and_each_host_passes_it_on(tmp_path: Path) -> None:
    hosts = ["h1", "h2", "h3"]
    chief, files, looks, workers = copy_setup(tmp_path, hosts)
    for worker in workers[1:]:
        host = worker["host"]
        looks[host] = sync.run(params("look", tmp_path / host, host=host, chief_files=files, relay_port=worker["port"],
                                      relay_key=KEY), False)  # fmt: skip
        assert looks[host]["relay"] == {"listening": True, "port": worker["port"]}
    sent = []
    real = relay.Downstream.send

    def counted(self: relay.Downstream, data: bytes) -> None:
        sent.append((self.hosts[0][0] if self.hosts else "", len(data)))
        real(self, data)

    original_send_chain = relay.send_chain

    def chief_side(*args: Any) -> dict[str, Any]:
        relay.Downstream.send = counted  # the chief's own process only (the listeners are forked)
        try:
            return original_send_chain(*args)
        finally:
            relay.Downstream.send = real

    relay_send_chain = pytest.MonkeyPatch()
    relay_send_chain.setattr(relay, "send_chain", chief_side)
    try:
        packed = sync.run(params("pack", chief, targets=looks, relay_key=KEY, chief_files=files, workers=workers,
                                 archive=str(tmp_path / "a.tar")), False)  # fmt: skip
    finally:
        relay_send_chain.undo()
    assert packed["copy_to"] == [] and packed["archive"] == "" and not (tmp_path / "a.tar").exists()
    assert packed["relay_fallback"] == {}
    assert sorted(packed["relayed"]) == hosts
    assert all(o["ok"] and o["files"] == 4 for o in packed["relayed"].values()), packed["relayed"]
    for host in hosts:
        assert chiefs_files(tmp_path / host) == chiefs_files(chief), host
        assert not [p for p in (tmp_path / host).iterdir() if p.name.startswith(CHECKPOINT_STAGING_PREFIX)]
        assert sync.read_synced(str(tmp_path / host))["complete"] is True
    # The chief sent the files once, to the first host only.
    size = sum(p.stat().st_size for p in chief.rglob("*") if p.is_file())
    assert {name for name, _n in sent} == {"h1"}
    assert sum(n for name, n in sent) - size < 4096, "the chief sent more than the files once (and the frame)"
    for worker in workers[1:]:
        assert wait_port_free(worker["port"]), f"{worker['host']}'s listener kept its port"
    out = tf_attempts.tf_attempts_sync_record(looks, packed, {}, "h0", 1, 2.5, "/runs/r")
    assert out["message"] == (
        "Copied the chief's checkpoint (h0: 4 files, 3.1 MB) host to host to h1, h2, h3 (sent once by h0, each host "
        "passing it on to the next; none of it through the controller) in 2.5 s")


def test_a_host_the_relay_cannot_reach_gets_the_copy_through_the_controller(tmp_path: Path) -> None:
    chief, files, looks, workers = copy_setup(tmp_path, ["h1", "h2", "h3"])
    for worker in workers[1:]:
        host = worker["host"]
        port = worker["port"]
        looks[host] = sync.run(params("look", tmp_path / host, host=host, chief_files=files, relay_port=port,
                                      relay_key=KEY), False)  # fmt: skip
    # h2's listener is gone (its host cut off from the others, say): the chain passes it over.
    relay.close_listeners([["h2", "127.0.0.1", workers[2]["port"]]], KEY.encode(), "m1")
    assert wait_port_free(workers[2]["port"])
    packed = sync.run(params("pack", chief, targets=looks, relay_key=KEY, chief_files=files, workers=workers,
                             archive=str(tmp_path / "a.tar")), False)  # fmt: skip
    assert sorted(packed["relayed"]) == ["h1", "h3"]
    assert packed["copy_to"] == ["h2"] and packed["archive"] == str(tmp_path / "a.tar")
    assert packed["relay_fallback"]["h2"].startswith("not reachable on the relay: 127.0.0.1:"), packed
    assert not (tmp_path / "h2" / "checkpoint").exists()
    for host in ("h1", "h3"):
        assert chiefs_files(tmp_path / host) == chiefs_files(chief)
    unpacked = sync.run(params("unpack", tmp_path / "h2", archive=str(tmp_path / "a.tar")), False)
    assert chiefs_files(tmp_path / "h2") == chiefs_files(chief)
    out = tf_attempts.tf_attempts_sync_record(looks, packed, {"h2": unpacked}, "h0", 1, 2.5, "/runs/r")
    assert out["message"].startswith(
        "Copied the chief's checkpoint (h0: 4 files, 3.1 MB) host to host to h1, h3 (sent once by h0, each host "
        "passing it on to the next; none of it through the controller); through the controller to h2 (h2: not "
        "reachable on the relay: 127.0.0.1:"), out["message"]


def serving(tmp_path: Path, host: str, key: bytes = KEY.encode()) -> tuple[int, threading.Thread, list[str]]:
    """A listener in a thread of this process (not forked): its result is seen."""
    server = relay.listen(0)
    port = server.getsockname()[1]
    said: list[str] = []
    directory = str(tmp_path / host)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    thread = threading.Thread(target=lambda: said.append(relay.serve(
        server, key, "m1", host, lambda names, fill: sync.install(directory, names, fill), 20)))
    thread.start()
    return port, thread, said


def test_a_message_not_signed_with_the_copys_key_is_refused_and_the_listener_waits_on(tmp_path: Path) -> None:
    chief, files, _looks, _workers = copy_setup(tmp_path, [])
    port, thread, said = serving(tmp_path, "h1")
    outcomes = relay.send_chain([["h1", "127.0.0.1", port]], b"x" * 32, "m1", str(chief), files)
    assert outcomes["h1"]["ok"] is False and "bad signature" in outcomes["h1"]["error"], outcomes
    assert not (tmp_path / "h1" / "checkpoint").exists()
    outcomes = relay.send_chain([["h1", "127.0.0.1", port]], KEY.encode(), "another copy", str(chief), files)
    assert "another run's push" in outcomes["h1"]["error"], outcomes
    outcomes = relay.send_chain([["h1", "127.0.0.1", port]], KEY.encode(), "m1", str(chief), files)
    thread.join(20)
    assert outcomes["h1"]["ok"] is True and said == ["relay"]
    assert chiefs_files(tmp_path / "h1") == chiefs_files(chief)


def test_a_file_that_arrives_with_another_sha256_swaps_nothing_in_and_stops_the_chain(tmp_path: Path) -> None:
    chief, files, _looks, _workers = copy_setup(tmp_path, [])
    (tmp_path / "h1").mkdir()
    (tmp_path / "h1" / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n')
    port1, thread1, _said1 = serving(tmp_path, "h1")
    port2, thread2, _said2 = serving(tmp_path, "h2")
    wrong = {**files, "ckpt-2.index": [files["ckpt-2.index"][0], "0" * 64]}
    outcomes = relay.send_chain([["h1", "127.0.0.1", port1], ["h2", "127.0.0.1", port2]], KEY.encode(), "m1",
                                str(chief), wrong)  # fmt: skip
    thread1.join(20)
    assert outcomes["h1"]["ok"] is False and "another sha256 than the chief's" in outcomes["h1"]["error"]
    assert outcomes["h2"]["ok"] is False, outcomes
    assert (tmp_path / "h1" / "checkpoint").read_text() == 'model_checkpoint_path: "ckpt-1"\n'
    assert not (tmp_path / "h1" / "ckpt-2.data-00000-of-00001").exists()
    assert not [p for p in (tmp_path / "h1").iterdir() if p.name.startswith(CHECKPOINT_STAGING_PREFIX)]
    relay.close_listeners([["h2", "127.0.0.1", port2]], KEY.encode(), "m1")
    thread2.join(20)


def test_a_host_that_already_holds_the_files_does_not_listen(tmp_path: Path) -> None:
    chief, files, _looks, workers = copy_setup(tmp_path, ["h1"])
    port, thread, _said = serving(tmp_path, "h1")
    relay.send_chain([["h1", "127.0.0.1", port]], KEY.encode(), "m1", str(chief), files)
    thread.join(20)
    look = sync.run(params("look", tmp_path / "h1", host="h1", chief_files=files, relay_port=workers[1]["port"],
                           relay_key=KEY), False)  # fmt: skip
    assert look["same"] is True and "relay" not in look
    assert port_free(workers[1]["port"])


def test_a_port_that_is_taken_sends_that_host_through_the_controller(tmp_path: Path) -> None:
    chief, files, _looks, workers = copy_setup(tmp_path, ["h1"])
    with socket.create_server(("", workers[1]["port"])):
        look = sync.run(params("look", tmp_path / "h1", host="h1", chief_files=files, relay_port=workers[1]["port"],
                               relay_key=KEY), False)  # fmt: skip
    assert look["relay"]["listening"] is False and f"port {workers[1]['port']}" in look["relay"]["error"]
    packed = sync.run(params("pack", chief, targets={"h1": look}, relay_key=KEY, chief_files=files, workers=workers,
                             archive=str(tmp_path / "a.tar")), False)  # fmt: skip
    assert packed["copy_to"] == ["h1"] and packed["relayed"] == {}
    assert packed["relay_fallback"]["h1"].startswith("it could not listen for the relay: port ")


def test_a_refused_copy_sends_every_listener_away_at_once(tmp_path: Path) -> None:
    """The pack refuses (no space on h1): the listeners the looks left give their worker
    ports back before the refusal, not five minutes later (the run's next start binds them)."""
    chief, files, looks, workers = copy_setup(tmp_path, ["h1", "h2"])
    for worker in workers[1:]:
        host = worker["host"]
        looks[host] = sync.run(params("look", tmp_path / host, host=host, chief_files=files, relay_port=worker["port"],
                                      relay_key=KEY), False)  # fmt: skip
        assert looks[host]["relay"]["listening"] is True
    looks["h1"] = {**looks["h1"], "free": 1024}
    with pytest.raises(ValueError, match="host h1"):
        sync.run(params("pack", chief, targets=looks, relay_key=KEY, chief_files=files, workers=workers,
                        archive=str(tmp_path / "a.tar")), False)  # fmt: skip
    for worker in workers[1:]:
        assert wait_port_free(worker["port"]), f"{worker['host']}'s listener kept its port after the refusal"
    assert not (tmp_path / "h2" / "checkpoint").exists()
