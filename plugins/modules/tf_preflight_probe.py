#!/usr/bin/python
# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Look at a worker host before anything of a run is launched there.

Four modes, all read-only for the host's runs:

* ``host``: which of this host's worker ports are taken (and by which process, when it
  can be seen), the free disk space under the base directory, whether the run id was
  already launched here, and how many GPUs the host shows; with ``listen``, it then
  holds short-lived listeners on the ports from a detached process; with ``endpoints``
  too, it then does the ``connect`` part in the same run (the one-run probe: one module
  run per host for the whole preflight, where every host runs it at once).
* ``connect``: from this host, open a connection to every worker endpoint of the cluster,
  as TensorFlow will (up to 32 at once), and report those that cannot be reached and why;
  then wait, for a bounded time, until this host's own listener has heard every peer and
  ended.
* ``stop``: tell this host's listeners to end and wait until the ports are free again
  (after a failed preflight, or for a listener that outlived its host's ``connect``).
* ``versions``: what the worker interpreter reports of its Python, TensorFlow and numpy
  (``host`` mode does the same when given ``python``).
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_preflight_probe
short_description: Probe a worker host before a TensorFlow run is launched
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - V(host) mode reports taken ports with their owning process, free disk space, a run id
    already launched, the number of GPUs, and what the cluster's addresses resolve to here.
  - V(host) with O(listen), then V(connect), check that every worker can reach every other
    worker's port, with short-lived listeners in place of TensorFlow. A listener ends by
    itself once every peer reached every port it holds, or at its O(timeout), which no
    client can extend; V(connect) waits up to O(wait) for this host's own listener to end.
    V(stop) ends the listeners early, after a failed preflight.
  - V(host) with O(listen) and O(endpoints) does both in one run. It binds its listeners,
    then connects to every endpoint (each within O(probe_timeout)), trying a refused one
    again for up to O(settle) seconds while the peers' own runs bind theirs, and waits up
    to O(wait) for its listener to end. Every host must run it at the same time (C(--forks)
    at least the number of hosts), since a host whose peers start later would wait for nothing.
  - The listener answers first, with the token of its host and run; a connecting host sends
    its hello only to the listener it expects, so that a service that is not the probe (a
    port taken on a peer, a wrong address) gets nothing from it.
  - The probe scales with the slowest round trip, not with the number of hosts. A listener
    serves all its connections at once, each for at most 2 seconds from its accept (a
    silent or trickling client is cut off then and delays no other). V(connect) tries up to
    32 endpoints at once.
  - V(versions) mode reports what the worker interpreter O(python) says of its versions.
  - Reads the host's state only; apart from the short-lived listeners, changes nothing.
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
options:
  mode:
    description: What to probe (see the description).
    type: str
    required: true
    choices: [host, connect, stop, versions]
  ports:
    description: This host's worker ports (in V(connect) mode, those its listener holds).
    type: list
    elements: int
    default: []
  base_dir:
    description: The host's base directory for runs (V(host) mode; C(~) is the remote user's home).
    type: path
  run_id:
    description: The run about to be launched (V(host) mode). In V(connect) mode, each
      endpoint must answer as that run's probe of its host.
    type: str
  endpoints:
    description: Every worker of the cluster, as C(index), C(host), C(address), C(port) (V(connect) mode;
      in V(host) mode, reached once the listeners are up, as V(connect) mode does).
    type: list
    elements: dict
    default: []
  me:
    description: This host's inventory name, sent to each listener (V(connect) mode); with
      O(run_id), what this host's listener answers and which stop it obeys (V(host) and
      V(stop) modes).
    type: str
    default: ""
  peers:
    description: Inventory names a listener waits to hear from before it ends (V(host) mode with O(listen)).
    type: list
    elements: str
    default: []
  timeout:
    description:
      - Seconds to keep trying one endpoint (V(connect)), for a listener to live
        (V(host) with O(listen)), or to wait for the ports to be free (V(stop)).
      - The roles pass it for V(connect) and V(host); V(stop) uses this default (the one
        place of that value).
    type: float
    default: 10
  addresses:
    description: In V(host) mode, every worker address of the cluster, to resolve on this host.
    type: list
    elements: str
    default: []
  python:
    description: In V(host) and V(versions) modes, a worker interpreter to ask for its versions with
      O(versions_code); empty, no versions are read.
    type: str
    default: ""
  interpreter:
    description: In V(host) mode, C(tf_worker_python) as given (a path, or a command found on
      the remote user's C(PATH)), looked up; where O(python) is empty (its versions are not
      read in this run), the file found is also run once, as C(<interpreter> -c <code>), to
      show that it runs as Python 3. Empty for the managed virtualenv.
    type: path
    default: ""
  checkpoint_dir:
    description: In V(host) mode, C(tf_checkpoint_dir) as given; empty for the default under
      the run's directory.
    type: path
    default: ""
  versions_code:
    description: Python code that prints the interpreter's versions as JSON.
    type: str
    default: ""
  listener_pid:
    description: In V(stop) mode, the listener process the V(host) mode started (0 when none);
      only the ports it holds are told to stop. Unset, every port is. In V(connect) mode, the
      listener to wait for (0 or unset, none).
    type: int
  wait:
    description: In V(connect) mode (and V(host) mode with O(endpoints)), seconds to wait,
      after this host's connections, for its listener (O(listener_pid), or the one V(host)
      mode started) to end and O(ports) to be free; not waited for when a connection failed
      (the run is refused, and the listeners are stopped).
    type: float
    default: 0
  settle:
    description: Seconds to keep trying an endpoint that refuses the connection (its
      listener may not be up yet), when longer than the timeout of one endpoint (V(connect)
      mode, and V(host) mode with O(endpoints)).
    type: float
    default: 0
  probe_timeout:
    description: In V(host) mode with O(endpoints), seconds to keep trying one endpoint
      (O(timeout) is the listeners' lifetime there).
    type: float
    default: 10
  listen:
    description: In V(host) mode, once the ports are seen free, bind a listener on each and
      serve them from a detached process until every peer said hello, a V(stop) arrives or
      O(timeout) passes.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: In check mode it only reads; nothing listens on the ports.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Look at the host and hold its worker ports with probe listeners
  tf_runbook.multiworker.tf_preflight_probe:
    mode: host
    ports: [2222, 2223]
    base_dir: ~/tf-runs
    run_id: mnist-20260101-1200
    me: "{{ inventory_hostname }}"
    addresses: [10.0.0.11, 10.0.0.12]
    listen: true
    peers: "{{ ansible_play_hosts }}"
    timeout: 60
  register: host_probe

- name: Look, listen and reach every worker port in one run (every host at once)
  tf_runbook.multiworker.tf_preflight_probe:
    mode: host
    ports: [2222]
    base_dir: ~/tf-runs
    run_id: mnist-20260101-1200
    me: "{{ inventory_hostname }}"
    listen: true
    peers: "{{ ansible_play_hosts }}"
    timeout: 120
    endpoints:
      - {index: 0, host: w1, address: 10.0.0.11, port: 2222}
      - {index: 1, host: w2, address: 10.0.0.12, port: 2222}
    probe_timeout: 5
    settle: 10
    wait: 10
  register: one_run

- name: Reach every worker port of the cluster from this host
  tf_runbook.multiworker.tf_preflight_probe:
    mode: connect
    me: "{{ inventory_hostname }}"
    run_id: mnist-20260101-1200
    endpoints:
      - {index: 0, host: w1, address: 10.0.0.11, port: 2222}
      - {index: 1, host: w2, address: 10.0.0.12, port: 2222}
    timeout: 10
    ports: [2222, 2223]
    listener_pid: "{{ host_probe.listener_pid }}"
    wait: 20
  register: reach

- name: Stop this host's probe listeners (after a failed preflight)
  tf_runbook.multiworker.tf_preflight_probe:
    mode: stop
    ports: [2222, 2223]
    run_id: mnist-20260101-1200
    me: "{{ inventory_hostname }}"
    listener_pid: "{{ host_probe.listener_pid }}"

- name: Ask the worker interpreter for its versions
  tf_runbook.multiworker.tf_preflight_probe:
    mode: versions
    python: /home/u/tf-venv/bin/python
    versions_code: "import json, sys; print(json.dumps({'python': sys.version.split()[0]}))"
  register: versions
"""

RETURN = r"""
busy_ports:
  description: Each taken port with C(port), C(error), and C(pid) and C(process) when seen.
  type: list
  elements: dict
  returned: host mode
  sample: [{"port": 2222, "error": "Address already in use", "pid": 4242, "process": "python3"}]
free_mb:
  description: Free space under the base directory (its nearest existing parent).
  type: int
  returned: host mode
base_dir:
  description: O(base_dir), absolute.
  type: str
  returned: host mode
run_launched:
  description: A record that shows the run id was already launched here ('' when none).
  type: str
  returned: host mode
base_dir_identity:
  description: The kernel's boot id, the device and inode of O(base_dir) (or of its nearest existing parent) and the
    rest of its path; two hosts with the same identity are one machine with one base directory. Empty where the
    boot id cannot be read.
  type: str
  returned: host mode
base_dir_state:
  description: What O(base_dir) is on this host (path, user and uid, exists, and is_dir, owner, owner_uid, mode
    and the entries that are not the runbook's own, and whether its C(runs) is a directory and whose, or the
    nearest existing parent and whether the user can create the directory there), judged on the controller by
    module_utils/tf_base_dir.py.
  type: dict
  returned: host mode
interpreter_state:
  description: What O(interpreter) is here (C(path), C(found) for a command name on C(PATH), or
    C(exists), C(is_file), C(executable)); where it was run (see O(interpreter)), C(python) (its
    version, C(3.11.2)) when it ran as Python 3, else C(fault), why not (it cannot be executed,
    its exit status and what it said, another Python); empty when O(interpreter) is.
  type: dict
  returned: host mode
checkpoint_state:
  description: What O(checkpoint_dir) is here (C(path), C(exists), and C(is_dir) and C(writable),
    or the nearest existing C(parent) and C(parent_writable)), with C(runs_dir) where it lies in the runs
    directory under O(base_dir); empty when O(checkpoint_dir) is.
  type: dict
  returned: host mode
gpus:
  description: GPUs the host shows.
  type: int
  returned: host mode
resolved:
  description: Each of O(addresses) to the IP addresses it stands for here.
  type: dict
  returned: host mode
sources:
  description: The addresses this host's connections to O(addresses) come from.
  type: list
  elements: str
  returned: host mode
listener_pid:
  description: The detached listener process (0 when none was started).
  type: int
  returned: host mode
versions:
  description: What O(versions_code) printed, or C(error).
  type: dict
  returned: versions mode, or host mode with O(python)
failures:
  description: Each endpoint that could not be reached, with C(reason) ([] in V(host) mode without
    O(endpoints)).
  type: list
  elements: dict
  returned: connect and host modes
listener_gone:
  description: Whether this host's listener (O(listener_pid), or the one V(host) mode started) had
    ended, and freed O(ports), when the module returned (true when there was none).
  type: bool
  returned: connect and host modes
ports_held:
  description: The ports of O(ports) still held when the module returned ([] once the listener is gone).
  type: list
  elements: int
  returned: connect and host modes
"""

import concurrent.futures
import errno
import ipaddress
import json
import os
import re
import selectors
import shutil
import socket
import threading
import time
from typing import Any, Callable

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_base_dir import base_dir_state, creatable
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    CHECKPOINTS_DIR,
    LAUNCH_RECORDS,
    RETRY_PREFIX,
    RUNS_DIR,
    WORKER_PREFIX,
    run_dir_of,
)

STOP = b"stop\n"
PROBE = "tf-runbook-probe"
# Seconds one connection to a probe listener may take, from its accept to its close.
CONNECTION_BUDGET = 2.0
# Most connections one host's connect mode has open at once.
CONNECT_PARALLEL = 32


def probe_token(run_id: str, host: str) -> str:
    """What the probe listener of ``host`` answers for run ``run_id``: a connector knows
    from it that the listener that accepted is the probe of that host and run, not an
    unrelated service at a wrong address, nor another host's probe."""
    return f"{PROBE} {run_id} {host}"


def stop_message(token: str) -> bytes:
    return f"stop {token}".strip().encode() + b"\n"


def bind_error(port: int) -> int:
    """0 when ``port`` can be bound on every interface, as TensorFlow binds it, else errno."""
    for family, address in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 on this host: the IPv4 bind below decides
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind((address, port))
            return 0
        except OSError as exc:
            if exc.errno != errno.EAFNOSUPPORT and exc.errno != errno.EADDRNOTAVAIL:
                return exc.errno or errno.EADDRINUSE
        finally:
            sock.close()
    return 0


def listening_inodes(port: int, proc: str = "/proc") -> set[str]:
    """Socket inodes of TCP listeners on ``port``, from /proc/net/tcp and tcp6."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(os.path.join(proc, "net", table), encoding="ascii") as handle:
                lines = handle.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10:
                continue
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(inode)
    return inodes


def port_owner(port: int, proc: str = "/proc") -> dict[str, Any]:
    """The pid and process name holding ``port``, where this user may see them.

    Only the process name (``comm``) is reported, never its command line, which may hold
    secrets.
    """
    wanted = {f"socket:[{inode}]" for inode in listening_inodes(port, proc)}
    if not wanted:
        return {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        fd_dir = os.path.join(proc, entry, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue  # another user's process, or gone
        links = set()
        for fd in fds:
            try:
                links.add(os.readlink(os.path.join(fd_dir, fd)))
            except OSError:
                continue  # closed meanwhile
        if wanted.intersection(links):
            try:
                with open(os.path.join(proc, entry, "comm"), encoding="utf-8", errors="replace") as handle:
                    name = handle.read().strip()
            except OSError:
                name = ""
            return {"pid": int(entry), "process": name}
    return {}


def nearest_existing(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def launched_record(base_dir: str, run_id: str) -> str:
    """A record that shows ``run_id`` was already launched under ``base_dir``, or '': a
    worker's launch record, or backups in the run's own checkpoint directory (its worker
    directories removed, a run copied in): a new run there would resume from them. The
    runbook's own dot files in it do not count (a deploy may write them)."""
    run_dir = run_dir_of(base_dir, run_id)
    if not os.path.isdir(run_dir):
        return ""
    for root, dirs, files in os.walk(run_dir):
        dirs[:] = [d for d in dirs if d.startswith((WORKER_PREFIX, RETRY_PREFIX))]
        for record in LAUNCH_RECORDS:
            if record in files:
                return os.path.join(root, record)
    backups = os.path.join(run_dir, CHECKPOINTS_DIR)
    try:
        if any(not name.startswith(".") for name in os.listdir(backups)):
            return backups
    except OSError:
        pass
    return ""


# Runs a command (argv) for at most ``timeout`` seconds and gives (rc, stdout, stderr);
# raises OSError when the command cannot start, TimeoutError when its time ran out.
Runner = Callable[[list[str], float], tuple[int, str, str]]


def command_runner(module: AnsibleModule) -> Runner:
    """The module's run_command as a Runner: arguments passed as given (no ``~`` or ``$``
    expansion, no shell), the command killed once ``timeout`` seconds have passed."""

    def run(argv: list[str], timeout: float) -> tuple[int, str, str]:
        expired = threading.Event()
        timers: list[threading.Timer] = []

        def arm(process: Any) -> None:
            def kill() -> None:
                expired.set()
                process.kill()

            timer = threading.Timer(timeout, kill)
            timer.daemon = True
            timers.append(timer)
            timer.start()

        try:
            rc, out, err = module.run_command(
                argv, expand_user_and_vars=False, handle_exceptions=False, before_communicate_callback=arm
            )
        finally:
            for timer in timers:
                timer.cancel()
                timer.join()  # no thread left when the host mode forks its listener
        if expired.is_set():
            raise TimeoutError(f"{argv[0]} timed out after {timeout:g} seconds")
        return rc, out, err

    return run


def count_gpus(proc: str = "/proc", run: Runner | None = None) -> int:
    """GPUs the host shows: NVIDIA's driver lists one directory per GPU; else what
    ``nvidia-smi -L`` lists, run with ``run`` (None: not asked)."""
    listing = os.path.join(proc, "driver", "nvidia", "gpus")
    if os.path.isdir(listing):
        return len(os.listdir(listing))
    smi = shutil.which("nvidia-smi")
    if smi and run is not None:
        try:
            _rc, out, _err = run([smi, "-L"], 20)
        except OSError:  # TimeoutError among them
            return 0
        return sum(1 for line in out.splitlines() if line.startswith("GPU "))
    return 0


def probe_host(
    ports: list[int], base_dir: str, run_id: str, proc: str = "/proc", run: Runner | None = None
) -> dict[str, Any]:
    """``base_dir`` as the module got it: ``~`` already expanded (the option's type is path)."""
    base = base_dir
    busy = []
    for port in ports:
        err = bind_error(port)
        if err:
            busy.append({"port": port, "error": os.strerror(err), **port_owner(port, proc)})
    usage = shutil.disk_usage(nearest_existing(base))
    return {
        "busy_ports": busy,
        "free_mb": usage.free // (1024 * 1024),
        "base_dir": os.path.abspath(base),
        "run_launched": launched_record(os.path.abspath(base), run_id),
        "base_dir_state": base_dir_state(base),
        "gpus": count_gpus(proc, run),
        "base_dir_identity": base_dir_identity(base, proc),
    }


def base_dir_identity(base_dir: str, proc: str = "/proc") -> str:
    """What tells two inventory hosts that are one machine with one base directory: the
    running kernel's boot id (shared by containers and network namespaces of one machine,
    new at every boot), the device and inode of the base directory or of its nearest
    existing parent, and the rest of its path. Two hosts with the same identity would
    keep their runs in the same directories. Empty where the boot id cannot be read."""
    try:
        with open(os.path.join(proc, "sys/kernel/random/boot_id"), encoding="ascii") as handle:
            boot = handle.read().strip()
    except OSError:
        return ""
    path = os.path.abspath(base_dir)
    existing = nearest_existing(path)
    try:
        info = os.stat(existing)
    except OSError:
        return ""
    rest = os.path.relpath(path, existing)
    return f"{boot}:{info.st_dev}:{info.st_ino}:{rest}"


def interpreter_state(python: str) -> dict[str, Any]:
    """Where ``python`` (tf_worker_python) is on this host, looked up, not run: a command
    name is looked for on PATH (the supervisor is started with this environment); ``~``
    expanded by the option's type."""
    if not python:
        return {}
    if "/" not in python:
        return {"path": python, "found": shutil.which(python) or ""}
    path = python
    is_file = os.path.isfile(path)
    # access() says yes to root for any file: an execute bit must be set too.
    executable = is_file and os.access(path, os.X_OK) and bool(os.stat(path).st_mode & 0o111)
    return {"path": path, "exists": os.path.exists(path), "is_file": is_file, "executable": executable}


# What the worker interpreter is run with, where its versions are not read: it answers with
# its version, and a Python 2 can still be named.
PYTHON3_CODE = "import sys; sys.stdout.write('python %d.%d.%d' % tuple(sys.version_info[:3]))"
PYTHON_ANSWER = re.compile(r"python (\d+)\.(\d+)\.(\d+)")


def interpreter_file(state: dict[str, Any]) -> str:
    """The file the lookup found for tf_worker_python, "" where it found none (the lookup's
    own problem then names why)."""
    if "found" in state:
        return state["found"] or ""
    return state["path"] if state.get("executable") else ""


def interpreter_python3(python: str, run: Runner, timeout: float = 30) -> tuple[str, str]:
    """(its version, "") when ``python`` runs as Python 3, else ("", why not)."""
    out, fault = run_interpreter(python, PYTHON3_CODE, run, timeout)
    if fault:
        return "", fault
    said = out.strip()
    answer = PYTHON_ANSWER.fullmatch(said)
    if answer is None:
        return "", f"it printed {said[-200:]!r} for its version" if said else "it printed nothing for its version"
    version = ".".join(answer.groups())
    return (version, "") if answer.group(1) == "3" else ("", f"it is Python {version}")


def checkpoint_state(checkpoint_dir: str, base_dir: str = "") -> dict[str, Any]:
    """Whether the run's checkpoints can be made under ``checkpoint_dir`` on this host;
    ``runs_dir`` where that directory lies in (or is) the runs directory under ``base_dir``,
    where every run keeps its own directory (symlinks followed)."""
    if not checkpoint_dir:
        return {}
    path = os.path.abspath(checkpoint_dir)
    inside: dict[str, Any] = {}
    if base_dir:
        runs = os.path.realpath(os.path.join(os.path.abspath(base_dir), RUNS_DIR))
        real = os.path.realpath(path)
        if os.path.commonpath([real, runs]) == runs:
            inside = {"runs_dir": runs}
    if os.path.exists(path):
        return {"path": path, "exists": True, "is_dir": os.path.isdir(path),
                "writable": os.access(path, os.W_OK | os.X_OK), **inside}
    return {"path": path, "exists": False, **creatable(path), **inside}


def resolve_addresses(addresses: list[str]) -> dict[str, list[str]]:
    """What each worker address stands for on this host: its IP addresses (empty when a
    name does not resolve here). IP literals stand for themselves."""
    resolved = {}
    for address in addresses:
        try:
            resolved[address] = [ipaddress.ip_address(address).compressed]
            continue
        except ValueError:
            pass
        try:
            infos = socket.getaddrinfo(address, None, proto=socket.IPPROTO_TCP)
        except (socket.gaierror, UnicodeError):
            resolved[address] = []
            continue
        resolved[address] = sorted({ipaddress.ip_address(i[4][0].split("%", 1)[0]).compressed for i in infos})
    return resolved


def source_addresses(resolved: dict[str, list[str]]) -> list[str]:
    """The addresses this host's connections to those IP addresses come from, as its
    routing picks them (a connected UDP socket sends nothing). On a multi-homed host that
    may not be the address it advertises, and a firewall must accept that one."""
    sources = set()
    for ips in resolved.values():
        for ip in ips:
            family = socket.AF_INET6 if ipaddress.ip_address(ip).version == 6 else socket.AF_INET
            try:
                with socket.socket(family, socket.SOCK_DGRAM) as sock:
                    sock.connect((ip, 9))
                    sources.add(ipaddress.ip_address(sock.getsockname()[0].split("%", 1)[0]).compressed)
            except OSError:
                continue  # no route from here: the reach probe names it
    return sorted(sources, key=ipaddress.ip_address)


def run_interpreter(python: str, code: str, run: Runner, timeout: float) -> tuple[str, str]:
    """(what ``code`` printed under the worker interpreter ``python``, "") or ("", why it
    did not run), run with ``run`` for at most ``timeout`` seconds."""
    try:
        rc, out, err = run([python, "-c", code], timeout)
    except OSError as exc:  # TimeoutError among them, which has no strerror
        return "", f"it cannot be executed: {exc.strerror}" if exc.strerror else str(exc)
    if rc != 0:
        said = (err or out).strip()[-300:]
        return "", said or f"it exited with status {rc}, saying nothing"
    return out, ""


def interpreter_versions(python: str, code: str, run: Runner, timeout: float = 120) -> dict[str, Any]:
    """What ``code`` prints under the worker interpreter ``python`` (run with ``run``, for at
    most ``timeout`` seconds), or why it did not run."""
    out, fault = run_interpreter(python, code, run, timeout)
    if fault:
        return {"error": f"{python} does not run: {fault}"}
    try:
        return dict(json.loads(out))
    except ValueError:
        return {"error": f"{python} printed no versions: {out.strip()[-300:]}"}


def _open_listeners(ports: list[int]) -> dict[socket.socket, int]:
    listeners = {}
    for port in ports:
        try:
            sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            address = "::"
        except OSError:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            address = "0.0.0.0"
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(1024)  # every host of a large cluster connects at once
        listeners[sock] = port
    return listeners


def listen(ports: list[int], peers: list[str], lifetime: float, token: str = "") -> dict[str, Any]:
    """Accept hellos on every port until each peer reached each port, or ``stop``."""
    return serve(_open_listeners(ports), peers, lifetime, token)


def serve(
    listeners: dict[socket.socket, int], peers: list[str], lifetime: float, token: str = "",
    budget: float = CONNECTION_BUDGET,
) -> dict[str, Any]:
    """Answer each hello with ``token``; end on a ``stop`` that carries the same token, once
    every peer reached every port, or after ``lifetime`` seconds, whichever comes first.

    Every connection is served at once (one selector, no connection waits behind another),
    and each gets at most ``budget`` seconds from its accept: the listener sends ``token``
    at once (a connector checks it before it sends anything, so that a service that is not
    the probe never gets a byte from it), then the peer sends its line and closes first (so
    that TIME_WAIT stays on the peer's side and not on the worker port that TensorFlow
    binds next). A client that trickles bytes is cut off at its budget,
    and nothing a client does moves the end of the listener's ``lifetime``.
    """
    heard: dict[int, set[str]] = {port: set() for port in listeners.values()}
    expected = set(peers)
    deadline = time.monotonic() + lifetime
    stopped = False
    selector = selectors.DefaultSelector()
    # Each open connection: its port, the bytes of its line so far (None once answered),
    # and when its budget ends.
    open_conns: dict[socket.socket, list[Any]] = {}

    def finish(conn: socket.socket) -> None:
        selector.unregister(conn)
        del open_conns[conn]
        conn.close()

    def close_listeners() -> None:
        for sock in listeners:
            if sock.fileno() >= 0:
                selector.unregister(sock)
                sock.close()

    for sock in listeners:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    try:
        accepting = True
        while True:
            now = time.monotonic()
            for conn in [c for c, (_port, _line, ends) in open_conns.items() if ends <= now]:
                finish(conn)  # out of budget: silent, trickling, or slow to close
            if accepting and (stopped or (expected and all(expected <= names for names in heard.values()))):
                accepting = False
                close_listeners()  # the ports are free; answered peers may still close first
            if now >= deadline or (not accepting and not open_conns):
                break
            next_end = min([deadline] + [ends for _port, _line, ends in open_conns.values()])
            for key, _events in selector.select(min(0.2, max(next_end - now, 0.0))):
                sock = key.fileobj
                if sock in listeners:
                    try:
                        conn, _peer = sock.accept()
                    except OSError:
                        continue  # the peer gave up before the accept
                    conn.setblocking(False)
                    # The listener speaks first: a connector checks who answered before
                    # it sends a byte, so that an unrelated service gets nothing from it.
                    try:
                        conn.send(f"{token or PROBE}\n".encode())
                    except OSError:
                        conn.close()
                        continue  # the peer did not wait for the answer
                    open_conns[conn] = [listeners[sock], b"", min(time.monotonic() + budget, deadline)]
                    selector.register(conn, selectors.EVENT_READ)
                    continue
                state = open_conns[sock]
                try:
                    data = sock.recv(256)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if not data:
                    finish(sock)  # the peer closed: done with it
                    continue
                if state[1] is None:
                    continue  # heard: wait for the peer to close
                state[1] += data
                if b"\n" not in state[1] and len(state[1]) < 256:
                    continue
                line, state[1] = state[1].split(b"\n", 1)[0] + b"\n", None
                if line == stop_message(token):
                    stopped = True
                elif line.startswith(b"hello "):
                    heard[state[0]].add(line[6:].decode("utf-8", "replace").strip())
    finally:
        for conn in list(open_conns):
            finish(conn)
        close_listeners()
        selector.close()
    return {"heard": {str(port): sorted(names) for port, names in heard.items()}, "stopped": stopped}


def start_listener(ports: list[int], peers: list[str], lifetime: float, token: str = "") -> int:
    """Bind the listeners now, serve them from a detached process; return its pid.

    Binding before returning means that every listener is up once the task is done on
    every host, so the connect probes never race it. The server process leaves the
    module's session and output, so that the module returns at once.
    """
    listeners = _open_listeners(ports)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # first child: detach, fork the server, report its pid, leave
        try:
            os.close(read_end)
            os.setsid()
            server = os.fork()
            if server == 0:
                os.close(write_end)
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                try:
                    serve(listeners, peers, lifetime, token)
                finally:
                    os._exit(0)
            os.write(write_end, str(server).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    with os.fdopen(read_end) as handle:
        server_pid = int(handle.read() or 0)
    for sock in listeners:
        sock.close()
    return server_pid


def listen_failure(me: str, ports: list[int], exc: OSError) -> str:
    """Why the probe's listeners could not start. The look found the ports free a moment
    before (else nothing listens): a port taken since is most often another host of the
    play on this same machine, whose probe listens on it now."""
    since = (
        ": they were free when the probe looked a moment before, so another host of the play holds them on "
        "this same machine (an inventory that names one machine twice: list it once, with tf_worker_slots), "
        "or a process took them since"
        if exc.errno == errno.EADDRINUSE else ""
    )
    return (f"Preflight refused the run: host {me}: cannot listen on worker port(s) "
            f"{', '.join(str(p) for p in ports)}: {exc.strerror or exc}{since}")


def read_line(conn: socket.socket, timeout: float) -> bytes:
    """The first line the peer sends within ``timeout`` seconds (at most 256 bytes)."""
    conn.settimeout(max(timeout, 0.1))
    data = b""
    try:
        while b"\n" not in data and len(data) < 256:
            chunk = conn.recv(256)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    return data.split(b"\n", 1)[0]


def reach(
    endpoint: dict[str, Any], me: str, timeout: float, expect: str | None = None, settle: float = 0.0
) -> str:
    """'' when ``endpoint`` accepts a connection within ``timeout`` seconds and, with
    ``expect``, answers it with that token; else why not.

    A refused connection is tried again until ``timeout`` or, when longer, ``settle``
    seconds have passed: the peer's listener may not be up yet (in the one-run probe, each
    host binds its listeners in its own module run, at slightly different times). A
    connection that gets no answer is given ``timeout`` seconds, never more.
    """
    deadline = time.monotonic() + max(timeout, settle)
    last = "no answer"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return last
        try:
            with socket.create_connection((endpoint["address"], int(endpoint["port"])), timeout=min(left, timeout)) as conn:
                if expect is None:
                    conn.sendall(f"hello {me}\n".encode())
                    return ""
                # The probe's listener speaks first: nothing is sent to a port that does
                # not answer as this run's probe of that host (an unrelated service).
                answer = read_line(conn, max(deadline - time.monotonic(), 2.0))
                if answer.decode("utf-8", "replace") == expect:
                    conn.sendall(f"hello {me}\n".encode())
                    return ""
                shown = answer.decode("utf-8", "replace")[:80].encode("unicode_escape").decode("ascii")
                return (
                    f"the port answered, but not as this run's probe on host {endpoint.get('host')} "
                    f"(it said {shown!r}): another service listens at that address; is tf_worker_address right?"
                )
        except socket.timeout:
            return f"no answer within {timeout:g} s (a firewall dropping the packets?)"
        except socket.gaierror as exc:
            return f"address {endpoint['address']!r} does not resolve: {exc.strerror}"
        except OSError as exc:
            # Refused: the listener may not be up yet; keep trying until the deadline.
            last = f"{exc.strerror or exc} (a firewall rejecting the connection, or the address is not that host's?)"
            time.sleep(0.2)


def connect_all(
    endpoints: list[dict[str, Any]], me: str, timeout: float, run_id: str | None = None,
    parallel: int = CONNECT_PARALLEL, settle: float = 0.0,
) -> list[dict[str, Any]]:
    """Every endpoint that cannot be reached, or (with ``run_id``) that does not answer as
    the probe of its host for that run, in the order of ``endpoints``.

    Up to ``parallel`` endpoints are tried at once, so that the probe takes about the
    slowest round trip (at most ``timeout`` seconds each), not the sum of them. A refused
    endpoint is tried again for up to ``settle`` seconds (see ``reach``).
    """

    def attempt(endpoint: dict[str, Any]) -> str:
        expect = None if run_id is None else probe_token(run_id, str(endpoint.get("host")))
        return reach(endpoint, me, timeout, expect, settle)

    if not endpoints:
        return []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(parallel, len(endpoints)))) as pool:
        reasons = list(pool.map(attempt, endpoints))
    return [{**endpoint, "reason": reason} for endpoint, reason in zip(endpoints, reasons) if reason]


