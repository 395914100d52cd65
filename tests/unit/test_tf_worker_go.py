"""The armed launch (issue 13): a supervisor started with --go-timeout holds its worker's
port and starts its job only on the go that tf_worker_go sends, with the run's token.
Real supervisors on tiny Python jobs, real sockets on loopback."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

import tf_supervisor
import tf_worker_go
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import parse_secrets_line, secrets_line
from helpers import server_closed, start_with_secrets, tcp_server_side, wait_until
from tf_launch import tf_launch_go_timeout, tf_launched_workers
from tf_worker_go import go, go_all
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_worker_start import launch, plan, supervisor_argv
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_worker_records import find_workers, worker_state
from tf_worker_stop import stop_worker

TOKEN = "s3cret-token-of-this-launch"
# Writes what the job saw, then lives a little so that a stop has something to stop.
JOB = """
import json, os, sys, time
with open("seen.json", "w") as handle:
    json.dump({"env": sorted(os.environ), "tf_config": os.environ.get("TF_CONFIG"), "pid": os.getpid(),
               "at": time.time()}, handle)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 0)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def worker_dir(root: Path, port: int, name: str = "worker-0") -> Path:
    wdir = root / name
    wdir.mkdir(parents=True)
    config = {"cluster": {"worker": [f"127.0.0.1:{port}", "127.0.0.1:1"]}, "task": {"type": "worker", "index": 0}}
    (wdir / "tf_config.json").write_text(json.dumps(config) + "\n")
    return wdir


