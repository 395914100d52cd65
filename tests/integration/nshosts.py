"""Throw-away multi-host test bed built from Linux network namespaces.

Why this exists: the runbook drives TensorFlow multi-worker training over
plain SSH, so its integration tests need several machines that each run a
real OpenSSH server, have their own network stack (the same TCP port can be
bound on every host), their own hostname and their own writable home and
``/tmp``.  Containers/VMs are not available on the CI machine, but
``ip netns`` + ``unshare`` are, and they give exactly that at a cost of well
under a second per host.

Topology (one :class:`NamespaceHosts` instance)::

    root namespace (controller, runs Ansible)
      bridge tb<pid><seq>  10.231.K.1/24
        |-- veth tb..v0 <-> eth0 in netns tfrb-<pid>-<seq>-0   10.231.K.10  "node0"
        |-- veth tb..v1 <-> eth0 in netns tfrb-<pid>-<seq>-1   10.231.K.11  "node1"
        ...

Each host's sshd runs inside ``ip netns exec NS unshare --mount --uts``:
``/home``, ``/tmp`` (and ``/etc/hosts``, ``/etc/resolv.conf``) are bind mounts of per-host
directories, so every SSH session of that host sees that host's private
files, and nobody else does.  The rest of the filesystem (``/usr``,
``/etc``...) is shared with the machine, like an identical OS image.

Everything the library starts is tracked by PID and namespace and removed by
:meth:`NamespaceHosts.close` (also run on ``__exit__``, on failed setup and
from an ``atexit`` hook).  Leftovers of killed test runs can be removed with
:meth:`NamespaceHosts.cleanup_stale`, which only touches resources whose
recorded owner process is gone.

Must run as root with iproute2 and util-linux available.  OpenSSH server is
installed through apt if ``/usr/sbin/sshd`` is missing, with a
``policy-rc.d`` that prevents the package from starting a system daemon.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import ipaddress
import itertools
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence, Union

if TYPE_CHECKING:  # paramiko is only needed for ssh()/run(); keep import lazy.
    import paramiko

__all__ = [
    "Host",
    "NamespaceHosts",
    "NamespaceHostsError",
    "ensure_openssh_server",
    "preflight",
]

SSHD = "/usr/sbin/sshd"
STATE_ROOT = Path("/run/tfrb")
"""Per-instance sshd state (config, host keys, pid and log files).

Kept outside ``/home`` and ``/tmp`` on purpose: OpenSSH 9.2 re-executes
itself for every connection and the re-executed child reloads host keys and
reopens its log *inside* the host's mount namespace, where the test
workdir (usually under /tmp) is hidden by the private /tmp bind mount.
"""
LOCK_FILE = Path("/run/lock/tfrb-nshosts.lock")
NS_PREFIX = "tfrb"
BRIDGE_PREFIX = "tb"
FIRST_HOST_OCTET = 10
DEFAULT_PRIVATE_DIRS: tuple[str, ...] = ("/home", "/tmp")
_NS_RE = re.compile(rf"^{NS_PREFIX}-(\d+)-(\d+)-(\d+)$")
_BRIDGE_RE = re.compile(rf"^{BRIDGE_PREFIX}([0-9a-f]{{6}})([0-9a-f]+)$")
_SEQ = itertools.count()
_SEQ_LOCK = threading.Lock()
_OWNED_FILES = ("id_ed25519", "id_ed25519.pub", "known_hosts")
_SAFE_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}

HostRef = Union["Host", int, str]


class NamespaceHostsError(RuntimeError):
    """Setup/teardown of the namespace test hosts failed (message says why)."""


@dataclass
class Host:
    """One emulated machine.

    ``pids`` lists every PID this library started for the host (the sshd
    daemons, one per power cycle), so tests and teardown can reason about
    processes by PID rather than by name.
    """

    index: int
    name: str
    address: str
    namespace: str
    user: str
    veth: str
    """Root-namespace side of the host's veth pair (its "switch port")."""
    root: Path
    """Directory in the controller's filesystem backing the host's private dirs."""
    state_dir: Path
    """sshd config, host key, pid file and logs of this host."""
    pids: list[int] = field(default_factory=list)
    sshd_pid: int | None = None
    process: subprocess.Popen[bytes] | None = field(
        default=None, repr=False, compare=False
    )

    @property
    def home(self) -> str:
        """The user's home directory as seen inside the host."""
        return f"/home/{self.user}"

    @property
    def sshd_log(self) -> Path:
        return self.state_dir / "sshd.log"

    @property
    def bootstrap_log(self) -> Path:
        """stdout/stderr of the namespace bootstrap (mount errors land here)."""
        return self.state_dir / "bootstrap.log"

    @property
    def host_key_pub(self) -> Path:
        return self.state_dir / "ssh_host_ed25519_key.pub"

    def private_path(self, path: str) -> Path:
        """Controller-side path of ``path`` inside one of the host's private dirs.

        Lets a test inspect e.g. ``/home/tfrunner/x`` of node1 without SSH.
        """
        return self.root / path.lstrip("/")


# --------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------


