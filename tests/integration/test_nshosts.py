"""Self-tests of the namespace test hosts (nshosts.py).

Why: every multi-host runbook test trusts these hosts to behave like separate
machines (own network stack, own files, real SSH with host key checking) and
trusts fault injection and teardown.  Each property is checked here directly,
so a runbook test failure can be blamed on the runbook, not on the test bed.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

import paramiko
import pytest
import yaml

from nshosts import (
    STATE_ROOT,
    Host,
    NamespaceHosts,
    NamespaceHostsError,
    _pid_alive,
)

pytestmark = pytest.mark.multihost

# Binds 0.0.0.0:PORT, answers the first client with the hostname, then keeps
# the connection (and the listening socket) open until the client closes.
LISTENER_PY = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(4); s.settimeout(20)
c, _ = s.accept(); c.settimeout(20)
c.sendall(socket.gethostname().encode()); c.recv(1)
"""

# Connects to ADDR:PORT, retrying for WAIT seconds; prints what the server sent.
CONNECT_PY = """
import socket, sys, time
end = time.time() + float(sys.argv[3])
while True:
    try:
        c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1)
        c.settimeout(1)
        try:
            print(c.recv(100).decode(errors="replace").strip())
        except OSError:
            pass
        break
    except OSError as e:
        if time.time() > end:
            print(e, file=sys.stderr); sys.exit(1)
        time.sleep(0.1)
"""


def listener_cmd(port: int) -> str:
    return shlex.join(["python3", "-c", LISTENER_PY, str(port)])


def connect_cmd(addr: str, port: int, wait: float) -> str:
    return shlex.join(["python3", "-c", CONNECT_PY, addr, str(port), str(wait)])


def tcp_open(addr: str, port: int, timeout: float = 1.0) -> bool:
    """Controller-side TCP reachability probe."""
    try:
        with socket.create_connection((addr, port), timeout=timeout):
            return True
    except OSError:
        return False


def connect_with_retry(addr: str, port: int, wait: float = 10.0) -> socket.socket:
    end = time.monotonic() + wait
    while True:
        try:
            return socket.create_connection((addr, port), timeout=2)
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.05)


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def run_bg(
    hosts: NamespaceHosts, host: Host, command: str
) -> tuple[threading.Thread, list]:
    """Run a blocking command on ``host`` in a thread; result lands in the list."""
    result: list = []

    def target() -> None:
        try:
            result.append(hosts.run(host, command, timeout=30))
        except BaseException as exc:  # reported by the test
            result.append(exc)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, result


# --------------------------------------------------------------------------
# login, identity, isolation (shared session hosts)
# --------------------------------------------------------------------------


def test_key_login_as_unprivileged_user_with_host_key_checking(
    ns_hosts: NamespaceHosts,
) -> None:
    assert [h.name for h in ns_hosts.hosts] == ["node0", "node1", "node2"]
    assert len({h.address for h in ns_hosts.hosts}) == 3
    assert len({h.namespace for h in ns_hosts.hosts}) == 3
    for h in ns_hosts.hosts:
        client = ns_hosts.ssh(h)  # fresh client: RejectPolicy + our known_hosts
        try:
            _, stdout, _ = client.exec_command("whoami; id -u; hostname; echo $HOME")
            who, uid, hostname, home = stdout.read().decode().split()
            assert stdout.channel.recv_exit_status() == 0
        finally:
            client.close()
        assert who == ns_hosts.user == h.user
        assert uid != "0"
        assert hostname == h.name
        assert home == h.home == f"/home/{ns_hosts.user}"
        assert h.sshd_pid in h.pids and h.sshd_pid in ns_hosts.netns_pids(h)


def test_private_home_and_tmp(ns_hosts: NamespaceHosts) -> None:
    token = uuid.uuid4().hex
    h0, h1 = ns_hosts.hosts[0], ns_hosts.hosts[1]
    rc, _, err = ns_hosts.run(
        h0, f"echo {token} > ~/iso-{token} && echo {token} > /tmp/iso-{token}"
    )
    assert rc == 0, err
    rc, out, _ = ns_hosts.run(h0, f"cat ~/iso-{token} /tmp/iso-{token}")
    assert (rc, out.split()) == (0, [token, token])
    # Not on another host...
    rc, out, err = ns_hosts.run(h1, f"ls ~/iso-{token} /tmp/iso-{token}")
    assert rc != 0 and out == "", (out, err)
    # ...nor on the controller.
    assert not Path(f"/tmp/iso-{token}").exists()
    assert not Path(f"/home/{ns_hosts.user}/iso-{token}").exists()
    # And the backing store is where the library says it is.
    assert h0.private_path(f"/tmp/iso-{token}").read_text().strip() == token
    assert h0.private_path(f"{h0.home}/iso-{token}").read_text().strip() == token
    assert not h1.private_path(f"/tmp/iso-{token}").exists()