@pytest.fixture
def procs(reaper: None) -> Iterator[list[subprocess.Popen]]:
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def arm(
    procs: list, supervisor: Path, wdir: Path, *options: str, token: str | None = TOKEN,
    python: str = sys.executable, job_args: tuple[str, ...] = ("0",), env: dict[str, str] | None = None,
) -> subprocess.Popen:
    script = wdir.parent / "job.py"
    script.write_text(JOB)
    argv = [sys.executable, str(supervisor), "--worker-dir", str(wdir), "--python", python, "--script", str(script),
            *options, "--", *job_args]  # fmt: skip
    popen: dict[str, Any] = {"cwd": wdir, "stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, "text": True}
    if env is not None:
        popen["env"] = env
    proc = start_with_secrets(argv, token, **popen) if token is not None else subprocess.Popen(argv, **popen)
    procs.append(proc)
    return proc


def armed(
    procs: list, supervisor: Path, root: Path, timeout: str, *options: str, **kwargs: Any
) -> tuple[int, Path, subprocess.Popen]:
    """A supervisor armed with --go-timeout on a free port: (port, worker dir, process)."""
    port = free_port()
    wdir = worker_dir(root, port)
    return port, wdir, arm(procs, supervisor, wdir, "--go-timeout", timeout, *options, **kwargs)


def wait_armed(wdir: Path, proc: subprocess.Popen, timeout: float = 10.0) -> dict[str, Any]:
    def state() -> dict[str, Any] | None:
        if (wdir / "state.json").exists():
            return json.loads((wdir / "state.json").read_text())
        assert proc.poll() is None, f"the supervisor ended before it armed: {proc.stderr.read() if proc.stderr else ''}"
        return None

    return wait_until(state, timeout, f"{wdir} armed")


def target(port: int, index: int = 0) -> dict[str, Any]:
    return {"index": index, "address": "127.0.0.1", "port": port, "host": f"h{index}"}


def test_an_armed_supervisor_holds_its_port_and_starts_nothing_until_the_go(
    supervisor_path: Path, tmp_path: Path, procs: list
) -> None:
    port, wdir, proc = armed(procs, supervisor_path, tmp_path, "30")
    state = wait_armed(wdir, proc)
    assert state["pid"] is None and state["pgid"] is None and state["started_at"] is None
    assert state["supervisor_pid"] == proc.pid and state["go_port"] == port
    with socket.socket() as sock, pytest.raises(OSError):
        sock.bind(("127.0.0.1", port))
    time.sleep(0.5)
    assert not (wdir / "seen.json").exists() and not (wdir / "worker.log").exists()

    result = go(target(port), TOKEN, 10)
    assert result["started"] is True, result
    assert result["error"] is None and result["endpoint"] == f"127.0.0.1:{port}"
    assert proc.wait(20) == 0, proc.stderr.read() if proc.stderr else ""
    seen = json.loads((wdir / "seen.json").read_text())
    state = json.loads((wdir / "state.json").read_text())
    assert result["pid"] == state["pid"] == seen["pid"] and state["go_port"] == port
    assert state["armed_at"] <= state["started_at"] <= seen["at"]
    # The token is the launch's: the job never sees it.
    assert "TF_RUNBOOK_GO_TOKEN" not in seen["env"] and "TF_CONFIG" in seen["env"]
    exit_ = json.loads((wdir / "exit.json").read_text())
    assert (exit_["returncode"], exit_["stopped_by"]) == (0, None)


def test_a_go_without_this_runs_token_is_ignored(supervisor_path: Path, tmp_path: Path, procs: list) -> None:
    port, wdir, proc = armed(procs, supervisor_path, tmp_path, "30")
    wait_armed(wdir, proc)
    wrong = go(target(port), "another-runs-token", 1.0)
    assert wrong["started"] is False and "did not take this run's go" in wrong["error"], wrong
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:  # a port scan, no line
        sock.close()
    assert json.loads((wdir / "state.json").read_text())["pid"] is None
    assert go(target(port), TOKEN, 10)["started"] is True
    assert proc.wait(20) == 0


def test_no_go_within_the_timeout_ends_it_without_starting_the_job(
    supervisor_path: Path, tmp_path: Path, procs: list
) -> None:
    port, wdir, proc = armed(procs, supervisor_path, tmp_path, "1")
    assert proc.wait(20) == 124
    exit_ = json.loads((wdir / "exit.json").read_text())
    assert exit_["stopped_by"] == "startup-deadline" and "no go from the launch within 1 s" in exit_["reason"]
    assert not (wdir / "seen.json").exists()
    # The port is free again.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_a_stop_ends_an_armed_supervisor_recording_who_stopped_it(
    supervisor_path: Path, tmp_path: Path, procs: list
) -> None:
    port, wdir, proc = armed(procs, supervisor_path, tmp_path, "60")
    wait_armed(wdir, proc)
    stopped = stop_worker(str(wdir), 5.0, "operator", "stopped by the operator (stop.yml)")
    assert stopped == [proc.pid]
    assert proc.wait(10) == 128 + signal.SIGTERM
    exit_ = json.loads((wdir / "exit.json").read_text())
    assert exit_["stopped_by"] == "operator" and "before the job started" in exit_["reason"]
    assert not (wdir / "seen.json").exists()


def test_a_taken_port_is_refused_before_anything_starts(supervisor_path: Path, tmp_path: Path, procs: list) -> None:
    with socket.create_server(("", 0)) as taken:
        port = taken.getsockname()[1]
        wdir = worker_dir(tmp_path, port)
        proc = arm(procs, supervisor_path, wdir, "--go-timeout", "30")
        assert proc.wait(20) == 2
    exit_ = json.loads((wdir / "exit.json").read_text())
    assert f"port {port}" in exit_["reason"] and "not free" in exit_["reason"]
    assert not (wdir / "state.json").exists()


def test_arming_without_a_token_is_refused(supervisor_path: Path, tmp_path: Path, procs: list) -> None:
    wdir = worker_dir(tmp_path, free_port())
    proc = arm(procs, supervisor_path, wdir, "--go-timeout", "30", token=None)
    assert proc.wait(20) == 2
    reason = json.loads((wdir / "exit.json").read_text())["reason"]
    assert "--go-timeout needs the go's token" in reason and "--secrets-stdin" in reason


