"""/proc read in one place (plugins/module_utils/tf_proc.py), which the supervisor imports
(shipped next to it on the hosts) instead of keeping a copy."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import tf_supervisor
from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_proc

SUPERVISOR = Path(__file__).resolve().parents[2] / "roles" / "tf_worker" / "files" / "tf_supervisor.py"
SHARED = ("ENDED_STATES", "PROC", "parse_stat", "process_stat", "process_ids", "group_members")


def stat_line(pid: int, comm: str, state: str, pgid: int) -> str:
    """A /proc/<pid>/stat line: pid (comm) state ppid pgrp session ... (52 fields)."""
    rest = " ".join(["0"] * 48)
    return f"{pid} ({comm}) {state} 1 {pgid} {pgid} {rest}\n"


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    """A /proc of made-up processes: group 300 has a sleeper, a command name with spaces
    and parentheses, a zombie and a dead one; 400 is another group; then entries that are
    not processes, a process gone while listed, and a stat that is not one."""
    root = tmp_path / "proc"
    entries = {
        "300": stat_line(300, "python3", "S", 300),
        "301": stat_line(301, "a) R 1 999 (b", "R", 300),
        "302": stat_line(302, "defunct", "Z", 300),
        "303": stat_line(303, "gone", "X", 300),
        "400": stat_line(400, "other", "S", 400),
        "1": stat_line(1, "init", "S", 1),
        "500": "garbage",
        "501": "501 (short) S 1\n",
    }
    for pid, text in entries.items():
        (root / pid).mkdir(parents=True)
        (root / pid / "stat").write_text(text)
    (root / "600").mkdir()  # gone between the listing and the read: no stat
    (root / "self").mkdir()
    (root / "net").mkdir()
    work = tmp_path / "worker-0"
    work.mkdir()
    (root / "300" / "cwd").symlink_to(work)
    (root / "400" / "cwd").symlink_to(tmp_path)
    (root / "302" / "cwd").symlink_to(work)
    return root


def test_the_supervisor_defines_none_of_it_and_imports_it() -> None:
    tree = ast.parse(SUPERVISOR.read_text(encoding="utf-8"))
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assigned = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    assert not (defined | assigned) & set(SHARED)
    assert tf_supervisor.group_members.__module__ == "tf_proc"
    assert tf_supervisor.group_members.__code__.co_filename.endswith("plugins/module_utils/tf_proc.py")


@pytest.mark.parametrize(
    ("text", "expected"),
    [(stat_line(7, "x", "S", 7), ("S", 7)), (stat_line(8, "a) Z 1 2 (b", "R", 9), ("R", 9)),
     (stat_line(9, "tab\tname", "Z", 4), ("Z", 4)), ("", None), ("garbage", None), ("1 (x) S 1", None),
     ("1 (x) S 1 abc 3", None)],
)  # fmt: skip
def test_parse_stat(text: str, expected: Any) -> None:
    assert tf_proc.parse_stat(text) == expected


def test_process_stat_and_ids_on_the_same_tree(proc: Path) -> None:
    assert tf_proc.process_ids(str(proc)) == [1, 300, 301, 302, 303, 400, 500, 501, 600]
    assert tf_proc.process_ids(str(proc / "missing")) == []
    assert [tf_proc.process_stat(pid, str(proc)) for pid in (300, 302, 303)] == [("S", 300), ("Z", 300), ("X", 300)]
    assert tf_proc.process_stat(301, str(proc)) == ("R", 300)
    assert [tf_proc.process_stat(pid, str(proc)) for pid in (500, 501, 600, 999)] == [None] * 4


@pytest.mark.parametrize(
    ("pgid", "members"),
    [(300, [300, 301]), (400, [400]), (999, []), (1, []), (0, []), (-1, []), (None, []), ("300", []),
     (True, []), (300.0, [])],
)  # fmt: skip
def test_group_members_on_the_same_tree(proc: Path, pgid: Any, members: list[int]) -> None:
    assert tf_proc.group_members(pgid, str(proc)) == members


def test_group_members_on_this_machine() -> None:
    group = os.getpgrp()
    mine = tf_proc.group_members(group)
    assert os.getpid() in mine
    assert tf_supervisor.group_alive(group)


def test_works_in_only_a_live_process_in_that_directory(proc: Path, tmp_path: Path) -> None:
    work = str(tmp_path / "worker-0")
    assert tf_proc.process_cwd(300, str(proc)) == work
    assert tf_proc.process_cwd(301, str(proc)) is None
    assert tf_proc.works_in(300, work, str(proc))
    # Through a symlink to the same directory.
    (tmp_path / "link").symlink_to(work)
    assert tf_proc.works_in(300, str(tmp_path / "link"), str(proc))
    # Another directory, a zombie, no cwd, no process, not a pid.
    assert not tf_proc.works_in(400, work, str(proc))
    assert not tf_proc.works_in(302, work, str(proc))
    assert not tf_proc.works_in(301, work, str(proc))
    assert not tf_proc.works_in(999, work, str(proc))
    for pid in (None, "300", True, 0, -300):
        assert not tf_proc.works_in(pid, work, str(proc))
    assert tf_proc.works_in(os.getpid(), os.getcwd())


def oom_tree(tmp_path: Path, host: int | None, cgroup: int | None, cgroup_line: str = "0::/user.slice/job") -> tuple[str, str]:
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    if host is not None:
        (proc / "vmstat").write_text(f"nr_free_pages 10\noom_kill {host}\nother 3\n")
    (proc / "self" / "cgroup").write_text(cgroup_line + "\n")
    if cgroup is not None:
        (root / "user.slice" / "job").mkdir(parents=True)
        (root / "user.slice" / "job" / "memory.events").write_text(f"low 0\noom 2\noom_kill {cgroup}\n")
    return str(proc), str(root)


@pytest.mark.parametrize(
    ("host", "cgroup", "line", "expected"),
    [(7, 2, "0::/user.slice/job", {"host": 7, "cgroup": 2}), (7, None, "0::/user.slice/job", {"host": 7}),
     (None, 2, "0::/user.slice/job", {"cgroup": 2}), (7, 2, "1:memory:/user.slice/job", {"host": 7}),
     (None, None, "0::/", {})],
)  # fmt: skip
def test_oom_kill_counts(tmp_path: Path, host: int | None, cgroup: int | None, line: str, expected: dict[str, int]) -> None:
    assert tf_proc.oom_kill_counts(*oom_tree(tmp_path, host, cgroup, line)) == expected


KMSG = (
    "6,1001,100,-;eth0: link up\n"
    "3,1002,200,-;Out of memory: Killed process 4242 (python) total-vm:9000kB, anon-rss:8000kB\n"
    "6,1003,300,-;oom_reaper: reaped process 4242 (python), now anon-rss:0kB\n"
)


@pytest.mark.parametrize(
    ("kmsg", "before", "after", "expected"),
    [
        # The kernel's log decides, whatever the counters say.
        (KMSG, {"host": 7}, {"host": 9}, (1, "the kernel's log")),
        ("6,1,1,-;Out of memory: Killed process 999 (other)\n", {"host": 7}, {"host": 8}, (0, "the kernel's log")),
        # Without it: the job's cgroup before the host's count, which anything grows.
        (None, {"host": 7, "cgroup": 2}, {"host": 9, "cgroup": 2}, (0, "the OOM count of the job's cgroup")),
        (None, {"host": 7}, {"host": 9}, (2, "the host's OOM count")),
        (None, {}, {"host": 7}, (None, None)),
    ],
)
def test_oom_evidence_prefers_what_names_the_job(
    tmp_path: Path, kmsg: str | None, before: dict[str, int], after: dict[str, int], expected: tuple[Any, Any]
) -> None:
    """Issue 38, point 13: an unrelated OOM kill on the host made an outside SIGKILL an
    out-of-memory (never restarted)."""
    path = tmp_path / "kmsg"
    if kmsg is not None:
        path.write_text(kmsg)
    assert tf_proc.oom_evidence(4242, before, after, str(path)) == expected


def test_oom_kill_counts_on_this_machine() -> None:
    counts = tf_proc.oom_kill_counts()
    assert set(counts) <= {"host", "cgroup"}
    assert all(isinstance(value, int) and value >= 0 for value in counts.values())


@pytest.mark.parametrize(
    ("sigpnd", "shdpnd", "expected"),
    [("0000000000000000", "0000000000004000", True), ("0000000000004000", "0000000000000000", True),
     ("0000000000000000", "0000000000000100", False), ("zz", "0000000000000000", None)],
)  # fmt: skip
def test_signal_pending(tmp_path: Path, sigpnd: str, shdpnd: str, expected: bool | None) -> None:
    """SIGTERM (15) is bit 14 of the masks; SigPnd holds what was sent to the thread,
    ShdPnd what was sent to the process (a kill or a group's)."""
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "status").write_text(f"Name:\tkeeper\nSigPnd:\t{sigpnd}\nShdPnd:\t{shdpnd}\nSigBlk:\t0000000000004002\n")
    assert tf_proc.signal_pending(7, 15, str(tmp_path)) is expected
    assert tf_proc.signal_pending(8, 15, str(tmp_path)) is None