def test_hosts_reach_each_other(ns_hosts: NamespaceHosts) -> None:
    h0, h1 = ns_hosts.hosts[0], ns_hosts.hosts[1]
    listener, result = run_bg(ns_hosts, h0, listener_cmd(2222))
    rc, out, err = ns_hosts.run(h1, connect_cmd(h0.address, 2222, 10))
    listener.join(30)
    assert (rc, out.strip()) == (0, "node0"), err
    assert result and not isinstance(result[0], BaseException), result
    assert result[0][0] == 0, result
    # Names resolve like on a real cluster.
    rc, out, _ = ns_hosts.run(h1, "getent hosts node0")
    assert rc == 0 and out.split()[0] == h0.address
    # No DNS inside hosts: unknown names must fail fast, not hang on a timeout.
    start = time.monotonic()
    assert ns_hosts.run(h1, "getent hosts no-such-host.invalid")[0] != 0
    assert time.monotonic() - start < 10


def test_private_process_table(ns_hosts: NamespaceHosts) -> None:
    """pkill/ps on one host must not see or hit another host's processes."""
    h0, h1 = ns_hosts.hosts[0], ns_hosts.hosts[1]
    tag = f"{300 + uuid.uuid4().int % 1000}"
    assert ns_hosts.run(h0, f"nohup sleep {tag} >/dev/null 2>&1 &")[0] == 0
    try:
        rc, out, _ = ns_hosts.run(
            h1, f"pgrep -f '[s]leep {tag}'; pkill -f '[s]leep {tag}'; echo done"
        )
        assert out.split() == ["done"]
        rc, out, _ = ns_hosts.run(h0, f"pgrep -f '[s]leep {tag}'")
        assert (
            rc == 0 and out.strip()
        ), "sleep on node0 should have survived pkill on node1"
        rc, out, _ = ns_hosts.run(h0, "ps -e -o pid=,comm=")
        procs = dict(line.split(None, 1) for line in out.strip().splitlines())
        assert procs.get("1") == "sshd", procs  # host-local PID 1 is its sshd
        assert "pytest" not in out and "python" not in out.replace("python3", "")
    finally:
        ns_hosts.run(h0, f"pkill -f '[s]leep {tag}'")


def test_same_port_bound_on_all_hosts_at_once(ns_hosts: NamespaceHosts) -> None:
    bg = [run_bg(ns_hosts, h, listener_cmd(2222)) for h in ns_hosts.hosts]
    conns = []
    try:
        # Hold every connection open: all listeners are bound at the same time.
        for h in ns_hosts.hosts:
            conns.append(connect_with_retry(h.address, 2222))
            assert conns[-1].recv(100).decode() == h.name
    finally:
        for c in conns:
            c.close()
    for thread, result in bg:
        thread.join(30)
        assert (
            result and not isinstance(result[0], BaseException) and result[0][0] == 0
        ), result


# --------------------------------------------------------------------------
# host key checking is real; system OpenSSH and Ansible work
# --------------------------------------------------------------------------


def test_wrong_or_missing_known_hosts_entry_is_rejected(
    ns_hosts: NamespaceHosts, tmp_path: Path
) -> None:
    h0 = ns_hosts.hosts[0]
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")],
        check=True,
    )
    wrong = tmp_path / "known_hosts_wrong"
    wrong.write_text(
        f"{h0.address} {' '.join((tmp_path / 'other.pub').read_text().split()[:2])}\n"
    )
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")

    with pytest.raises(paramiko.BadHostKeyException):
        ns_hosts.ssh(h0, known_hosts=wrong)
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        ns_hosts.ssh(h0, known_hosts=empty)

    argv = ns_hosts.ssh_argv(h0, "true")
    argv[argv.index(f"UserKnownHostsFile={ns_hosts.known_hosts}")] = (
        f"UserKnownHostsFile={wrong}"
    )
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 255
    assert "Host key verification failed" in proc.stderr