@pytest.mark.parametrize("options", [(), ("--preimport", "json")], ids=["at the go", "held"])
def test_a_job_that_cannot_start_is_reported_to_the_go(
    supervisor_path: Path, tmp_path: Path, procs: list, options: tuple[str, ...]
) -> None:
    port, wdir, proc = armed(procs, supervisor_path, tmp_path, "30", *options, python=str(tmp_path / "no" / "python3"))
    wait_armed(wdir, proc)
    result = go(target(port), TOKEN, 10)
    assert result["started"] is False and "could not start the job" in result["error"], result
    assert proc.wait(20) == 127
    exit_ = json.loads((wdir / "exit.json").read_text())
    assert exit_["returncode"] == 127 and "cannot start the job" in exit_["reason"]


def test_the_go_names_a_worker_nothing_listens_for(tmp_path: Path) -> None:
    port = free_port()
    started = time.monotonic()
    result = go(target(port, 3), TOKEN, 0.5)
    assert time.monotonic() - started < 5
    assert result["started"] is False and "connection refused" in result["error"]
    assert (result["index"], result["host"], result["endpoint"]) == (3, "h3", f"127.0.0.1:{port}")


def test_go_all_starts_every_armed_worker(supervisor_path: Path, tmp_path: Path, procs: list) -> None:
    ports = [free_port() for _ in range(4)]
    dirs = [worker_dir(tmp_path / str(i), port) for i, port in enumerate(ports)]
    armed = [arm(procs, supervisor_path, wdir, "--go-timeout", "30") for wdir in dirs]
    for wdir, proc in zip(dirs, armed):
        wait_armed(wdir, proc)
    results = go_all([target(port, i) for i, port in enumerate(ports)], TOKEN, 10)
    assert [r["index"] for r in results] == [0, 1, 2, 3]
    assert all(r["started"] for r in results), results
    assert [proc.wait(20) for proc in armed] == [0, 0, 0, 0]


def test_the_launch_module_hands_the_token_on_stdin(tmp_path: Path, procs: list) -> None:
    fake = tmp_path / "fake.py"
    fake.write_text(
        "import json, os, sys\n"
        "line = sys.stdin.buffer.readline()\n"
        "json.dump({'line': line.decode(), 'rest': sys.stdin.buffer.read().decode(), 'argv': sys.argv,\n"
        "           'env': dict(os.environ)}, open('seen.json', 'w'))\n"
        "json.dump({'supervisor_pid': os.getpid()}, open('state.json', 'w'))\n"
    )
    wdir = tmp_path / "worker-0"
    wdir.mkdir()
    slots = plan([{"index": 0}], {"0": str(wdir)}, sys.executable, str(fake), ["--go-timeout", "60", "--"])
    results, failures = launch(slots, 5.0, go_token=TOKEN, announce_key="the-key")
    assert failures == [] and results[0]["recorded"] is True
    seen = json.loads((wdir / "seen.json").read_text())
    # One line, then the pipe is closed; the flag comes before the job's "--".
    assert json.loads(seen["line"]) == {"go_token": TOKEN, "announce_key": "the-key"} and seen["rest"] == ""
    assert seen["argv"][1:] == ["--worker-dir", str(wdir), "--secrets-stdin", "--go-timeout", "60", "--"]
    assert results[0]["argv"] == [sys.executable, *seen["argv"]]
    assert TOKEN not in " ".join(seen["argv"]) and "the-key" not in " ".join(seen["argv"])
    assert not any(TOKEN in value or "the-key" in value for value in seen["env"].values())


def test_a_launch_without_secrets_gives_no_flag_and_no_pipe(tmp_path: Path, procs: list) -> None:
    fake = tmp_path / "fake.py"
    fake.write_text(
        "import json, os, sys\n"
        "json.dump({'stdin': os.readlink('/proc/self/fd/0'), 'argv': sys.argv}, open('seen.json', 'w'))\n"
        "json.dump({'supervisor_pid': os.getpid()}, open('state.json', 'w'))\n"
    )
    wdir = tmp_path / "worker-0"
    wdir.mkdir()
    slots = plan([{"index": 0}], {"0": str(wdir)}, sys.executable, str(fake), ["--"])
    results, failures = launch(slots, 5.0)
    assert failures == [] and results[0]["recorded"] is True
    seen = json.loads((wdir / "seen.json").read_text())
    assert seen["stdin"] == "/dev/null" and "--secrets-stdin" not in seen["argv"]
    assert supervisor_argv(["p", "s", "--worker-dir", "d", "--"], False) == ["p", "s", "--worker-dir", "d", "--"]