def process_gone(pid: int, proc: str = "/proc") -> bool:
    """Whether process ``pid`` has ended (a zombie has: an orphan's reaper may be slow)."""
    try:
        with open(os.path.join(proc, str(pid), "stat"), encoding="ascii", errors="replace") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def await_listener_end(ports: list[int], pid: int, wait: float) -> list[int]:
    """Wait up to ``wait`` seconds for this host's probe listener ``pid`` (0: none was
    started) to end by itself and for ``ports`` to be free; return the ports still held
    then ([] once it ended and they are free).

    The listener ends once every peer reached every port it holds, so this returns when
    the last host of the cluster has connected here; it never shortens the listener's life.
    """
    if not pid:
        return []
    deadline = time.monotonic() + wait
    while True:
        held = [port for port in ports if bind_error(port)] if process_gone(pid) else list(ports)
        if not held or time.monotonic() >= deadline:
            return held
        time.sleep(0.1)


def stop_listeners(ports: list[int], wait: float, token: str = "", pid: int | None = None) -> list[int]:
    """Send ``stop`` to this host's listeners; return the ports still taken after ``wait``.

    With ``pid`` (the probe's listener, 0 when none was started), only the ports that
    process holds are told to stop and waited for: a port held by any other process (the
    reason the run was refused, often) gets no byte from the probe.
    """
    if pid is not None:
        ports = [port for port in ports if pid and port_owner(port).get("pid") == pid]
    for port in ports:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                conn.sendall(stop_message(token))
        except OSError:
            pass  # nothing listens: already ended
    deadline = time.monotonic() + wait
    busy = list(ports)
    while busy and time.monotonic() < deadline:
        busy = [port for port in busy if bind_error(port)]
        if busy:
            time.sleep(0.1)
    return busy