def test_system_openssh_client(ns_hosts: NamespaceHosts) -> None:
    for h in ns_hosts.hosts:
        argv = [
            "ssh",
            "-o",
            "BatchMode=yes",
            "-o",
            f"UserKnownHostsFile={ns_hosts.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-i",
            str(ns_hosts.client_key),
            f"{ns_hosts.user}@{h.address}",
            "true",
        ]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0, proc.stderr
        proc = subprocess.run(
            ns_hosts.ssh_argv(h, "hostname"), capture_output=True, text=True, timeout=30
        )
        assert (proc.returncode, proc.stdout.strip()) == (0, h.name), proc.stderr


def test_write_inventory(ns_hosts: NamespaceHosts, tmp_path: Path) -> None:
    path = ns_hosts.write_inventory(
        tmp_path / "inv.yml",
        slots=2,
        port=2345,
        hostvars={"node1": {"tf_extra": 1}, 2: {"tf_extra": 2}},
        groupvars={"tf_epochs": 3},
    )
    data = yaml.safe_load(path.read_text())
    group = data["all"]["children"]["tf_workers"]
    assert list(group["hosts"]) == ["node0", "node1", "node2"]
    for h in ns_hosts.hosts:
        hv = group["hosts"][h.name]
        assert hv["ansible_host"] == h.address
        assert hv["ansible_user"] == ns_hosts.user
        assert hv["ansible_ssh_private_key_file"] == str(ns_hosts.client_key)
        assert (
            f"UserKnownHostsFile={ns_hosts.known_hosts}"
            in hv["ansible_ssh_common_args"]
        )
        assert "StrictHostKeyChecking=yes" in hv["ansible_ssh_common_args"]
        assert hv["ansible_control_path_dir"] == str(ns_hosts.control_path_dir)
    assert (
        group["hosts"]["node1"]["tf_extra"] == 1
        and group["hosts"]["node2"]["tf_extra"] == 2
    )
    assert "tf_extra" not in group["hosts"]["node0"]
    assert group["vars"] == {
        "tf_worker_port": 2345,
        "tf_worker_slots": 2,
        "ansible_python_interpreter": "/usr/bin/python3",
        "tf_epochs": 3,
    }