def test_signal_pending_on_this_machine() -> None:
    """A blocked signal sent to a process stays pending, as the keeper's SIGTERM does."""
    import signal
    import subprocess
    import sys
    import time

    child = subprocess.Popen(
        [sys.executable, "-c", "import signal, time\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n"
         "print('ready', flush=True)\ntime.sleep(30)"], stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        assert tf_proc.signal_pending(child.pid, signal.SIGTERM) is False
        child.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        assert tf_proc.signal_pending(child.pid, signal.SIGTERM) is True
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()


# --- CPU use and state of a job's process group (issue 37) ----------------------------------


def cpu_stat_line(pid: int, comm: str, state: str, pgid: int, utime: int, stime: int, cutime: int, cstime: int) -> str:
    """A /proc/<pid>/stat line with CPU times (fields 14 to 17; fields 7 to 13 zeros)."""
    fields = ["0"] * 7 + [str(utime), str(stime), str(cutime), str(cstime)] + ["0"] * 36
    return f"{pid} ({comm}) {state} 1 {pgid} {pgid} " + " ".join(fields) + "\n"


@pytest.mark.parametrize(
    ("text", "ticks"),
    [(cpu_stat_line(7, "x", "S", 7, 100, 20, 3, 1), 124), (cpu_stat_line(8, "a) R 1 2 (b", "R", 8, 5, 0, 0, 0), 5),
     (stat_line(9, "x", "S", 9), 0), ("1 (x) S 1 1 1", None), ("garbage", None),
     ("1 (x) S 1 1 1 0 0 0 0 0 0 0 u 2 3 4", None)],
)  # fmt: skip
def test_parse_cpu_ticks(text: str, ticks: int | None) -> None:
    assert tf_proc.parse_cpu_ticks(text) == ticks


def test_group_usage_on_a_tree(tmp_path: Path) -> None:
    """Two groups read in one pass: the CPU times of every member (a zombie's too, until
    it is reaped), and each member's state; a group with no process is left out."""
    root = tmp_path / "proc"
    entries = {
        "300": cpu_stat_line(300, "python3", "T", 300, 150, 50, 100, 0),
        "301": cpu_stat_line(301, "loader", "D", 300, 10, 0, 0, 0),
        "302": cpu_stat_line(302, "defunct", "Z", 300, 0, 0, 0, 0),
        "400": cpu_stat_line(400, "other", "R", 400, 1000, 0, 0, 0),
        "500": cpu_stat_line(500, "mine", "S", 500, 1, 1, 0, 0),
        "501": "garbage",
    }
    for pid, text in entries.items():
        (root / pid).mkdir(parents=True)
        (root / pid / "stat").write_text(text)
    ticks = tf_proc.clock_ticks()
    usage = tf_proc.group_usage([300, 500, 777, 1, True], str(root))  # type: ignore[list-item]
    assert sorted(usage) == [300, 500]
    assert usage[300]["cpu_seconds"] == pytest.approx(310 / ticks)
    assert usage[300]["states"] == {300: "T", 301: "D", 302: "Z"}
    assert usage[500] == {"cpu_seconds": pytest.approx(2 / ticks), "states": {500: "S"}}
    assert tf_proc.group_usage([], str(root)) == {}


SPIN = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end:\n    pass\n"
SLEEP = "import time\ntime.sleep(30)\n"


def test_group_usage_tells_a_spinning_job_from_a_sleeping_one() -> None:
    """Real processes, each its own group: over 2 s a busy loop uses most of a core (at
    least a quarter on a loaded machine), a sleeper almost nothing; a SIGSTOPped one
    shows state T and uses nothing."""
    jobs = {name: subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
            for name, code in (("spin", SPIN), ("sleep", SLEEP), ("stopped", SPIN))}  # fmt: skip
    try:
        os.kill(jobs["stopped"].pid, signal.SIGSTOP)
        time.sleep(0.5)
        pgids = [job.pid for job in jobs.values()]
        before, at = tf_proc.group_usage(pgids), time.monotonic()
        time.sleep(2.0)
        after, elapsed = tf_proc.group_usage(pgids), time.monotonic() - at
        share = {name: (after[job.pid]["cpu_seconds"] - before[job.pid]["cpu_seconds"]) / elapsed for name, job in jobs.items()}
        print(f"\nCPU share over {elapsed:.1f} s: {share}")
        assert share["spin"] > 0.25, share
        assert share["sleep"] < 0.02 and share["stopped"] < 0.02, share
        assert after[jobs["stopped"].pid]["states"] == {jobs["stopped"].pid: "T"}
        assert after[jobs["spin"].pid]["states"][jobs["spin"].pid] in ("R", "S")
        assert after[jobs["sleep"].pid]["states"] == {jobs["sleep"].pid: "S"}
    finally:
        for job in jobs.values():
            job.kill()
            job.wait()


# --- runnable threads: a computing job on a host loaded past its CPUs is busy -----------------


def schedstat_tree(root: Path, threads: dict[str, str]) -> None:
    """A /proc tree whose threads (``"<pid>/<tid>"``) have the schedstat text given."""
    for thread, text in threads.items():
        pid, tid = thread.split("/")
        (root / pid / "task" / tid).mkdir(parents=True)
        (root / pid / "task" / tid / "schedstat").write_text(text)


def test_thread_runnable_ns_sums_run_and_run_queue_time_of_each_thread(tmp_path: Path) -> None:
    schedstat_tree(tmp_path, {"300/300": "1000 500 7\n", "300/301": "20 0 1\n", "300/302": "garbage\n",
                              "400/400": "5 5 1\n"})  # fmt: skip
    (tmp_path / "300" / "task" / "303").mkdir()  # a thread that ended before its reading
    assert tf_proc.thread_runnable_ns([300, 999], str(tmp_path)) == {"300/300": 1500, "300/301": 20}
    assert tf_proc.thread_runnable_ns([], str(tmp_path)) == {}


@pytest.mark.parametrize(
    ("before", "after", "elapsed", "expected"),
    [
        ({"1/1": 0, "1/2": 0}, {"1/1": 10**9, "1/2": 10**8}, 2.0, 0.5),
        ({"1/1": 0}, {"1/1": 2 * 10**9, "1/3": 9 * 10**9}, 2.0, 1.0),  # a thread born in the window is not judged
        ({"1/1": 0}, {"1/2": 10**9}, 2.0, None),
        ({"1/1": 0}, {"1/1": 10**8}, 0.4, None),  # too short a window
        ({}, {}, 2.0, None),
    ],
)
def test_busiest_thread_share(before: dict[str, int], after: dict[str, int], elapsed: float, expected: float | None) -> None:
    assert tf_proc.busiest_thread_share(before, after, elapsed) == expected


SLEEPER = ("import threading, time\n"
           "def wake():\n    while True:\n        time.sleep(0.01)\n"
           "for _ in range(4):\n    threading.Thread(target=wake, daemon=True).start()\n"
           "time.sleep(30)\n")  # fmt: skip


def test_a_job_starved_of_cpu_by_a_loaded_host_stays_runnable_and_a_waking_one_does_not() -> None:
    """Real processes pinned to one CPU with 24 others spinning there: a spinning job gets
    a few percent of the core (less than the wait's BUSY_CPU_SHARE would call busy, the
    CI failure of the silent-epoch test), but its thread is runnable through the window;
    a job whose threads wake 100 times a second is not."""
    cpu = min(os.sched_getaffinity(0))

    def pinned() -> None:
        os.sched_setaffinity(0, {cpu})

    def start(code: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", code], start_new_session=True, preexec_fn=pinned)

    hogs = [start(SPIN) for _ in range(24)]
    jobs = {"spin": start(SPIN), "waking": start(SLEEPER)}
    try:
        time.sleep(1.0)
        pgids = [job.pid for job in jobs.values()]
        before, at = tf_proc.group_usage(pgids), time.monotonic()
        threads = {name: tf_proc.thread_runnable_ns(before[job.pid]["states"]) for name, job in jobs.items()}
        time.sleep(2.0)
        after, elapsed = tf_proc.group_usage(pgids), time.monotonic() - at
        cpu_share = {name: (after[job.pid]["cpu_seconds"] - before[job.pid]["cpu_seconds"]) / elapsed for name, job in jobs.items()}
        runnable = {name: tf_proc.busiest_thread_share(threads[name], tf_proc.thread_runnable_ns(after[job.pid]["states"]), elapsed)
                    for name, job in jobs.items()}  # fmt: skip
        print(f"\nover {elapsed:.1f} s on CPU {cpu} with 24 spinning: CPU share {cpu_share}, runnable {runnable}")
        assert cpu_share["spin"] < 0.15, cpu_share
        assert runnable["spin"] is not None and runnable["spin"] > 0.8, runnable
        assert runnable["waking"] is not None and runnable["waking"] < 0.5, runnable
    finally:
        for job in [*jobs.values(), *hogs]:
            job.kill()
            job.wait()