def connect_and_await(params: dict[str, Any], listener_pid: int) -> dict[str, Any]:
    """Connect to every endpoint of ``params``, then wait for this host's listener
    ``listener_pid`` to end: the results of the connect part (``failures``,
    ``listener_gone``, ``ports_held``), in V(connect) mode or after V(host) mode's look."""
    connect_timeout = params["probe_timeout"] if params["mode"] == "host" else params["timeout"]
    failures = connect_all(
        params["endpoints"], params["me"], connect_timeout, params["run_id"], settle=params["settle"]
    )
    # A failed connection refuses the run, whose rescue stops the listeners: no wait.
    held = await_listener_end(params["ports"], listener_pid, 0 if failures else params["wait"])
    return {"failures": failures, "listener_gone": not held, "ports_held": held}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "mode": {"type": "str", "required": True, "choices": ["host", "connect", "stop", "versions"]},
            "ports": {"type": "list", "elements": "int", "default": []},
            "base_dir": {"type": "path"},
            "run_id": {"type": "str"},
            "endpoints": {"type": "list", "elements": "dict", "default": []},
            "me": {"type": "str", "default": ""},
            "peers": {"type": "list", "elements": "str", "default": []},
            "timeout": {"type": "float", "default": 10},
            "listen": {"type": "bool", "default": False},
            "python": {"type": "str", "default": ""},
            "interpreter": {"type": "path", "default": ""},
            "checkpoint_dir": {"type": "path", "default": ""},
            "versions_code": {"type": "str", "default": ""},
            "listener_pid": {"type": "int", "default": None},
            "wait": {"type": "float", "default": 0},
            "addresses": {"type": "list", "elements": "str", "default": []},
            "settle": {"type": "float", "default": 0},
            "probe_timeout": {"type": "float", "default": 10},
        },
        supports_check_mode=True,
    )
    params = module.params
    mode = params["mode"]
    if mode == "host":
        if not params["base_dir"] or not params["run_id"]:
            module.fail_json(msg="host mode needs base_dir and run_id")
        run = command_runner(module)
        seen = probe_host(params["ports"], params["base_dir"], params["run_id"], run=run)
        seen["interpreter_state"] = interpreter_state(params["interpreter"])
        # Where its versions are not read (one host, or not every host names it), the
        # interpreter is still run once: an executable that is not Python 3 would
        # otherwise first fail at the launch.
        found = "" if params["python"] else interpreter_file(seen["interpreter_state"])
        if found:
            version, fault = interpreter_python3(found, run)
            seen["interpreter_state"].update({"python": version} if version else {"fault": fault})
        seen["checkpoint_state"] = checkpoint_state(params["checkpoint_dir"], params["base_dir"])
        seen["resolved"] = resolve_addresses(params["addresses"])
        seen["sources"] = source_addresses(seen["resolved"])
        if params["python"]:
            seen["versions"] = interpreter_versions(params["python"], params["versions_code"], run)
        seen["listener_pid"] = 0
        # Listen only on a clean host: with a port taken, the run is refused anyway.
        if params["listen"] and params["ports"] and not seen["busy_ports"] and not module.check_mode:
            try:
                seen["listener_pid"] = start_listener(
                    params["ports"], params["peers"], params["timeout"], probe_token(params["run_id"], params["me"])
                )
            except OSError as exc:
                module.fail_json(msg=listen_failure(params["me"], params["ports"], exc), **seen)
        # The one-run probe: with O(endpoints), this host connects to every worker port
        # right after its own listeners are up. A host refused for its look (a port taken)
        # does not: the run is refused for that, and nothing listens here to wait for.
        if params["endpoints"] and not seen["busy_ports"] and not module.check_mode:
            seen.update(connect_and_await(params, seen["listener_pid"]))
        else:  # a listener started here is still up: it waits for the connect mode's runs
            held = list(params["ports"]) if seen["listener_pid"] else []
            seen.update({"failures": [], "listener_gone": not held, "ports_held": held})
        module.exit_json(changed=False, **seen)
    elif mode == "versions":
        if not params["python"]:
            module.fail_json(msg="versions mode needs python")
        module.exit_json(changed=False, versions=interpreter_versions(params["python"], params["versions_code"], command_runner(module)))
    elif mode == "connect":
        module.exit_json(changed=False, **connect_and_await(params, params["listener_pid"] or 0))
    else:
        token = probe_token(params["run_id"], params["me"]) if params["run_id"] else ""
        still = stop_listeners(params["ports"], params["timeout"], token, params["listener_pid"])
        if still:
            module.fail_json(msg=f"ports {still} are still taken after the probe listeners were told to stop")
        module.exit_json(changed=False)


if __name__ == "__main__":
    main()