def test_ansible_ping_with_generated_inventory(
    ns_hosts: NamespaceHosts, tmp_path: Path
) -> None:
    ansible = Path(sys.executable).parent / "ansible"
    if not ansible.exists():
        ansible = Path(shutil.which("ansible") or "/nonexistent")
    if not ansible.exists():
        pytest.skip("ansible not installed next to the test interpreter nor on PATH")
    inv = ns_hosts.write_inventory(tmp_path / "inv.yml")
    env = {
        **os.environ,
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
    }
    proc = subprocess.run(
        [str(ansible), "-i", str(inv), "tf_workers", "-m", "ping", "-o"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for h in ns_hosts.hosts:
        assert f"{h.name} | SUCCESS" in proc.stdout, proc.stdout


def test_close_ends_the_ssh_masters_that_ansible_left(
    make_ns_hosts: Callable[..., NamespaceHosts], tmp_path: Path
) -> None:
    """Ansible's control masters to these hosts live in the instance's own directory and
    end with it: the next test's hosts take the same addresses, and a master left over
    from this one, its peer gone, made a playbook there see a host as unreachable."""
    hosts = make_ns_hosts(2)
    inv = hosts.write_inventory(tmp_path / "inv.yml")
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-local"),
           "ANSIBLE_SSH_ARGS": "-o ControlMaster=auto -o ControlPersist=300s"}
    ansible = Path(sys.executable).parent / "ansible"
    proc = subprocess.run([str(ansible), "-i", str(inv), "tf_workers", "-m", "ping", "-o"],
                          capture_output=True, text=True, timeout=120, env=env, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    masters = hosts.ssh_masters()
    assert len(masters) == 2 and {s.parent for s in masters} == {hosts.control_path_dir}, masters
    assert all(_pid_alive(pid) for pid in masters.values())
    hosts.close()
    assert [pid for pid in masters.values() if _pid_alive(pid)] == []


# --------------------------------------------------------------------------
# fault injection (own hosts: these break them)
# --------------------------------------------------------------------------


def test_cut_and_restore_network(make_ns_hosts: Callable[..., NamespaceHosts]) -> None:
    hosts = make_ns_hosts(2)
    h0, h1 = hosts.hosts
    probe = connect_cmd(h1.address, 22, 0)
    assert tcp_open(h1.address, 22)
    assert hosts.run(h0, probe)[0] == 0

    hosts.cut_network(h1)
    assert not tcp_open(h1.address, 22)  # controller -> h1
    rc, _, _ = hosts.run(h0, probe)  # other host -> h1
    assert rc != 0
    out = hosts.host_exec(h1, ["python3", "-c", CONNECT_PY, h0.address, "22", "0"])
    assert out.returncode != 0  # h1 -> other host

    hosts.restore_network(h1)
    assert hosts.run(h0, connect_cmd(h1.address, 22, 5))[0] == 0
    assert hosts.run(h1, "hostname")[1].strip() == "node1"


def start_sleeper(hosts: NamespaceHosts, host: Host) -> list[int]:
    """Start ``sleep 300`` in the background on ``host``; the pids of its sleep processes.

    The ssh command returns once its shell has forked the job, which may not have exec'd
    `sleep` yet: its pid shows as `bash` or `nohup` for a moment, so look for 10 s.
    """
    assert hosts.run(host, "nohup sleep 300 >/dev/null 2>&1 &")[0] == 0
    deadline = time.monotonic() + 10
    sleepers = [p for p in hosts.netns_pids(host) if comm(p) == "sleep"]
    while not sleepers and time.monotonic() < deadline:
        time.sleep(0.1)
        sleepers = [p for p in hosts.netns_pids(host) if comm(p) == "sleep"]
    return sleepers


def test_power_off_kills_everything_and_power_on_keeps_disk(
    make_ns_hosts: Callable[..., NamespaceHosts],
) -> None:
    hosts = make_ns_hosts(2)
    h1 = hosts.hosts[1]
    assert hosts.run(h1, "echo persisted > ~/disk")[0] == 0
    sleepers = start_sleeper(hosts, h1)
    old_sshd = h1.sshd_pid
    assert len(sleepers) == 1 and old_sshd in hosts.netns_pids(h1)
    sleeper = sleepers[0]

    hosts.power_off(h1)
    assert hosts.netns_pids(h1) == []
    assert not _pid_alive(sleeper) and not _pid_alive(old_sshd)
    assert not tcp_open(h1.address, 22)
    assert hosts.run(0, "true")[0] == 0  # the other host is unaffected

    hosts.power_on(h1)
    assert h1.sshd_pid != old_sshd and {old_sshd, h1.sshd_pid} <= set(h1.pids)
    assert hosts.run(h1, "cat ~/disk") == (0, "persisted\n", "")


def test_shared_pid_namespace_option(
    make_ns_hosts: Callable[..., NamespaceHosts],
) -> None:
    hosts = make_ns_hosts(1, private_pids=False)
    h = hosts.hosts[0]
    assert h.pids == [h.sshd_pid] and comm(h.sshd_pid) == "sshd"
    rc, out, _ = hosts.run(h, "ps -o comm= -p 1")
    assert rc == 0 and out.strip() != "sshd"  # sees the machine's process table
    assert hosts.host_exec(h, ["hostname"]).stdout.strip() == "node0"


# --------------------------------------------------------------------------
# teardown and failure paths
# --------------------------------------------------------------------------


def _leftovers(
    prefix: str, bridge: str, veths: list[str], pids: list[int], state_dir: Path
) -> list[str]:
    left = [
        f"netns {n}" for n in os.listdir("/run/netns") if n.startswith(prefix + "-")
    ]
    left += [
        f"link {d}"
        for d in [bridge, *veths]
        if d and Path(f"/sys/class/net/{d}").exists()
    ]
    left += [f"pid {p}" for p in pids if _pid_alive(p)]
    if state_dir.exists():
        left.append(f"state {state_dir}")
    return left


def test_exit_removes_everything(multihost_env: None, tmp_path: Path) -> None:
    workdir = tmp_path / "w"
    with NamespaceHosts(2, workdir) as hosts:
        assert len(start_sleeper(hosts, hosts.hosts[1])) == 1
        pids = [p for h in hosts.hosts for p in hosts.netns_pids(h)] + hosts.hosts[
            0
        ].pids
        assert any(comm(p) == "sleep" for p in pids) and len(pids) >= 3
        prefix, bridge, state_dir = hosts.prefix, hosts.bridge, hosts.state_dir
        veths = [h.veth for h in hosts.hosts]
        assert _leftovers(prefix, bridge, veths, pids, state_dir) != []
        assert hosts.setup_seconds < 60
    assert _leftovers(prefix, bridge, veths, pids, state_dir) == []
    assert list(workdir.iterdir()) == []


def test_failed_setup_cleans_up(multihost_env: None, tmp_path: Path) -> None:
    class Boom(NamespaceHosts):
        def _start_sshd(self, h: Host) -> None:
            if h.index == 1:
                raise RuntimeError("injected failure")
            super()._start_sshd(h)

    hosts = Boom(2, tmp_path / "w")
    with pytest.raises(RuntimeError, match="injected failure"):
        hosts.start()
    assert hosts.hosts[0].sshd_pid is not None  # node0 had been started
    assert (
        _leftovers(
            hosts.prefix,
            hosts.bridge,
            [h.veth for h in hosts.hosts],
            hosts.hosts[0].pids,
            hosts.state_dir,
        )
        == []
    )
    assert list((tmp_path / "w").iterdir()) == []


def test_sshd_start_error_names_host_and_log(
    multihost_env: None, tmp_path: Path
) -> None:
    class BadConfig(NamespaceHosts):
        def _prepare_host_files(self, h: Host) -> None:
            super()._prepare_host_files(h)
            if h.index == 1:
                with open(h.state_dir / "sshd_config", "a") as fh:
                    fh.write("NoSuchOption yes\n")

    hosts = BadConfig(2, tmp_path / "w", ssh_timeout=10)
    with pytest.raises(NamespaceHostsError) as info:
        hosts.start()
    msg = str(info.value)
    assert "node1" in msg and "node0" not in msg
    assert str(hosts.hosts[1].bootstrap_log) in msg and "NoSuchOption" in msg
    assert (
        _leftovers(
            hosts.prefix,
            hosts.bridge,
            [],
            [p for h in hosts.hosts for p in h.pids],
            hosts.state_dir,
        )
        == []
    )


def test_cleanup_stale_only_touches_dead_owners(ns_hosts: NamespaceHosts) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    pid = dead.pid
    assert not _pid_alive(pid)
    ns, bridge, state = f"tfrb-{pid}-0-0", f"tb{pid:06x}0", STATE_ROOT / f"tfrb-{pid}-0"
    if Path(f"/run/netns/{ns}").exists() or Path(f"/sys/class/net/{bridge}").exists():
        pytest.fail(f"unexpected pre-existing {ns}/{bridge}")
    subprocess.run(["ip", "netns", "add", ns], check=True)
    subprocess.run(["ip", "link", "add", "name", bridge, "type", "bridge"], check=True)
    state.mkdir(parents=True)
    (state / "owner").write_text(f"{pid} 1\n")

    removed = NamespaceHosts.cleanup_stale()
    assert {f"netns {ns}", f"bridge {bridge}", f"state {state}"} <= set(removed)
    assert (
        not Path(f"/run/netns/{ns}").exists()
        and not Path(f"/sys/class/net/{bridge}").exists()
    )
    # The live session hosts were left alone.
    assert all(Path(f"/run/netns/{h.namespace}").exists() for h in ns_hosts.hosts)
    assert ns_hosts.run(0, "true")[0] == 0


def test_cleanup_stale_after_killed_run(multihost_env: None, tmp_path: Path) -> None:
    """A SIGKILLed test process leaves everything behind; cleanup_stale removes it."""
    here = Path(__file__).resolve().parent
    script = (
        "import sys, time; sys.path.insert(0, sys.argv[1]); import nshosts\n"
        "h = nshosts.NamespaceHosts(1, sys.argv[2]).start()\n"
        "print(h.prefix, h.bridge, h.hosts[0].sshd_pid, flush=True); time.sleep(120)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(here), str(tmp_path / "w")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        prefix, bridge, sshd = proc.stdout.readline().split()
    finally:
        proc.kill()
        proc.wait()
    assert _pid_alive(int(sshd)) and Path(f"/sys/class/net/{bridge}").exists()
    removed = NamespaceHosts.cleanup_stale()
    assert f"netns {prefix}-0" in removed and f"bridge {bridge}" in removed
    deadline = time.monotonic() + 5
    while _pid_alive(int(sshd)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _leftovers(prefix, bridge, [], [int(sshd)], STATE_ROOT / prefix) == []
    assert list((tmp_path / "w").iterdir()) == []


def test_static_neighbors_give_every_host_a_permanent_entry_for_each_peer(
    make_ns_hosts: Callable[..., NamespaceHosts],
) -> None:
    hosts = make_ns_hosts(3, static_neighbors=True)
    for h in hosts.hosts:
        out = subprocess.run(["ip", "-n", h.namespace, "neigh", "show", "nud", "permanent"],
                             capture_output=True, text=True, check=True).stdout
        peers = {line.split()[0] for line in out.splitlines() if line.strip()}
        assert peers == {p.address for p in hosts.hosts if p is not h}
    rc, out, _ = hosts.run(0, f"python3 -c \"import socket; socket.create_connection(('{hosts.host(2).address}', 22), timeout=5); print('ok')\"")
    assert rc == 0 and out.strip() == "ok"
