"""Helpers shared by the unit and integration tests (issue 12): one copy of each.

Imported as ``import helpers`` (tests/unit/conftest.py and tests/integration/conftest.py
put tests/ on sys.path)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, TypeVar

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[1]
# The clone as the collection tf_runbook.multiworker, as ansible.cfg's collections_path
# finds it: the plugins import the shared plugins/module_utils/ by that name.
COLLECTIONS = REPO / "collections"


def module_env(**more: str) -> dict[str, str]:
    """The environment of a module run as a plain script: the collection importable, as
    AnsiballZ bundles it for a real run."""
    path = os.pathsep.join(p for p in (str(COLLECTIONS), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **more}


def run_module(path: str | Path, args: dict[str, Any], check_mode: bool = False, **env: str) -> dict[str, Any]:
    """Run a module file as Ansible runs it (JSON arguments on stdin); its JSON result."""
    module_args = dict(args, _ansible_check_mode=check_mode)
    out = subprocess.run(
        [sys.executable, str(path)],
        input=json.dumps({"ANSIBLE_MODULE_ARGS": module_args}),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=module_env(**env),
    )
    try:
        return json.loads(out.stdout)
    except ValueError as exc:
        raise AssertionError(f"{path} gave no JSON (rc {out.returncode}): {out.stdout}\n{out.stderr}") from exc


# -- playbook runs -----------------------------------------------------------------------

PLAYBOOK_BIN = Path(sys.executable).with_name("ansible-playbook")


def playbook_env(**more: str) -> dict[str, str]:
    """A playbook run's environment: the clone's ansible.cfg, no colours."""
    return {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1", **more}


def playbook_argv(
    playbook: str | Sequence[str], *args: str, inventory: Path | None = None, extra: dict[str, Any] | None = None
) -> list[str]:
    """``ansible-playbook`` with one playbook or several in a row (given together: the
    command takes its playbooks as one run of positional arguments)."""
    argv = [str(PLAYBOOK_BIN), *([playbook] if isinstance(playbook, str) else playbook)]
    if inventory is not None:
        argv += ["-i", str(inventory)]
    if extra is not None:
        argv += ["-e", json.dumps(extra)]
    return [*argv, *args]


def run_playbook(
    playbook: str | Sequence[str],
    *args: str,
    inventory: Path | None = None,
    extra: dict[str, Any] | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    """Run ``ansible-playbook`` from the clone as a user does; never raises on failure."""
    return subprocess.run(
        playbook_argv(playbook, *args, inventory=inventory, extra=extra),
        cwd=REPO,
        env=playbook_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start_playbook(
    playbook: str | Sequence[str],
    *args: str,
    inventory: Path | None = None,
    extra: dict[str, Any] | None = None,
    quiet: bool = False,
) -> subprocess.Popen[str]:
    """Start ``ansible-playbook`` in the background, stdout and stderr together; ``quiet``
    throws its output away (a controller the test kills and never reads must not block on a
    full pipe)."""
    return subprocess.Popen(
        playbook_argv(playbook, *args, inventory=inventory, extra=extra),
        cwd=REPO,
        env=playbook_env(),
        stdout=subprocess.DEVNULL if quiet else subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


# -- waiting -----------------------------------------------------------------------------


def wait_until(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.02) -> T:
    """Poll ``predicate`` until it returns a true value, and return that value; fails the
    test, saying ``what`` was awaited, after ``timeout`` seconds. A test waits on the
    condition it needs rather than sleeping a time that a loaded machine may outlast."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= end:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(interval)


def task_output(stdout: str, task: str) -> str:
    """What ``ansible-playbook`` printed for the task named ``task`` (its results, up to the
    next TASK or PLAY header); fails the test when no such task ran, so that a check of
    the output cannot pass on an empty string after the task was renamed."""
    _before, header, rest = stdout.partition(task)
    assert header, f"no task {task!r} in the playbook's output (renamed?): {stdout[-2000:]}"
    return rest.split("\nTASK [", 1)[0].split("\nPLAY ", 1)[0]


# -- files and processes -----------------------------------------------------------------


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under ``root`` with its sha256, to prove a later run changed nothing."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def proc_stat(pid: int | str) -> tuple[str, list[str]] | None:
    """``/proc/<pid>/stat`` as (the text up to the command's closing parenthesis, the
    fields after it: state, ppid, pgrp, ...); None when the process is gone. The command
    may hold spaces and parentheses, so the split is after the last ')'."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return None
    end = data.rfind(")")
    return data[: end + 1], data[end + 2 :].split()


def free_port() -> int:
    """A TCP port free on this machine a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def kill_quietly(pid: int) -> None:
    """SIGKILL ``pid`` if it still exists (the end of a test that started it)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 9)


def tcp_server_side(port: int, peer_port: int) -> dict[str, int] | None:
    """The listening side on ``port`` of the loopback connection from ``peer_port``, from
    /proc/net/tcp and tcp6 (a server may listen on both): {"state": its TCP state, "unread":
    bytes the server has not read yet}; None when there is no such socket (any more). What a
    test waits on to know that a server read from a connection, or closed it (see
    server_closed)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text(encoding="ascii").splitlines()[1:]:
            fields = line.split()
            local, remote, tcp_state, queues = fields[1], fields[2], fields[3], fields[4]
            if int(local.rsplit(":", 1)[1], 16) == port and int(remote.rsplit(":", 1)[1], 16) == peer_port:
                return {"state": int(tcp_state, 16), "unread": int(queues.split(":")[1], 16)}
    return None


# TCP states of /proc/net/tcp in which the socket's owner has not closed it yet.
TCP_ESTABLISHED, TCP_CLOSE_WAIT = 1, 8


def server_closed(port: int, peer_port: int) -> bool:
    """Whether the server on ``port`` closed its side of the connection from ``peer_port``."""
    side = tcp_server_side(port, peer_port)
    return side is None or side["state"] not in (TCP_ESTABLISHED, TCP_CLOSE_WAIT)


def pid_running(pid: int) -> bool:
    """Whether ``pid`` exists and is neither a zombie nor dead."""
    stat = proc_stat(pid)
    return stat is not None and stat[1][0] not in ("Z", "X")


def processes() -> list[int]:
    """Every pid of this machine's (or namespace's) process table."""
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


@contextlib.contextmanager
def port_held(port: int, host: str = "0.0.0.0") -> Iterator[subprocess.Popen[str]]:
    """A process of this machine listening on ``port`` while the block runs (a port
    another program already uses); killed and waited for after it."""
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import socket, time; s = socket.socket(); s.bind(({host!r}, {port})); "
         "s.listen(); print('ready', flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready", f"port {port} not held"
        yield holder
    finally:
        holder.kill()
        holder.wait()


def start_with_secrets(argv: Sequence[str], go_token: str = "", announce_key: str = "", **popen: Any) -> subprocess.Popen:
    """Start a supervisor's argv (``[python, supervisor, --worker-dir, <dir>, ...]``) as
    tf_worker_launch does with secrets: ``--secrets-stdin`` after the worker directory,
    the secrets' line written on its stdin, which is then closed."""
    # Imported here: the collection's path is on sys.path only where a conftest put it.
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import SECRETS_FLAG, secrets_line

    line = secrets_line(go_token, announce_key)
    proc = subprocess.Popen([*argv[:4], SECRETS_FLAG, *argv[4:]], stdin=subprocess.PIPE, **popen)
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError), proc.stdin:
        proc.stdin.write(line.decode("utf-8") if popen.get("text") else line)
    return proc