def _cmd(
    argv: Sequence[str],
    *,
    check: bool = True,
    timeout: float = 60.0,
    input: bytes | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a short administrative command, raising with its stderr on failure."""
    try:
        proc = subprocess.run(
            list(argv),
            capture_output=True,
            text=not input,
            input=input,
            timeout=timeout,
            env={**os.environ, **_SAFE_ENV},
            stdin=None if input else subprocess.DEVNULL,
        )
    except FileNotFoundError as exc:
        raise NamespaceHostsError(f"command not found: {argv[0]}") from exc
    if input is not None:  # normalise to text for callers
        proc = subprocess.CompletedProcess(
            proc.args,
            proc.returncode,
            proc.stdout.decode(errors="replace"),
            proc.stderr.decode(errors="replace"),
        )
    if check and proc.returncode != 0:
        raise NamespaceHostsError(
            f"{shlex.join(argv)} failed with exit {proc.returncode}: "
            f"{(proc.stderr or proc.stdout).strip()}"
        )
    return proc


@contextlib.contextmanager
def _global_lock() -> Iterator[None]:
    """Serialise choices that parallel test runs could race on.

    Subnet selection, apt installs and useradd are not atomic with respect
    to another pytest process doing the same thing at the same moment.
    """
    LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK_FILE, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _proc_start_time(pid: int) -> str | None:
    """Kernel start time of ``pid`` (field 22 of /proc/PID/stat), None if gone.

    PID plus start time identifies a process unambiguously, which lets
    :meth:`NamespaceHosts.cleanup_stale` tell a dead owner from a reused PID.
    """
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = data.rsplit(")", 1)[1].split()
    if rest[0] == "Z":
        return None
    return rest[19]


def _pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    return _proc_start_time(pid) is not None


def _listening_on_port(port: int) -> bool:
    """Whether anything in the *current* network namespace listens on TCP ``port``."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                parts = line.split()
                if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                    return True
    return False


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "<no log>"


def preflight() -> None:
    """Fail loudly (not skip) when the machine cannot host namespace hosts."""
    problems = []
    if os.geteuid() != 0:
        problems.append("must run as root (network namespaces, mounts, sshd)")
    for tool in (
        "ip",
        "unshare",
        "nsenter",
        "mount",
        "ssh-keygen",
        "useradd",
        "hostname",
    ):
        if shutil.which(tool, path=_SAFE_ENV["PATH"]) is None:
            problems.append(f"'{tool}' not found in {_SAFE_ENV['PATH']}")
    if problems:
        raise NamespaceHostsError(
            "cannot create namespace test hosts: " + "; ".join(problems)
        )


def ensure_openssh_server() -> None:
    """Install openssh-server via apt if ``/usr/sbin/sshd`` is missing.

    The package's maintainer scripts would normally start the system-wide
    ssh service on the root namespace; a temporary ``policy-rc.d`` that exits
    101 forbids that (any existing one is restored afterwards).
    """
    if os.path.exists(SSHD):
        return
    with _global_lock():
        if os.path.exists(SSHD):
            return
        policy = Path("/usr/sbin/policy-rc.d")
        saved: tuple[bytes, int] | None = None
        if policy.exists():
            saved = (policy.read_bytes(), policy.stat().st_mode & 0o7777)
        policy.write_text(
            "#!/bin/sh\n# written by tests/integration/nshosts.py during install\nexit 101\n"
        )
        policy.chmod(0o755)
        env = {**os.environ, **_SAFE_ENV, "DEBIAN_FRONTEND": "noninteractive"}
        install = [
            "apt-get",
            "install",
            "-y",
            "--no-install-recommends",
            "openssh-server",
        ]
        try:
            proc = subprocess.run(
                install, capture_output=True, text=True, env=env, timeout=900
            )
            if proc.returncode != 0:
                upd = subprocess.run(
                    ["apt-get", "update"],
                    capture_output=True,
                    text=True,
                    env=env,
                    timeout=900,
                )
                if upd.returncode != 0:
                    raise NamespaceHostsError(
                        f"apt-get update failed: {upd.stderr[-2000:]}"
                    )
                proc = subprocess.run(
                    install, capture_output=True, text=True, env=env, timeout=900
                )
            if proc.returncode != 0 or not os.path.exists(SSHD):
                raise NamespaceHostsError(
                    f"installing openssh-server failed: {(proc.stderr or proc.stdout)[-2000:]}"
                )
        finally:
            if saved is None:
                policy.unlink(missing_ok=True)
            else:
                policy.write_bytes(saved[0])
                policy.chmod(saved[1])
        if _listening_on_port(22):
            warnings.warn(
                "something listens on TCP port 22 in the root network namespace after "
                "installing openssh-server; nshosts did not start it and will not stop it",
                stacklevel=2,
            )


def _ensure_user(user: str) -> pwd.struct_passwd:
    """Create the unprivileged login user if missing; make key login possible.

    With ``UsePAM no`` sshd refuses accounts whose shadow password starts
    with ``!`` (locked).  A user created here gets ``*`` (no password, not
    locked).  An existing user whose entry is merely "no password set"
    (``!``, ``!!``, ``!*``) is switched to ``*``, which grants nothing new;
    a locked *real* password is left alone and reported.
    """
    with _global_lock():
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            _cmd(
                [
                    "useradd",
                    "--no-create-home",
                    "--home-dir",
                    f"/home/{user}",
                    "--shell",
                    "/bin/bash",
                    "--user-group",
                    "--password",
                    "*",
                    user,
                ]
            )
            pw = pwd.getpwnam(user)
        if pw.pw_uid == 0:
            raise NamespaceHostsError(
                f"user {user!r} has uid 0; the test user must be unprivileged"
            )
        if pw.pw_dir != f"/home/{user}":
            raise NamespaceHostsError(
                f"user {user!r} exists with home {pw.pw_dir!r}; expected /home/{user} "
                "(the per-host private /home)"
            )
        with contextlib.suppress(OSError):
            for line in Path("/etc/shadow").read_text().splitlines():
                name, _, rest = line.partition(":")
                if name != user:
                    continue
                pw_field = rest.split(":", 1)[0]
                if pw_field in ("!", "!!", "!*"):
                    _cmd(["usermod", "--password", "*", user])
                elif pw_field.startswith("!"):
                    raise NamespaceHostsError(
                        f"user {user!r} has a locked password; sshd (UsePAM no) refuses "
                        "locked accounts. Use another user name."
                    )
        return pw


def _used_ipv4_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network routed or assigned in the root namespace (no default)."""
    nets: list[ipaddress.IPv4Network] = []
    routes = json.loads(
        _cmd(["ip", "-j", "-4", "route", "show", "table", "all"]).stdout or "[]"
    )
    for r in routes:
        dst = r.get("dst", "")
        if not dst or dst == "default" or ":" in dst:
            continue
        with contextlib.suppress(ValueError):
            nets.append(ipaddress.IPv4Network(dst, strict=False))
    for link in json.loads(_cmd(["ip", "-j", "-4", "addr", "show"]).stdout or "[]"):
        for a in link.get("addr_info", []):
            with contextlib.suppress(ValueError, KeyError):
                nets.append(
                    ipaddress.IPv4Network(
                        f"{a['local']}/{a['prefixlen']}", strict=False
                    )
                )
    return nets


# --------------------------------------------------------------------------
# the test bed
# --------------------------------------------------------------------------


class NamespaceHosts:
    """``count`` SSH-reachable test hosts, each in its own network namespace.

    Use as a context manager::

        with NamespaceHosts(3, tmp_path) as hosts:
            inv = hosts.write_inventory(tmp_path / "inventory.yml")
            rc, out, err = hosts.run(0, "hostname")

    Args:
        count: number of hosts (node0..node{count-1}).
        workdir: directory for the client key, known_hosts and the hosts'
            private filesystems.  Created if missing.
        user: unprivileged login user (created with useradd if missing).
        subnet: IPv4 /24 to use; by default the first 10.231.K.0/24 that does
            not overlap any route or address of the root namespace.
        ssh_timeout: seconds each sshd gets to accept TCP on port 22.
        keep_logs: copy each host's sshd log to ``workdir/logs`` on close
            (for post-mortems); everything else this class created is removed.
        private_dirs: directories that are private per host (bind mounts).
        private_pids: give each host its own PID namespace (and /proc), so
            ``ps``/``pgrep``/``pkill`` run on one host only see and hit that
            host's processes, as on separate machines.  PIDs printed *inside* a
            host (``echo $!``) are then host-local; :attr:`Host.pids`,
            :attr:`Host.sshd_pid` and :meth:`netns_pids` are always PIDs as seen
            by the controller.
    """

    def __init__(
        self,
        count: int,
        workdir: str | os.PathLike[str],
        user: str = "tfrunner",
        *,
        subnet: str | None = None,
        ssh_timeout: float = 20.0,
        keep_logs: bool = False,
        private_dirs: Sequence[str] = DEFAULT_PRIVATE_DIRS,
        private_pids: bool = True,
        static_neighbors: bool = False,
    ) -> None:
        if count < 1 or count > 200:
            raise ValueError("count must be between 1 and 200")
        for d in private_dirs:
            if not os.path.isabs(d) or not os.path.isdir(d):
                raise ValueError(
                    f"private dir {d!r} must be an existing absolute directory"
                )
        self.count = count
        self.workdir = Path(workdir).absolute()
        self.user = user
        self.ssh_timeout = ssh_timeout
        self.keep_logs = keep_logs
        self.private_dirs = tuple(os.path.normpath(d) for d in private_dirs)
        self.private_pids = private_pids
        # Permanent ARP entries for every peer: every namespace host shares the kernel's one
        # neighbour table (net.ipv4.neigh.default.gc_thresh3, 1024 entries here), which N
        # hosts meeting at once overflow from about 33 (N * (N - 1) entries; dmesg says
        # "neighbor table overflow"), and the packets to a peer without an entry are
        # dropped. Permanent entries are not counted. A real host has a table of its own.
        self.static_neighbors = static_neighbors
        self._requested_subnet = subnet
        self.hosts: list[Host] = []
        self.prefix = ""
        self.bridge = ""
        self.network: ipaddress.IPv4Network | None = None
        self.gateway = ""
        self.state_dir = Path()
        self.client_key = self.workdir / "id_ed25519"
        self.known_hosts = self.workdir / "known_hosts"
        self._created_paths: list[Path] = []
        self._clients: dict[str, paramiko.SSHClient] = {}
        self._clients_lock = threading.Lock()
        self._started = False
        self._closed = False
        self._uid = -1
        self._gid = -1
        self.setup_seconds = 0.0
        """Wall time of the last :meth:`start` (for keeping an eye on test speed)."""

    # -- context manager -------------------------------------------------

    def __enter__(self) -> NamespaceHosts:
        self.start()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self.close()
        except NamespaceHostsError:
            if exc_type is None:
                raise
            # Do not mask the test's own failure; the teardown problem is
            # still visible as a warning.
            warnings.warn(
                "NamespaceHosts teardown failed while handling another error",
                stacklevel=2,
            )

    # -- setup -----------------------------------------------------------

    def start(self) -> NamespaceHosts:
        """Bring up bridge, namespaces and sshds; tear down again on any failure."""
        if self._started:
            raise NamespaceHostsError("already started")
        self._started = True
        t0 = time.monotonic()
        preflight()
        ensure_openssh_server()
        pw = _ensure_user(self.user)
        self._uid, self._gid = pw.pw_uid, pw.pw_gid
        atexit.register(self.close)
        try:
            self._setup()
        except BaseException:
            try:
                self.close()
            except Exception as exc:  # keep the original error; still tell
                warnings.warn(
                    f"cleanup after failed NamespaceHosts setup: {exc}", stacklevel=2
                )
            raise
        self.setup_seconds = time.monotonic() - t0
        return self


    @staticmethod
    def _start_keygen(comment: str, key: Path) -> subprocess.Popen[bytes]:
        """Start ssh-keygen writing a new passphrase-less ed25519 key pair to ``key``."""
        return subprocess.Popen(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)],
            stdin=subprocess.DEVNULL,
            env=dict(_SAFE_ENV),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
    def _setup(self) -> None:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd privsep dir
        self.workdir.mkdir(parents=True, exist_ok=True)
        with _global_lock():
            self._claim_names_and_subnet()
            # Bridge + address inside the lock so a parallel run sees our route.
            _cmd(
                [
                    "ip",
                    "link",
                    "add",
                    "name",
                    self.bridge,
                    "type",
                    "bridge",
                    "stp_state",
                    "0",
                ]
            )
            _cmd(
                [
                    "ip",
                    "addr",
                    "add",
                    f"{self.gateway}/{self.network.prefixlen}",
                    "dev",
                    self.bridge,
                ]
            )
            _cmd(["ip", "link", "set", self.bridge, "up"])

        hosts_root = self.workdir / f"{self.prefix}-hosts"
        self._own(hosts_root)
        hosts_root.mkdir(mode=0o755)
        addrs = list(self.network.hosts())
        for i in range(self.count):
            self.hosts.append(
                Host(
                    index=i,
                    name=f"node{i}",
                    address=str(addrs[FIRST_HOST_OCTET - 1 + i]),
                    namespace=f"{self.prefix}-{i}",
                    user=self.user,
                    veth=f"{self.bridge}v{i}",
                    root=hosts_root / f"node{i}",
                    state_dir=self.state_dir / f"node{i}",
                )
            )

        # Keys: one client key, one host key per host, generated concurrently.
        for p in (
            self.client_key,
            self.client_key.with_suffix(".pub"),
            self.known_hosts,
        ):
            if p.exists() or p.is_symlink():
                raise NamespaceHostsError(
                    f"{p} already exists: is another NamespaceHosts using workdir {self.workdir}? "
                    "Give each instance its own workdir."
                )
            self._own(p)
        keygens = [self._start_keygen(f"{self.user}@{self.prefix}", self.client_key)]
        for h in self.hosts:
            h.state_dir.mkdir(mode=0o700)
            keygens.append(self._start_keygen(f"{h.name}.{self.prefix}", h.state_dir / "ssh_host_ed25519_key"))
        for kg in keygens:
            out, _ = kg.communicate(timeout=30)
            if kg.returncode != 0:
                raise NamespaceHostsError(
                    f"ssh-keygen failed: {out.decode(errors='replace')}"
                )

        for h in self.hosts:
            self._create_netns(h)
            self._prepare_host_files(h)
        if self.static_neighbors:
            self._add_static_neighbors()

        self.known_hosts.write_text(
            "".join(
                f"{h.address} {' '.join(h.host_key_pub.read_text().split()[:2])}\n"
                for h in self.hosts
            )
        )

        for h in self.hosts:
            self._start_sshd(h)
        self._wait_all(self.hosts)

    def _own(self, path: Path) -> None:
        """Remember a workdir path this instance created (removed on close).

        Also recorded under the state dir so :meth:`cleanup_stale` can remove
        it after the owning process was killed.
        """
        self._created_paths.append(path)
        with open(self.state_dir / "owned_paths", "a") as fh:
            fh.write(f"{path}\n")

    def _claim_names_and_subnet(self) -> None:
        """Pick a unique name prefix/bridge name and a free /24 (caller holds lock)."""
        pid = os.getpid()
        while True:
            with _SEQ_LOCK:
                seq = next(_SEQ)
            prefix = f"{NS_PREFIX}-{pid}-{seq}"
            bridge = f"{BRIDGE_PREFIX}{pid:06x}{seq:x}"
            state = STATE_ROOT / prefix
            taken = (
                any(n.startswith(prefix + "-") for n in self._netns_names())
                or Path(f"/sys/class/net/{bridge}").exists()
                or state.exists()
            )
            if not taken:
                break
        if len(bridge) + 1 + len(str(self.count - 1)) > 15:
            raise NamespaceHostsError(
                f"interface name for {bridge} would exceed 15 characters"
            )
        self.prefix, self.bridge, self.state_dir = prefix, bridge, state
        STATE_ROOT.mkdir(mode=0o755, exist_ok=True)
        state.mkdir(mode=0o755)
        self.control_path_dir.mkdir(mode=0o700)
        (state / "owner").write_text(f"{pid} {_proc_start_time(pid)}\n")

        if self._requested_subnet:
            net = ipaddress.IPv4Network(self._requested_subnet)
            if net.num_addresses - 2 < FIRST_HOST_OCTET - 1 + self.count:
                raise NamespaceHostsError(
                    f"subnet {net} too small for {self.count} hosts"
                )
            candidates = [net]
        else:
            if self.count > 254 - FIRST_HOST_OCTET:
                raise NamespaceHostsError("too many hosts for a /24")
            candidates = [ipaddress.IPv4Network(f"10.231.{k}.0/24") for k in range(256)]
        used = _used_ipv4_networks()
        for net in candidates:
            if not any(net.overlaps(u) for u in used):
                break
        else:
            raise NamespaceHostsError(
                f"no free subnet among {candidates[0]}..{candidates[-1]} (all overlap existing routes)"
            )
        self.network = net
        self.gateway = str(next(net.hosts()))

    @staticmethod
    def _netns_names() -> list[str]:
        with contextlib.suppress(FileNotFoundError):
            return sorted(os.listdir("/run/netns"))
        return []

    def _create_netns(self, h: Host) -> None:
        """Namespace with loopback up, eth0 on the bridge and a default route."""
        plen = self.network.prefixlen
        _cmd(["ip", "netns", "add", h.namespace])
        _cmd(
            [
                "ip",
                "link",
                "add",
                h.veth,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                h.namespace,
            ]
        )
        _cmd(["ip", "link", "set", h.veth, "master", self.bridge, "up"])
        _cmd(
            ["ip", "-n", h.namespace, "-batch", "-"],
            input=(
                "link set lo up\n"
                f"addr add {h.address}/{plen} dev eth0\n"
                "link set eth0 up\n"
                # default route so Ansible facts (ansible_default_ipv4) report the
                # host's bridge address, like on a real machine.
                f"route add default via {self.gateway}\n"
            ).encode(),
        )

    def _add_static_neighbors(self) -> None:
        macs = {}
        for h in self.hosts:
            out = _cmd(["ip", "-n", h.namespace, "-j", "link", "show", "eth0"]).stdout
            macs[h.address] = json.loads(out)[0]["address"]
        for h in self.hosts:
            batch = "".join(
                f"neigh replace {address} lladdr {mac} dev eth0 nud permanent\n"
                for address, mac in macs.items()
                if address != h.address
            )
            _cmd(["ip", "-n", h.namespace, "-batch", "-"], input=batch.encode())

    def _prepare_host_files(self, h: Host) -> None:
        """Private dirs, the user's home with authorized_keys, sshd_config, /etc/hosts."""
        h.root.mkdir(mode=0o755)
        for d in self.private_dirs:
            p = h.private_path(d)
            p.mkdir(parents=True, exist_ok=True)
            os.chmod(p, os.stat(d).st_mode & 0o7777)
        home = h.private_path(h.home)
        ssh_dir = home / ".ssh"
        ssh_dir.mkdir(parents=True)
        auth = ssh_dir / "authorized_keys"
        auth.write_text(self.client_key.with_suffix(".pub").read_text())
        # StrictModes: home and .ssh not group/world writable, owned by the user.
        os.chmod(home, 0o755)
        os.chmod(ssh_dir, 0o700)
        os.chmod(auth, 0o600)
        for p in (home, ssh_dir, auth):
            os.chown(p, self._uid, self._gid)

        sd = h.state_dir
        (sd / "sshd_config").write_text(f"""\
# generated by tests/integration/nshosts.py for {h.name} ({h.namespace})
Port 22
ListenAddress {h.address}
AddressFamily inet
HostKey {sd}/ssh_host_ed25519_key
PidFile {sd}/sshd.pid
AuthorizedKeysFile .ssh/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
AllowUsers {self.user}
UsePAM no
StrictModes yes
X11Forwarding no
PrintMotd no
PrintLastLog no
UseDNS no
LogLevel VERBOSE
# Ansible forks and multiplexes; do not throttle test connections.
MaxStartups 200:30:400
MaxSessions 100
AcceptEnv LANG LC_*
Subsystem sftp internal-sftp
""")
        os.chmod(sd / "sshd_config", 0o600)
        (sd / "hosts").write_text(
            "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
            + "".join(f"{o.address}\t{o.name}\n" for o in self.hosts)
        )
        os.chmod(sd / "hosts", 0o644)
        # The hosts have no route to the outside world, so the machine's
        # nameserver would only time out (5 s per try).  With no nameserver
        # line glibc asks 127.0.0.1, which fails at once.
        (sd / "resolv.conf").write_text(
            "# generated by tests/integration/nshosts.py: no DNS inside test hosts\n"
            "options timeout:1 attempts:1\n"
        )
        os.chmod(sd / "resolv.conf", 0o644)

    def _bootstrap_script(self, h: Host) -> str:
        """Shell run in the fresh mount+UTS namespace before exec'ing sshd.

        Mount order matters: if the workdir lives below one of the private
        dirs (pytest's tmp_path is under /tmp), that dir must be mounted
        last or the later bind sources would already be hidden.
        """
        root = str(h.root)

        def hides_source(target: str) -> bool:
            return root == target or root.startswith(target.rstrip("/") + "/")

        mounts = sorted(self.private_dirs, key=hides_source)
        lines = [
            "set -e",
            f"hostname {shlex.quote(h.name)}",
            f"mount --bind {shlex.quote(str(h.state_dir / 'hosts'))} /etc/hosts",
        ]
        if os.path.exists("/etc/resolv.conf"):
            lines.append(
                f"mount --bind {shlex.quote(str(h.state_dir / 'resolv.conf'))} /etc/resolv.conf"
            )
        lines += [
            f"mount --bind {shlex.quote(str(h.private_path(d)))} {shlex.quote(d)}"
            for d in mounts
        ]
        lines.append(
            f"exec {SSHD} -D -f {shlex.quote(str(h.state_dir / 'sshd_config'))} "
            f"-E {shlex.quote(str(h.sshd_log))}"
        )
        return "\n".join(lines)

    def _start_sshd(self, h: Host) -> None:
        """Start sshd in its own netns + private mount/UTS namespace (no waiting)."""
        (h.state_dir / "sshd.pid").unlink(missing_ok=True)
        pid_ns = (
            ["--pid", "--fork", "--kill-child", "--mount-proc"]
            if self.private_pids
            else []
        )
        with open(h.bootstrap_log, "ab") as log:
            proc = subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    h.namespace,
                    "unshare",
                    "--mount",
                    "--uts",
                    *pid_ns,
                    "--propagation",
                    "private",
                    "--",
                    "/bin/sh",
                    "-c",
                    self._bootstrap_script(h),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=dict(_SAFE_ENV),
                start_new_session=True,
            )
        # ip, unshare and sh all exec, so without a PID namespace this PID
        # becomes sshd itself; with one, sshd is the only child of unshare
        # (PID 1 inside the host).
        h.process = proc
        h.pids.append(proc.pid)
        h.sshd_pid = self._child_pid(h) if self.private_pids else proc.pid
        if h.sshd_pid != proc.pid:
            h.pids.append(h.sshd_pid)

    def _wait_sshd(self, h: Host) -> None:
        """Wait until ``h``'s sshd sends an SSH banner on port 22, bounded."""
        deadline = time.monotonic() + self.ssh_timeout
        last_err: Exception | None = None
        while time.monotonic() < deadline:
            if h.process is not None and h.process.poll() is not None:
                raise NamespaceHostsError(
                    f"sshd for {h.name} ({h.address}, netns {h.namespace}) exited with "
                    f"{h.process.returncode} during startup; see {h.sshd_log} and "
                    f"{h.bootstrap_log}:\n{_tail(h.bootstrap_log)}\n{_tail(h.sshd_log)}"
                )
            try:
                with socket.create_connection((h.address, 22), timeout=1.0) as s:
                    if s.recv(64).startswith(b"SSH-"):
                        return
            except OSError as exc:
                last_err = exc
            time.sleep(0.05)
        raise NamespaceHostsError(
            f"sshd for {h.name} ({h.address}, netns {h.namespace}) did not accept TCP on "
            f"port 22 within {self.ssh_timeout:.0f}s (last error: {last_err}); see "
            f"{h.sshd_log} and {h.bootstrap_log}:\n{_tail(h.bootstrap_log)}\n{_tail(h.sshd_log)}"
        )

    @staticmethod
    def _child_pid(h: Host, timeout: float = 5.0) -> int:
        """Controller-view PID of the process unshare --fork started for ``h``.

        That process execs sshd, so this is the sshd PID.  unshare forks
        right after ``ip netns exec`` ran, so this normally takes a few ms.
        """
        assert h.process is not None
        pid = h.process.pid
        deadline = time.monotonic() + timeout
        while True:
            kids: list[str] = []
            with contextlib.suppress(OSError):
                kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            if not kids and not Path(f"/proc/{pid}/task/{pid}/children").exists():
                for entry in os.listdir("/proc"):  # kernels without .../children
                    with contextlib.suppress(OSError, IndexError, ValueError):
                        stat = Path(f"/proc/{entry}/stat").read_text()
                        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                            kids.append(entry)
            # Before the fork, "pid" is still ip/unshare, which has no child.
            if len(kids) == 1 and Path(f"/proc/{pid}/exe").resolve().name == "unshare":
                return int(kids[0])
            if h.process.poll() is not None or time.monotonic() > deadline:
                raise NamespaceHostsError(
                    f"sshd for {h.name} (netns {h.namespace}) did not start; see "
                    f"{h.bootstrap_log}:\n{_tail(h.bootstrap_log)}"
                )
            time.sleep(0.002)

    def _wait_all(self, hosts: Sequence[Host]) -> None:
        with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
            futures = [pool.submit(self._wait_sshd, h) for h in hosts]
            errors = [f.exception() for f in futures]
        errors = [e for e in errors if e is not None]
        if errors:
            raise (
                errors[0]
                if len(errors) == 1
                else NamespaceHostsError("\n\n".join(str(e) for e in errors))
            )

    # -- lookups -----------------------------------------------------------

    def host(self, ref: HostRef) -> Host:
        """Resolve a Host, an index or a name ("node1") to a Host."""
        if isinstance(ref, Host):
            return ref
        if isinstance(ref, int):
            return self.hosts[ref]
        for h in self.hosts:
            if ref in (h.name, h.address, h.namespace):
                return h
        raise KeyError(f"no host {ref!r}")

    def __iter__(self) -> Iterator[Host]:
        return iter(self.hosts)

    def __len__(self) -> int:
        return len(self.hosts)

    # -- Ansible -----------------------------------------------------------

    @property
    def control_path_dir(self) -> Path:
        """Where Ansible's SSH connections to these hosts keep their control sockets.

        One directory per instance, ended by :meth:`close`: the next test's hosts take the
        same addresses, and with Ansible's shared default (~/.ansible/cp, one socket per
        address, port and user) a playbook there met this instance's masters, still alive
        for up to ControlPersist after the namespaces were gone. A session it opened on such
        a master died with it, and Ansible called the host unreachable.
        """
        return self.state_dir / "cp"

    def ssh_common_args(self) -> str:
        """ssh options that keep host key checking on with our known_hosts."""
        return " ".join(
            [
                "-o",
                f"UserKnownHostsFile={shlex.quote(str(self.known_hosts))}",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                "IdentitiesOnly=yes",
            ]
        )

    def write_inventory(
        self,
        path: str | os.PathLike[str],
        slots: int = 1,
        port: int = 2222,
        hostvars: Mapping[Any, Mapping[str, Any]] | None = None,
        groupvars: Mapping[str, Any] | None = None,
        spares: int = 0,
    ) -> Path:
        """Write an Ansible YAML inventory with group ``tf_workers`` (hosts in order).

        ``hostvars`` is keyed by host name, index or Host; its values are merged
        over the connection vars.  ``groupvars`` is merged over the defaults. The last
        ``spares`` hosts go to group ``tf_spares`` instead, with the same group vars.
        """
        hosts: dict[str, dict[str, Any]] = {}
        for h in self.hosts:
            hosts[h.name] = {
                "ansible_host": h.address,
                "ansible_user": self.user,
                "ansible_ssh_private_key_file": str(self.client_key),
                "ansible_ssh_common_args": self.ssh_common_args(),
                "ansible_control_path_dir": str(self.control_path_dir),
            }
        for key, extra in (hostvars or {}).items():
            hosts[self.host(key).name].update(extra)
        group_vars: dict[str, Any] = {
            "tf_worker_port": port,
            "tf_worker_slots": slots,
            "ansible_python_interpreter": "/usr/bin/python3",
        }
        group_vars.update(groupvars or {})
        names = list(hosts)
        members = names[: len(names) - spares] if spares else names
        children: dict[str, Any] = {"tf_workers": {"hosts": {n: hosts[n] for n in members}, "vars": group_vars}}
        if spares:
            children["tf_spares"] = {"hosts": {n: hosts[n] for n in names[len(members):]}, "vars": dict(group_vars)}
        data = {"all": {"children": children}}
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        try:
            import yaml

            text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
        except ImportError:  # JSON is valid YAML
            text = json.dumps(data, indent=2)
        out.write_text(
            f"# generated by tests/integration/nshosts.py ({self.prefix})\n" + text
        )
        return out

    # -- SSH access for assertions -----------------------------------------

    def ssh_argv(self, host: HostRef, *command: str) -> list[str]:
        """argv for the system OpenSSH client (what Ansible uses) to ``host``."""
        h = self.host(host)
        return [
            "ssh",
            "-o",
            "BatchMode=yes",
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "ConnectTimeout=10",
            "-i",
            str(self.client_key),
            f"{self.user}@{h.address}",
            *command,
        ]

    def ssh(
        self,
        host: HostRef,
        *,
        known_hosts: str | os.PathLike[str] | None = None,
        timeout: float = 10.0,
    ) -> paramiko.SSHClient:
        """New paramiko client logged in as the user, host key checking ON.

        Unknown or mismatching host keys raise (RejectPolicy); ``known_hosts``
        overrides the file, which the self-tests use to prove the check is real.
        """
        import paramiko

        h = self.host(host)
        client = paramiko.SSHClient()
        client.load_host_keys(str(known_hosts or self.known_hosts))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(
                h.address,
                port=22,
                username=self.user,
                key_filename=str(self.client_key),
                look_for_keys=False,
                allow_agent=False,
                timeout=timeout,
                banner_timeout=timeout,
                auth_timeout=timeout,
            )
        except BaseException:
            client.close()
            raise
        return client

    def _client(self, h: Host) -> paramiko.SSHClient:
        with self._clients_lock:
            c = self._clients.get(h.name)
            transport = c.get_transport() if c else None
            if c is None or transport is None or not transport.is_active():
                if c is not None:
                    c.close()
                c = self._clients[h.name] = self.ssh(h)
            return c

    def _drop_client(self, h: Host) -> None:
        with self._clients_lock:
            c = self._clients.pop(h.name, None)
        if c is not None:
            with contextlib.suppress(Exception):
                c.close()

    def run(
        self, host: HostRef, command: str, timeout: float = 30
    ) -> tuple[int, str, str]:
        """Run ``command`` as the user on ``host`` over paramiko.

        Returns (exit_status, stdout, stderr).  Independent of Ansible, so
        tests can verify what a playbook really did.  Raises TimeoutError
        after ``timeout`` seconds.
        """
        import select

        h = self.host(host)
        transport = self._client(h).get_transport()
        assert transport is not None
        chan = transport.open_session(timeout=timeout)
        deadline = time.monotonic() + timeout
        out: list[bytes] = []
        err: list[bytes] = []
        try:
            chan.exec_command(command)
            while True:
                while chan.recv_ready():
                    out.append(chan.recv(65536))
                while chan.recv_stderr_ready():
                    err.append(chan.recv_stderr(65536))
                if (
                    chan.exit_status_ready()
                    and not chan.recv_ready()
                    and not chan.recv_stderr_ready()
                ):
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"{h.name}: command timed out after {timeout}s: {command}"
                    )
                select.select([chan], [], [], min(remaining, 0.2))
            status = chan.recv_exit_status()
        finally:
            chan.close()
        return (
            status,
            b"".join(out).decode(errors="replace"),
            b"".join(err).decode(errors="replace"),
        )

    def host_exec(
        self,
        host: HostRef,
        argv: Sequence[str],
        *,
        check: bool = False,
        timeout: float = 30,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` as root inside the host (its net, mount, UTS, PID namespaces).

        For tests that need a privileged look at a host without SSH.  Needs
        the host's sshd to be running (its namespaces are entered by PID).
        """
        h = self.host(host)
        if h.process is None or h.process.poll() is not None:
            raise NamespaceHostsError(f"{h.name} is powered off")
        pid_ns = ["--pid"] if self.private_pids else []
        return _cmd(
            [
                "nsenter",
                "--target",
                str(h.sshd_pid),
                "--mount",
                "--uts",
                "--net",
                *pid_ns,
                "--",
                *argv,
            ],
            check=check,
            timeout=timeout,
        )

    def show_gpus(self, host: HostRef, count: int) -> None:
        """Test-only GPU listing: ``host`` shows ``count`` GPUs where NVIDIA's driver lists
        them (``/proc/driver/nvidia/gpus/<bus id>``), so the runbook's own probe counts
        them as it counts real ones. A tmpfs over ``/proc/driver`` in the host's mount
        namespace holds the listing; a power cycle removes it.
        """
        ids = " ".join(f"0000:{0x10 + i:02x}:00.0" for i in range(count))
        script = (
            "set -e; mount -t tmpfs -o mode=0755,size=64k tfrb-gpus /proc/driver; "
            f"mkdir -p /proc/driver/nvidia/gpus; cd /proc/driver/nvidia/gpus; for g in {ids}; do mkdir $g; done"
        )
        self.host_exec(host, ["/bin/sh", "-c", script], check=True)

    # -- fault injection ---------------------------------------------------

    def netns_pids(self, host: HostRef) -> list[int]:
        """PIDs of every live process in the host's network namespace (``ip netns pids``)."""
        h = self.host(host)
        proc = _cmd(["ip", "netns", "pids", h.namespace], check=False)
        if proc.returncode != 0:
            return []
        return [int(p) for p in proc.stdout.split() if _pid_alive(int(p))]

    def cut_network(self, host: HostRef) -> None:
        """Unplug the host: its switch port goes down, nobody reaches it nor it anyone."""
        h = self.host(host)
        _cmd(["ip", "link", "set", h.veth, "down"])
        self._drop_client(h)

    def restore_network(self, host: HostRef) -> None:
        """Plug the host back in (undo :meth:`cut_network`)."""
        h = self.host(host)
        _cmd(["ip", "link", "set", h.veth, "up"])

    def power_off(self, host: HostRef) -> None:
        """Hard power-off: SIGKILL every process in the namespace, link down.

        The host's disk (its private dirs) survives, as on a real machine;
        :meth:`power_on` boots it again.
        """
        h = self.host(host)
        self._drop_client(h)
        with contextlib.suppress(NamespaceHostsError):
            _cmd(["ip", "link", "set", h.veth, "down"])
        self._kill_host_processes(h)

    def power_on(self, host: HostRef) -> None:
        """Boot a powered-off host: link up, fresh sshd (new mount namespace)."""
        h = self.host(host)
        if h.process is not None and h.process.poll() is None:
            raise NamespaceHostsError(
                f"{h.name} is already running (sshd pid {h.sshd_pid})"
            )
        _cmd(["ip", "link", "set", h.veth, "up"])
        self._start_sshd(h)
        self._wait_all([h])

    def ssh_masters(self) -> dict[Path, int]:
        """The live SSH control masters under :attr:`control_path_dir`: socket -> pid."""
        masters: dict[Path, int] = {}
        if not self.prefix or not self.control_path_dir.is_dir():
            return masters
        for sock in sorted(self.control_path_dir.iterdir()):
            if not sock.is_socket():
                continue
            proc = _cmd(["ssh", "-o", f"ControlPath={sock}", "-O", "check", "tfrb-master"], check=False, timeout=10)
            found = re.search(r"\(pid=(\d+)\)", proc.stderr + proc.stdout)
            if found:
                masters[sock] = int(found.group(1))
        return masters

    def _end_ssh_masters(self, timeout: float = 10.0) -> list[str]:
        """Ask every control master of :attr:`control_path_dir` to exit; wait for each pid."""
        problems: list[str] = []
        masters = self.ssh_masters()
        for sock in masters:
            _cmd(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "tfrb-master"], check=False, timeout=10)
        deadline = time.monotonic() + timeout
        for sock, pid in masters.items():
            while _pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            if _pid_alive(pid):
                problems.append(f"ssh control master {sock} (pid {pid}) did not exit")
        return problems

    def _kill_host_processes(self, h: Host, timeout: float = 10.0) -> list[str]:
        """SIGKILL everything in ``h``'s namespace until nothing is left; reap sshd.

        Loops because a dying sshd may have just forked a session child.
        Returns problems instead of raising so teardown can go on.
        """
        problems: list[str] = []
        deadline = time.monotonic() + timeout
        if h.process is not None and h.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                h.process.kill()
        while True:
            pids = (
                self.netns_pids(h)
                if os.path.exists(f"/run/netns/{h.namespace}")
                else []
            )
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                problems.append(f"{h.name}: processes {pids} survived SIGKILL")
                break
            time.sleep(0.02)
        if h.process is not None:
            try:
                h.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                problems.append(f"{h.name}: sshd pid {h.process.pid} did not exit")
        return problems

    # -- teardown ----------------------------------------------------------

    def close(self) -> None:
        """Kill every process, delete namespaces/veths/bridge, remove own files.

        Idempotent and safe after a half-finished setup.  Raises
        NamespaceHostsError listing anything that could not be cleaned up,
        after having tried everything.
        """
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        problems: list[str] = []
        for name in list(self._clients):
            self._drop_client(self.host(name))
        # While the links are up, so that each master's connection ends on both sides.
        problems += self._end_ssh_masters()
        for h in self.hosts:
            with contextlib.suppress(NamespaceHostsError):
                _cmd(["ip", "link", "set", h.veth, "down"], check=False)
            problems += self._kill_host_processes(h)
        # Namespaces this instance may have created even if self.hosts is short.
        names = [
            n
            for n in self._netns_names()
            if self.prefix and n.startswith(self.prefix + "-")
        ]
        for ns in names:
            proc = _cmd(["ip", "netns", "del", ns], check=False)
            if proc.returncode != 0:
                problems.append(f"ip netns del {ns}: {proc.stderr.strip()}")
        for h in self.hosts:
            if Path(f"/sys/class/net/{h.veth}").exists():
                _cmd(["ip", "link", "del", h.veth], check=False)
        if self.bridge and Path(f"/sys/class/net/{self.bridge}").exists():
            proc = _cmd(["ip", "link", "del", self.bridge], check=False)
            if proc.returncode != 0:
                problems.append(f"ip link del {self.bridge}: {proc.stderr.strip()}")
        if self.keep_logs and self.hosts:
            logs = self.workdir / "logs"
            with contextlib.suppress(OSError):
                logs.mkdir(exist_ok=True)
                for h in self.hosts:
                    for src in (h.sshd_log, h.bootstrap_log):
                        if src.exists():
                            shutil.copyfile(
                                src, logs / f"{self.prefix}-{h.name}-{src.name}"
                            )
        if self.prefix and self.state_dir.is_dir():
            shutil.rmtree(self.state_dir, ignore_errors=True)
        for p in self._created_paths:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
        for ns in names:
            if os.path.exists(f"/run/netns/{ns}"):
                problems.append(f"namespace {ns} still exists")
        if problems:
            raise NamespaceHostsError("teardown incomplete: " + "; ".join(problems))

    # -- leftovers of killed runs ------------------------------------------

    @classmethod
    def cleanup_stale(cls) -> list[str]:
        """Remove namespaces/bridges/state of earlier runs whose owner process died.

        An instance records its owner as PID + kernel start time in
        ``/run/tfrb/<prefix>/owner``; resources of a still-running owner
        (e.g. a parallel pytest) are never touched.  Returns what was removed.
        """
        removed: list[str] = []

        def owner_alive(pid: int, seq: int) -> bool:
            owner = STATE_ROOT / f"{NS_PREFIX}-{pid}-{seq}" / "owner"
            try:
                opid, start = owner.read_text().split()
            except (OSError, ValueError):
                return _pid_alive(pid)  # no record: be conservative
            return _proc_start_time(int(opid)) == start

        prefixes: dict[str, bool] = {}
        for ns in cls._netns_names():
            m = _NS_RE.match(ns)
            if not m:
                continue
            pid, seq = int(m.group(1)), int(m.group(2))
            key = f"{NS_PREFIX}-{pid}-{seq}"
            if key not in prefixes:
                prefixes[key] = owner_alive(pid, seq)
            if prefixes[key]:
                continue
            out = _cmd(["ip", "netns", "pids", ns], check=False).stdout.split()
            for _ in range(50):
                live = [int(p) for p in out if _pid_alive(int(p))]
                if not live:
                    break
                for p in live:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(p, signal.SIGKILL)
                time.sleep(0.02)
                out = _cmd(["ip", "netns", "pids", ns], check=False).stdout.split()
            _cmd(["ip", "netns", "del", ns], check=False)
            removed.append(f"netns {ns}")
        with contextlib.suppress(FileNotFoundError):
            for dev in os.listdir("/sys/class/net"):
                m = _BRIDGE_RE.match(dev)
                if not m or not Path(f"/sys/class/net/{dev}/bridge").exists():
                    continue
                pid, seq = int(m.group(1), 16), int(m.group(2), 16)
                if owner_alive(pid, seq):
                    continue
                _cmd(["ip", "link", "del", dev], check=False)
                removed.append(f"bridge {dev}")
        if STATE_ROOT.is_dir():
            for d in STATE_ROOT.iterdir():
                m = re.match(rf"^{NS_PREFIX}-(\d+)-(\d+)$", d.name)
                if m and not owner_alive(int(m.group(1)), int(m.group(2))):
                    with contextlib.suppress(OSError):
                        for line in (d / "owned_paths").read_text().splitlines():
                            p = Path(line)
                            if (
                                p.is_absolute()
                                and p.name
                                and (
                                    p.name.startswith(m.group(0))
                                    or p.name in _OWNED_FILES
                                )
                            ):
                                if p.is_dir() and not p.is_symlink():
                                    shutil.rmtree(p, ignore_errors=True)
                                else:
                                    p.unlink(missing_ok=True)
                                removed.append(f"path {p}")
                    shutil.rmtree(d, ignore_errors=True)
                    removed.append(f"state {d}")
        return removed