def test_launched_secrets_are_in_no_environ_of_the_supervisor_or_its_job(
    supervisor_path: Path, tmp_path: Path, procs: list
) -> None:
    """Issue 38 point 14: the real supervisor, started by launch() with a token and a key,
    holds neither in /proc/<pid>/environ, nor does its job; the go still starts it."""
    port = free_port()
    wdir = worker_dir(tmp_path, port)
    script = tmp_path / "job.py"
    script.write_text(JOB)
    args = ["--python", sys.executable, "--script", str(script), "--go-timeout", "30", "--peer-timeout", "30",
            "--run-id", "r1", "--", "2"]  # fmt: skip
    slots = plan([{"index": 0}], {"0": str(wdir)}, sys.executable, str(supervisor_path), args)
    results, failures = launch(slots, 10.0, go_token=TOKEN, announce_key="announce-key-of-r1")
    assert failures == [] and results[0]["recorded"] is True, failures
    pid = results[0]["supervisor_pid"]
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    assert TOKEN.encode() not in environ and b"announce-key-of-r1" not in environ
    assert b"TF_RUNBOOK_GO_TOKEN" not in environ and b"TF_RUNBOOK_ANNOUNCE_KEY" not in environ
    assert go(target(port), TOKEN, 10)["started"] is True
    job_pid = json.loads((wdir / "state.json").read_text())["pid"]
    job_environ = Path(f"/proc/{job_pid}/environ").read_bytes()
    assert TOKEN.encode() not in job_environ and b"announce-key-of-r1" not in job_environ
    end = time.monotonic() + 20
    while not (wdir / "exit.json").exists() and time.monotonic() < end:
        time.sleep(0.05)
    seen = json.loads((wdir / "seen.json").read_text())
    assert not any(name.startswith(("TF_RUNBOOK_GO", "TF_RUNBOOK_ANNOUNCE")) for name in seen["env"])
    assert json.loads((wdir / "exit.json").read_text())["returncode"] == 0


def test_launched_workers_take_the_gos_failures() -> None:
    result = {"workers": [
        {"index": 2, "dir": "/r/worker-2", "supervisor_pid": 22, "error": None},
        {"index": 3, "dir": "/r/worker-3", "supervisor_pid": 33, "error": None},
    ]}  # fmt: skip
    went = {"workers": [
        {"index": 0, "started": False, "error": "connection refused"},
        {"index": 2, "started": True, "error": None},
        {"index": 3, "started": False, "error": "no answer within 10 s"},
    ]}  # fmt: skip
    assert tf_launched_workers(result, went) == [
        {"index": 2, "dir": "/r/worker-2", "supervisor_pid": 22, "launch_error": None},
        {"index": 3, "dir": "/r/worker-3", "supervisor_pid": 33,
         "launch_error": "the launch's go did not start it: no answer within 10 s"},
    ]  # fmt: skip
    assert tf_launched_workers(result, None) == tf_launched_workers(result)
    assert all(entry["launch_error"] is None for entry in tf_launched_workers(result))


@pytest.mark.parametrize(
    ("timeout", "forks", "hosts", "seconds"),
    [(0, 5, 2, 60), (0, 32, 32, 60), (0, 5, 32, 120), (0, 1, 3, 80), (45, 1, 100, 45)],
)
def test_go_timeout_covers_every_batch_of_hosts(timeout: int, forks: int, hosts: int, seconds: int) -> None:
    assert tf_launch_go_timeout(timeout, forks, hosts) == seconds


def test_the_wait_fails_an_armed_worker_the_go_did_not_start(tmp_path: Path, procs: list) -> None:
    wdir = tmp_path / "worker-1"
    wdir.mkdir()
    armed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], cwd=wdir)
    procs.append(armed)
    (wdir / "state.json").write_text(json.dumps({"supervisor_pid": armed.pid, "pid": None, "pgid": None}))
    entry = {"index": 1, "dir": str(wdir), "supervisor_pid": armed.pid}
    progress = re.compile("epoch")
    assert worker_state(entry, progress, 5)["state"] == "running"
    failed = worker_state({**entry, "launch_error": "the launch's go did not start it: refused"}, progress, 5)
    assert failed["state"] == "exited" and failed["returncode"] == -1
    assert "go did not start it: refused" in failed["reason"]


def test_the_go_reaches_every_worker_at_once_not_one_after_another(tmp_path: Path) -> None:
    """Four fake supervisors that each take 1 s to answer: sent one after another, the
    go would take 4 s; at once, about 1 s (the timeout is 2.5 s)."""
    servers = [socket.create_server(("127.0.0.1", 0)) for _ in range(4)]

    def answer_late(server: socket.socket) -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(512)
            time.sleep(1.0)
            conn.sendall(b"TF-RUNBOOK-STARTED 4242\n")

    threads = [threading.Thread(target=answer_late, args=(s,), daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    try:
        started = time.monotonic()
        results = go_all([target(s.getsockname()[1], i) for i, s in enumerate(servers)], TOKEN, 2.5)
        took = time.monotonic() - started
    finally:
        for server in servers:
            server.close()
    assert [r["started"] for r in results] == [True] * 4, results
    assert [r["pid"] for r in results] == [4242] * 4
    assert took < 2.5, took
    assert max(r["sent_at"] for r in results) - min(r["sent_at"] for r in results) < 0.5


def test_a_go_sent_before_the_supervisor_holds_its_port_is_tried_again(
    supervisor_path: Path, tmp_path: Path, procs: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    wdir = worker_dir(tmp_path, port)
    result: dict[str, Any] = {}
    refused: list[float] = []
    connect = socket.create_connection

    def counted(*args: Any, **kwargs: Any) -> socket.socket:
        try:
            return connect(*args, **kwargs)
        except ConnectionRefusedError:
            refused.append(time.monotonic())
            raise

    monkeypatch.setattr(tf_worker_go.socket, "create_connection", counted)
    sender = threading.Thread(target=lambda: result.update(go(target(port), TOKEN, 15)), daemon=True)
    sender.start()
    wait_until(lambda: len(refused) >= 2, 10, "the go refused twice (nothing holds the port yet)")
    proc = arm(procs, supervisor_path, wdir, "--go-timeout", "30")
    sender.join(20)
    assert result.get("started") is True, result
    assert proc.wait(20) == 0


def test_a_port_let_go_of_within_a_second_is_still_held(supervisor_path: Path, tmp_path: Path, procs: list) -> None:
    taken = socket.create_server(("", 0))
    port = taken.getsockname()[1]
    wdir = worker_dir(tmp_path, port)
    proc = arm(procs, supervisor_path, wdir, "--go-timeout", "30")
    time.sleep(0.3)
    taken.close()
    wait_armed(wdir, proc)
    assert go(target(port), TOKEN, 10)["started"] is True
    assert proc.wait(20) == 0


def test_a_stop_that_comes_while_the_go_is_read_wins(supervisor_path: Path, tmp_path: Path, procs: list) -> None:
    port, wdir, proc = armed(procs, supervisor_path, tmp_path, "30")
    wait_armed(wdir, proc)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(b"TF-RUNBOOK-GO ")
        # The supervisor accepted the connection and read the go's beginning: the stop
        # comes while the go is read.
        peer = conn.getsockname()[1]
        wait_until(lambda: (tcp_server_side(port, peer) or {}).get("unread") == 0, 10, "the go's beginning read")
        (wdir / "stop.json").write_text(json.dumps({"by": "runbook", "reason": "stopped by the runbook"}))
        proc.send_signal(signal.SIGTERM)
        # The rest of the go comes after the supervisor took the stop (it answers then).
        wait_until(lambda: select.select([conn], [], [], 0)[0], 10, "the supervisor's answer to the go")
        conn.sendall(TOKEN.encode() + b"\n")
        conn.settimeout(5)
        answer = conn.recv(512)
    assert answer.startswith(b"TF-RUNBOOK-FAILED ") and b"stopped" in answer, answer
    assert proc.wait(10) == 128 + signal.SIGTERM
    exit_ = json.loads((wdir / "exit.json").read_text())
    assert exit_["stopped_by"] == "runbook" and not (wdir / "seen.json").exists()


def test_the_job_deadline_counts_from_the_launch_not_from_the_go(
    supervisor_path: Path, tmp_path: Path, procs: list
) -> None:
    # The job deadline: 3 s from the supervisor's start; the go comes 2 s in.
    port, wdir, proc = armed(
        procs, supervisor_path, tmp_path, "30", "--job-timeout", "3", "--grace", "0", job_args=("30",)
    )
    state = wait_armed(wdir, proc)
    deadline = state["launch"]["deadline_at"]
    assert deadline is not None
    # The go 1 s before the deadline by the supervisor's own clock (not 2 s after this test
    # saw it armed, which a loaded machine may make later than the deadline).
    wait_until(lambda: time.time() >= deadline - 1.0, 10, "1 s before the job deadline")
    sent = go(target(port), TOKEN, 10)
    assert sent["started"] is True and sent["sent_at"] < deadline, (sent, deadline)
    proc.wait(20)
    exit_ = json.loads((wdir / "exit.json").read_text())
    assert exit_["stopped_by"] == "job-deadline", exit_
    # Stopped at the launch's deadline (3 s after the launch), not 3 s after the go.
    assert exit_["finished_at"] - sent["sent_at"] < 2.5, (exit_, sent, deadline)


def test_a_reattach_finds_the_launch_of_an_armed_attempt(supervisor_path: Path, tmp_path: Path, procs: list) -> None:
    port, wdir, proc = armed(procs, supervisor_path, tmp_path, "30")
    wait_armed(wdir, proc)
    workers, launch_record = find_workers(str(tmp_path))
    assert [w["index"] for w in workers] == [0]
    assert launch_record["attempt"] == 0 and "deadline_at" in launch_record and launch_record["python"]
    stop_worker(str(wdir), 5.0, "runbook", "stopped by the runbook")
    assert proc.wait(10) == 128 + signal.SIGTERM


def test_the_secrets_line_holds_only_the_given_secrets() -> None:
    assert secrets_line("", "") == b""
    assert json.loads(secrets_line("", "the-key")) == {"announce_key": "the-key"}
    assert parse_secrets_line(secrets_line("tok", "the-key")) == {"go_token": "tok", "announce_key": "the-key"}
    with pytest.raises(ValueError, match="more than 4096"):
        secrets_line("x" * 5000)


@pytest.mark.parametrize(
    ("line", "match"),
    [
        (b"", "no secrets line"),
        (b'{"go_token": "t"}', "no complete secrets line"),
        (b'{"go_token": "' + b"x" * 5000 + b'"}\n', "no complete secrets line within 4096"),
        (b"not json\n", "not JSON"),
        (b'["t"]\n', "not a JSON object"),
        (b'{"go_token": "t", "other": "x"}\n', "unknown keys"),
        (b'{"go_token": 3}\n', "go_token is not a non-empty string"),
        (b'{"announce_key": ""}\n', "announce_key is not a non-empty string"),
    ],
)
def test_a_bad_secrets_line_is_refused_without_quoting_it(line: bytes, match: str) -> None:
    with pytest.raises(ValueError, match=match) as raised:
        parse_secrets_line(line)
    assert "x" * 10 not in str(raised.value)


def test_the_supervisor_reads_one_bounded_line_and_refuses_a_bad_one(
    supervisor_path: Path, tmp_path: Path, procs: list
) -> None:
    # A pipe that is never closed and carries more than the limit without a newline: the
    # supervisor reads at most the limit + 1 bytes and refuses, without waiting for EOF.
    wdir = worker_dir(tmp_path, free_port())
    script = tmp_path / "job.py"
    script.write_text(JOB)
    proc = subprocess.Popen(
        [sys.executable, str(supervisor_path), "--worker-dir", str(wdir), "--secrets-stdin", "--python",
         sys.executable, "--script", str(script), "--go-timeout", "30", "--"],
        cwd=wdir, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    procs.append(proc)
    assert proc.stdin is not None
    proc.stdin.write(b"x" * 5000)
    proc.stdin.flush()
    try:
        assert proc.wait(20) == 2
    finally:
        proc.stdin.close()
    reason = json.loads((wdir / "exit.json").read_text())["reason"]
    assert "--secrets-stdin: no complete secrets line within 4096 bytes" in reason and "xxxx" not in reason
    assert not (wdir / "seen.json").exists()


# --- issue 24 point 3: idle connections cannot stall the go, a late go starts nothing ------


def test_silent_connections_do_not_hold_the_go_back(supervisor_path: Path, tmp_path: Path, procs: list) -> None:
    port, wdir, proc = armed(procs, supervisor_path, tmp_path, "30")
    wait_armed(wdir, proc)
    silent = [socket.create_connection(("127.0.0.1", port), timeout=2) for _ in range(8)]
    try:
        started = time.monotonic()
        result = go(target(port), TOKEN, 3)
        assert result["started"] is True, result
        # Served one after another with their budgets, 8 silent connections took 8-16 s.
        assert time.monotonic() - started < 2.5
    finally:
        for sock in silent:
            sock.close()
    assert proc.wait(20) == 0


def test_a_go_whose_launch_gave_up_starts_nothing(supervisor_path: Path, tmp_path: Path, procs: list) -> None:
    """The go sat in the port's queue while the supervisor could not take it (stopped here
    with SIGSTOP), and the launch gave up and closed: the job must not start behind the
    launch's back; a later go of the same run still starts it."""
    port, wdir, proc = armed(procs, supervisor_path, tmp_path, "30")
    wait_armed(wdir, proc)
    proc.send_signal(signal.SIGSTOP)
    try:
        late = socket.create_connection(("127.0.0.1", port), timeout=2)
        late.sendall(b"TF-RUNBOOK-GO " + TOKEN.encode() + b"\n")
        late.shutdown(socket.SHUT_RDWR)  # the launch gave up, but keep the port number to follow
    finally:
        proc.send_signal(signal.SIGCONT)
    try:
        # The supervisor took the late go from its queue and closed it without an answer.
        peer = late.getsockname()[1]
        wait_until(lambda: server_closed(port, peer), 10, "the late go's connection closed by the supervisor")
    finally:
        late.close()
    assert json.loads((wdir / "state.json").read_text())["pid"] is None
    assert not (wdir / "seen.json").exists()
    assert go(target(port), TOKEN, 10)["started"] is True
    assert proc.wait(20) == 0


def test_the_supervisor_reads_its_secrets_from_a_file_and_gives_up_on_a_silent_pipe(tmp_path: Path) -> None:
    secrets_file = tmp_path / "secrets"
    secrets_file.write_bytes(secrets_line("tok") + b"not read\n")
    with open(secrets_file, "rb") as handle:
        assert tf_supervisor.read_secrets(handle.fileno()) == {"go_token": "tok"}
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(ValueError, match=r"no secrets line on stdin within 0\.2 s"):
            tf_supervisor.read_secrets(read_end, timeout=0.2)
    finally:
        os.close(read_end)
        os.close(write_end)


# -- the held start (issue 42): the job's interpreter started when armed, its imports done --------

# Imported before the go: notes the process and the moment it was imported.
PREIMPORTED = """
import json, os, time
with open(os.path.join(os.environ["PREIMPORT_NOTES"], f"imported-{os.getpid()}.json"), "w") as handle:
    json.dump({"pid": os.getpid(), "at": time.time(), "gate_in_env": "TF_RUNBOOK_JOB_GATE" in os.environ}, handle)
"""


def held(procs: list, supervisor: Path, root: Path, timeout: str) -> tuple[int, Path, subprocess.Popen, Path]:
    """A supervisor armed with --preimport of a module that notes its import."""
    modules, notes = root / "modules", root / "notes"
    modules.mkdir()
    notes.mkdir()
    (modules / "preimport_probe.py").write_text(PREIMPORTED)
    env = dict(os.environ, PYTHONPATH=str(modules), PREIMPORT_NOTES=str(notes))
    port, wdir, proc = armed(procs, supervisor, root, timeout, "--preimport", "preimport_probe,json", env=env)
    return port, wdir, proc, notes


def imported(notes: Path) -> dict[str, Any]:
    return wait_until(lambda: [json.loads(p.read_text()) for p in notes.glob("imported-*.json")], 20, "the pre-import")[0]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] != "Z"


def test_a_held_job_imports_its_modules_when_armed_and_runs_its_script_only_at_the_go(
    supervisor_path: Path, tmp_path: Path, procs: list
) -> None:
    port, wdir, proc, notes = held(procs, supervisor_path, tmp_path, "30")
    early = imported(notes)
    state = wait_armed(wdir, proc)
    assert state["pid"] is None and state["started_at"] is None
    time.sleep(0.5)
    assert not (wdir / "seen.json").exists(), "the script ran before the go"
    assert alive(early["pid"])

    result = go(target(port), TOKEN, 10)
    assert result["started"] is True, result
    assert proc.wait(20) == 0, proc.stderr.read() if proc.stderr else ""
    seen = json.loads((wdir / "seen.json").read_text())
    state = json.loads((wdir / "state.json").read_text())
    # The held process is the job: the import happened in it, before the go started it.
    assert result["pid"] == state["pid"] == seen["pid"] == early["pid"]
    assert early["at"] < state["started_at"] <= seen["at"]
    # The gate and the module list are the wrapper's: the script never sees them.
    assert not any(name.startswith("TF_RUNBOOK_JOB_") for name in seen["env"]), seen["env"]
    assert early["gate_in_env"] is False
    assert json.loads((wdir / "exit.json").read_text())["returncode"] == 0


@pytest.mark.parametrize("ending", ["no go", "stop"])
def test_a_held_job_that_gets_no_go_ends_with_its_supervisor_and_runs_nothing(
    supervisor_path: Path, tmp_path: Path, procs: list, ending: str
) -> None:
    port, wdir, proc, notes = held(procs, supervisor_path, tmp_path, "2" if ending == "no go" else "60")
    early = imported(notes)
    if ending == "stop":
        wait_armed(wdir, proc)
        assert stop_worker(str(wdir), 5.0, "operator", "stopped by the operator (stop.yml)") == [proc.pid]
        assert proc.wait(20) == 128 + signal.SIGTERM
    else:
        assert proc.wait(20) == 124
    wait_until(lambda: not alive(early["pid"]), 10, "the held job gone")
    assert not (wdir / "seen.json").exists() and not (wdir / "job_end.json").exists()
    exit_ = json.loads((wdir / "exit.json").read_text())
    assert "before the job started" in exit_["reason"] or "no go from the launch" in exit_["reason"], exit_
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_a_preimport_that_is_no_module_name_is_refused_naming_it(
    supervisor_path: Path, tmp_path: Path, procs: list
) -> None:
    port, wdir, proc = armed(procs, supervisor_path, tmp_path, "30", "--preimport", "tensorflow,os;rm")
    assert proc.wait(20) == 2
    reason = json.loads((wdir / "exit.json").read_text())["reason"]
    assert "--preimport 'tensorflow,os;rm' (tf_launch_preimport): 'os;rm' is not a Python module's dotted name" in reason


def test_a_module_that_fails_to_import_is_left_to_the_script(supervisor_path: Path, tmp_path: Path, procs: list) -> None:
    port, wdir, proc = armed(procs, supervisor_path, tmp_path, "30", "--preimport", "no_such_module_here")
    wait_armed(wdir, proc)
    assert go(target(port), TOKEN, 10)["started"] is True
    assert proc.wait(20) == 0, proc.stderr.read() if proc.stderr else ""
    assert (wdir / "seen.json").exists()
    assert "no_such_module_here" not in (wdir / "worker.log").read_text()
