"""The bench's pure parts (tests/bench/metrics.py), its ssh wrapper and its report writer."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "tests" / "bench"


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


metrics = _load("metrics", BENCH / "metrics.py")
callback = _load("tf_bench_callback", BENCH / "callback" / "tf_bench.py")


# -- phases ------------------------------------------------------------------------------

@pytest.mark.parametrize(("path", "name", "phase"), [
    ("/r/playbooks/preflight.yml", "Refuse a run without worker hosts", "preflight"),
    ("/r/playbooks/deploy.yml", "Deploy the interpreter", "deploy"),
    ("/r/playbooks/launch.yml", "Start every worker in the background", "launch"),
    ("/r/playbooks/wait.yml", "Wait for every worker", "wait"),
    ("/r/playbooks/attempts.yml", "Restart the run while attempts remain", "wait"),
    ("/r/playbooks/collect.yml", "Fetch every worker's log and records", "collect"),
    ("/r/playbooks/collect.yml", "Bring back the hosts that failed earlier", "collect"),
    ("/r/playbooks/collect.yml", "Judge the run and write summary.json", "verdict"),
    ("/other/tree/playbooks/verdict.yml", "Anything", "verdict"),
    ("/r/train.yml", "Launch every worker at once", "launch"),
    ("/r/site.yml", "Do something else", "other:site"),
    ("", "", "other:unknown"),
])
def test_phase_of(path: str, name: str, phase: str) -> None:
    assert metrics.phase_of(path, name) == phase


def _marks() -> list[dict]:
    return [
        {"event": "play", "t": 101.0, "cpu_usec": 1_000_000, "file": "/r/playbooks/preflight.yml", "name": "Refuse"},
        {"event": "play", "t": 103.0, "cpu_usec": 3_000_000, "file": "/r/playbooks/preflight.yml", "name": "Compute"},
        {"event": "play", "t": 104.0, "cpu_usec": 4_500_000, "file": "/r/playbooks/launch.yml", "name": "Start"},
        {"event": "play", "t": 106.0, "cpu_usec": 5_000_000, "file": "/r/playbooks/collect.yml", "name": "Fetch"},
        {"event": "play", "t": 107.0, "cpu_usec": 6_000_000, "file": "/r/playbooks/collect.yml", "name": "Judge the run"},
        {"event": "stats", "t": 108.0, "cpu_usec": 6_250_000},
        {"event": "result", "host": "a", "kind": "ok", "action": "command"},
    ]


def test_phase_cpu_splits_at_play_starts() -> None:
    cpu = metrics.phase_cpu(_marks(), 6_500_000)
    assert cpu == pytest.approx({"startup": 1.0, "preflight": 3.5, "launch": 0.5, "collect": 1.0,
                                 "verdict": 0.25, "exit": 0.25, "total": 6.5})


def test_phase_cpu_without_stats_runs_the_last_play_to_the_end() -> None:
    cpu = metrics.phase_cpu(_marks()[:5], 7_000_000)
    assert cpu["verdict"] == pytest.approx(1.0)
    assert "exit" not in cpu


def test_phase_cpu_is_empty_when_a_reading_is_missing() -> None:
    marks = _marks()
    marks[2]["cpu_usec"] = None
    assert metrics.phase_cpu(marks, 7_000_000) == {}


def test_phase_wall() -> None:
    wall = metrics.phase_wall(_marks(), 100.0, 110.0)
    assert wall == pytest.approx({"startup": 1.0, "preflight": 3.0, "launch": 2.0, "collect": 1.0,
                                  "verdict": 1.0, "exit": 2.0, "total": 10.0})


# -- module runs -----------------------------------------------------------------------

def test_module_runs_counts_items_retries_polls_and_not_skips_or_loop_summaries() -> None:
    events = [
        {"event": "result", "host": "a", "kind": "ok", "action": "ansible.builtin.command"},
        {"event": "result", "host": "a", "kind": "skipped", "action": "ansible.builtin.command"},
        {"event": "result", "host": "a", "kind": "ok", "action": "ansible.builtin.copy", "item": True},
        {"event": "result", "host": "a", "kind": "ok", "action": "ansible.builtin.copy", "item": True},
        {"event": "result", "host": "a", "kind": "ok", "action": "ansible.builtin.copy", "loop": True},
        {"event": "result", "host": "a", "kind": "retry", "action": "ansible.builtin.uri"},
        {"event": "result", "host": "a", "kind": "poll", "action": "ansible.builtin.command"},
        {"event": "result", "host": "b", "kind": "ok", "action": "ansible.builtin.set_fact"},
        {"event": "result", "host": "b", "kind": "failed", "action": "set_fact"},
        {"event": "result", "host": "b", "kind": "unreachable", "action": "ansible.builtin.ping"},
        {"event": "result", "host": "b", "kind": "ok", "action": "ansible.builtin.stat", "delegated": "localhost"},
        {"event": "play", "t": 1.0, "cpu_usec": 1},
    ]
    runs = metrics.module_runs(events)
    assert runs["a"] == {"results": 5, "remote": 5}
    assert runs["b"] == {"results": 4, "remote": 2, "delegated_local": 1}


# -- the ssh wrapper's log ---------------------------------------------------------------

def _record(kind: str, *argv: str) -> bytes:
    return b"\0".join(x.encode() for x in (kind, "1700000000.123456", str(len(argv)), *argv)) + b"\0"


SSH_OPTS = ["-C", "-o", "ControlMaster=auto", "-o", "ControlPersist=120s", "-o", "User=\"tfrunner\"",
            "-o", "ControlPath=\"/tmp/cp/abc\""]


@pytest.mark.parametrize(("kind", "argv", "stdin", "expected"), [
    ("ssh", [*SSH_OPTS, "10.0.0.2", "/bin/sh -c '/usr/bin/python3 && sleep 0'"], "", ("10.0.0.2", "exec")),
    ("ssh", ["-o", "ControlPath=x", "-O", "check", "10.0.0.3"], "", ("10.0.0.3", "control")),
    ("ssh", [*SSH_OPTS, "-tt", "10.0.0.2", "/bin/sh -c 'dd if=/x bs=65536'"], "", ("10.0.0.2", "fetch")),
    ("ssh", [*SSH_OPTS, "10.0.0.2", "/bin/sh -c 'dd of=/x bs=65536'"], "", ("10.0.0.2", "put")),
    ("sftp", ["-b", "-", *SSH_OPTS, "[10.0.0.4]"], "put /tmp/a /home/x/b\n", ("10.0.0.4", "put")),
    ("sftp", ["-b", "-", *SSH_OPTS, "[fd00::5]"], "get /home/x/b /tmp/a\n", ("fd00::5", "fetch")),
    ("scp", [*SSH_OPTS, "/tmp/a", "[10.0.0.6]:/home/x/b"], "", ("10.0.0.6", "put")),
    ("scp", [*SSH_OPTS, "[10.0.0.6]:/home/x/b", "/tmp/a"], "", ("10.0.0.6", "fetch")),
])
def test_classify(kind: str, argv: list[str], stdin: str, expected: tuple[str, str]) -> None:
    record = metrics.parse_record(_record(kind, *argv), stdin.encode())
    assert record["argv"] == argv
    assert metrics.classify(record) == expected


def test_parse_record_keeps_empty_and_multiline_arguments() -> None:
    record = metrics.parse_record(_record("ssh", "", "a\nb", "host"))
    assert record == {"kind": "ssh", "t": 1700000000.123456, "argv": ["", "a\nb", "host"], "stdin": ""}


def test_parse_record_refuses_a_truncated_record() -> None:
    with pytest.raises(ValueError, match="3 arguments announced, 2 read"):
        metrics.parse_record(b"ssh\x001.0\x003\x00a\x00b")


def test_ssh_ops_per_inventory_host(tmp_path: Path) -> None:
    log = tmp_path / "oplog"
    log.mkdir()
    (log / "1-1").write_bytes(_record("ssh", *SSH_OPTS, "10.0.0.2", "/bin/sh -c 'python3'"))
    (log / "2-1").write_bytes(_record("ssh", *SSH_OPTS, "10.0.0.2", "/bin/sh -c 'python3'"))
    (log / "3-1").write_bytes(_record("sftp", "-b", "-", "[10.0.0.3]"))
    (log / "3-1.in").write_bytes(b"put /a /b\n")
    (log / "4-1").write_bytes(_record("ssh", *SSH_OPTS, "10.0.0.9", "true"))
    ops = metrics.ssh_ops(metrics.read_oplog(log), {"10.0.0.2": "node0", "10.0.0.3": "node1"})
    assert ops == {"node0": {"exec": 2}, "node1": {"put": 1}, "10.0.0.9": {"exec": 1}}


def test_the_wrapper_records_then_runs_the_real_binary(tmp_path: Path) -> None:
    """tests/bench/oplog.sh, as ssh and as sftp, in front of a fake real binary."""
    real, bin_dir, log = tmp_path / "real", tmp_path / "bin", tmp_path / "oplog"
    for d in (real, bin_dir, log):
        d.mkdir()
    for name in ("ssh", "sftp"):
        fake = real / name
        fake.write_text(f"#!/bin/sh\necho {name} \"$@\"; cat\n")
        fake.chmod(0o755)
        (bin_dir / name).symlink_to(BENCH / "oplog.sh")
    env = dict(os.environ, TF_BENCH_OPLOG=str(log), TF_BENCH_REAL_SSH_DIR=str(real))
    out = subprocess.run([str(bin_dir / "ssh"), "-o", "A=b c", "10.0.0.2", "echo 'x y'"], env=env,
                         input="", capture_output=True, text=True, check=True)
    assert out.stdout == "ssh -o A=b c 10.0.0.2 echo 'x y'\n"
    out = subprocess.run([str(bin_dir / "sftp"), "-b", "-", "[10.0.0.3]"], env=env,
                         input="get /r /l\n", capture_output=True, text=True, check=True)
    assert out.stdout == "sftp -b - [10.0.0.3]\nget /r /l\n"
    records = metrics.read_oplog(log)
    assert sorted(metrics.classify(r) for r in records) == [("10.0.0.2", "exec"), ("10.0.0.3", "fetch")]
    assert [r["argv"] for r in records if r["kind"] == "ssh"] == [["-o", "A=b c", "10.0.0.2", "echo 'x y'"]]


def test_accepted_logins() -> None:
    log = ("Connection from 10.0.0.1 port 5 on 10.0.0.2 port 22 rdomain \"\"\n"
           "Accepted publickey for tfrunner from 10.0.0.1 port 5 ssh2: ED25519 SHA256:x\n"
           "Disconnected from user tfrunner 10.0.0.1 port 5\n"
           "Accepted publickey for tfrunner from 10.0.0.1 port 6 ssh2: ED25519 SHA256:x\n")
    assert metrics.accepted_logins(log) == 2


# -- the callback's cgroup reading ---------------------------------------------------------

def test_callback_reads_usage_usec(tmp_path: Path) -> None:
    stat = tmp_path / "cpu.stat"
    stat.write_text("usage_usec 123456\nuser_usec 100000\nsystem_usec 23456\n")
    assert callback._usage_usec(str(stat)) == 123456
    assert callback._usage_usec(str(tmp_path / "missing")) is None


# -- tables and the report ---------------------------------------------------------------

def test_md_table() -> None:
    lines = metrics.md_table(["a", "b", "c"], [[1, 2.345, float("nan")], ["x", 0.5, "y"]])
    assert lines == ["| a | b | c |", "|---|---|---|", "| 1 | 2.35 | n/a |", "| x | 0.50 | y |"]
    with pytest.raises(ValueError, match="row of 2 cells under 3 headers"):
        metrics.md_table(["a", "b", "c"], [[1, 2]])


@pytest.mark.parametrize(("measured", "target", "result"), [
    (0.4, 0.5, "met"), (0.5, 0.5, "met"), (0.62, 0.5, "missed by 0.12"), (float("nan"), 0.5, "not measured")])
def test_verdict(measured: float, target: float, result: str) -> None:
    assert metrics.verdict(measured, target) == result


def _sample(cpu: float, hosts: int, rc: int = 0, skew: float = 0.2) -> dict:
    return {"rc": rc, "wall": cpu * 2, "cpu": cpu, "cpu_per_host": cpu / hosts, "hosts": hosts,
            "results_per_host": 50.0, "remote_runs_per_host": 9.0, "ssh_per_host": {"exec": 10.0, "put": 2.0},
            "modules_per_host": 4.0, "modules_phase_per_host": {"preflight": 1.0, "deploy": 1.0, "wait": 2.0},
            "new_connections_per_host": 1.0, "timings": {"skew": skew, "launch_to_first_start": 0.5, "launch_to_median_start": 0.6,
                                                           "launch_to_last_start": 0.7, "launch_dispatch": 0.15, "launch_returned": 0.3,
                                                           "first_start": 3.5, "exit_to_verdict": 0.9},
            "cpu_phases": {"startup": 1.0, "preflight": cpu - 1.0, "total": cpu},
            "cpu_tasks": {"preflight: Probe": cpu / 2, "deploy: Copy": 1.0},
            "wall_phases": {"startup": 1.0, "preflight": cpu * 2 - 1.0, "total": cpu * 2}}


def test_report_ratios_and_targets(tmp_path: Path) -> None:
    bench = _load("tf_bench_script", BENCH / "bench.py")
    data = {
        "versions": {"ansible": "test"},
        "baseline": "27ea8b4",
        "smoke": {"hand": [4.0, 4.0, 4.0], "playbook": [5.0, 6.0, 7.0], "ratio": 1.5,
                  "startup": [{"rc": 0, "wall": 1.0, "cpu": 0.8}],
                  "variants": {"default": [{"rc": 0, "wall": 6.0, "cpu": 5.0}]}},
        "controller": {"32": {"new": [_sample(32.0, 32), _sample(40.0, 32), _sample(1.0, 32, rc=2)],
                              "baseline": [_sample(96.0, 32, skew=1.5), _sample(100.0, 32, skew=1.5)]}},
    }
    out = tmp_path / "B.md"
    bench.write_report(out, data, 3, "bench")
    text = out.read_text()
    # new: medians of the good runs only (36 / 32 per host); baseline 98 / 32 per host.
    assert "| 32 | 1.12 | 3.06 | 0.37 | 0.37 |" in text
    assert "| controller CPU per host at N = 32, this tree / baseline | 0.37 | 1.00 | <= 0.5 (half) | met |" in text
    # Skew kept: no worse than the baseline's plus 0.05 s.
    assert "| launch skew at N = 32 (s) | 0.20 | 1.50 | kept: <= 1.55 s (baseline + 0.05 s) | met |" in text
    # An earlier run's JSON (one smoke tree named "default", no baseline smoke) still reports.
    assert "| smoke / hand launch (wall, medians of the paired runs) | 1.50 | n/a | <= 1.5x (stretch 1.25x) | met |" in text
    # Only N = 32 measured: no CPU per extra host.
    assert "| controller CPU s per extra host, N = 2 to 16 (trivial job) | n/a | n/a | <= 0.5 s (stretch 0.3 s) | not measured |" in text
    assert ("| 32 | new | 72.00 | 36.00 | 1.12 | 50.00 | 9.00 | 4.00 | 10.00 | 2.00 | 0.00 | 1.00 | 0.50 | 0.60 | 0.70 | 0.20 "
            "| 0.15 | 0.30 | 3.50 | 0.90 | 2 / 1 |") in text
    assert "| 32 | new | 1.00 | 1.00 | 2.00 | 4.00 |" in text  # module runs per host by phase
    assert "| ansible-playbook start-up (empty play) | 1.00 | 0.80 |" in text
    assert "| preflight: Probe | 18.00 | 50% |" in text  # new tree, median of the good runs
    assert "| preflight: Probe | 49.00 | 50% |" in text  # baseline
    json.dumps(data)  # the data the report was written from stays JSON
    # What the integration tests measured (tests/bench/ELSEWHERE.md) and the notes stay in the page.
    assert "## Long runs: preemption and resume to training again" in text
    assert "## How the controller's cost is measured (and checked)" in text


def test_launch_spread_splits_dispatch_from_results() -> None:
    bench = _load("tf_bench_script", BENCH / "bench.py")
    action = "tf_runbook.multiworker.tf_worker_launch"
    marks = [
        {"event": "task", "name": "tf_launch : Start this host's workers", "t": 10.0},
        {"event": "start", "host": "w0", "action": action, "t": 10.1},
        {"event": "start", "host": "w1", "action": action, "t": 10.4},
        {"event": "start", "host": "w0", "action": "ansible.builtin.set_fact", "t": 30.0},
        {"event": "result", "host": "w1", "action": action, "t": 11.0},
        {"event": "result", "host": "w0", "action": action, "t": 11.5},
        {"event": "result", "host": "w0", "action": "ansible.builtin.set_fact"},  # an older record: no time
    ]
    spread = bench.launch_spread(marks)
    assert spread == pytest.approx({"launch_dispatch": 0.3, "launch_returned": 0.5})
    assert bench.launch_spread([m for m in marks if m["event"] != "result"]) == {}


def test_task_cpu_splits_at_task_starts_per_phase() -> None:
    events = [
        {"event": "play", "t": 1.0, "cpu_usec": 1_000_000, "file": "/r/playbooks/preflight.yml", "name": "Check"},
        {"event": "task", "t": 1.5, "cpu_usec": 1_500_000, "name": "Probe the ports"},
        {"event": "result", "host": "a", "kind": "ok", "action": "command"},
        {"event": "task", "t": 2.0, "cpu_usec": 4_000_000, "name": "Note the spec"},
        {"event": "play", "t": 3.0, "cpu_usec": 4_250_000, "file": "/r/playbooks/launch.yml", "name": "Start"},
        {"event": "task", "t": 3.5, "cpu_usec": 4_500_000, "name": "Note the spec"},
        {"event": "stats", "t": 4.0, "cpu_usec": 5_000_000},
    ]
    cpu = metrics.task_cpu(events, 5_100_000)
    assert cpu == pytest.approx({"preflight: (play start)": 0.5, "preflight: Probe the ports": 2.5,
                                 "preflight: Note the spec": 0.25, "launch: (play start)": 0.25,
                                 "launch: Note the spec": 0.5, "exit": 0.1})
    assert metrics.top(cpu, 2) == [("preflight: Probe the ports", 2.5), ("launch: Note the spec", 0.5)]


def test_task_cpu_hides_the_run_id_and_sums_tasks_repeated_over_phases() -> None:
    events = [
        {"event": "play", "t": 1.0, "cpu_usec": 0, "file": "/r/playbooks/deploy.yml", "name": "Deploy"},
        {"event": "task", "t": 1.0, "cpu_usec": 0, "name": "tf : Refuse values out of range"},
        {"event": "task", "t": 2.0, "cpu_usec": 1_000_000, "name": "Create the files of run r-7"},
        {"event": "play", "t": 3.0, "cpu_usec": 3_000_000, "file": "/r/playbooks/launch.yml", "name": "Start"},
        {"event": "task", "t": 3.0, "cpu_usec": 3_000_000, "name": "tf : Refuse values out of range"},
        {"event": "task", "t": 4.0, "cpu_usec": 4_500_000, "name": "Start"},
    ]
    cpu = metrics.task_cpu(events, 5_000_000, run_id="r-7")
    assert cpu["deploy: Create the files of run <run id>"] == pytest.approx(2.0)
    assert metrics.repeated_tasks(cpu) == [("tf : Refuse values out of range", 2, pytest.approx(2.5))]


def test_report_says_when_parts_come_from_different_runs() -> None:
    bench = _load("tf_bench_script", BENCH / "bench.py")
    one_run = {"smoke": {}, "controller": {}, "measured": {"smoke": "A", "orch": "A"}}
    assert "same run" in bench.provenance(one_run)[0]
    merged = {"smoke": {}, "hosts": {}, "measured": {"smoke": "B"}}
    lines = bench.provenance(merged)
    assert "different runs" in lines[0]
    assert "  - smoke: B" in lines
    assert "  - hosts: an earlier run of the script" in lines


def test_the_fault_part_finds_the_integration_helpers_on_its_own() -> None:
    """bench.py's own import path, without the test suite's: the fault part imports
    tests/integration/faults.py, which imports tests/helpers.py."""
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('bench', {str(BENCH / 'bench.py')!r})\n"
        "bench = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(bench)\n"
        "import faults, nshosts, workerenv\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd="/")
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


# -- issue 26's figures -------------------------------------------------------------------

def _bench() -> ModuleType:
    return _load("tf_bench_script", BENCH / "bench.py")


@pytest.mark.parametrize(("cpu", "low", "high", "expected"), [
    ({2: 10.0, 16: 17.0}, 2, 16, 0.5),
    ({16: 17.0, 64: 41.0}, 16, 64, 0.5),
    ({2: 10.0}, 2, 16, float("nan")),
    ({2: 10.0, 16: float("nan")}, 2, 16, float("nan")),
])
def test_marginal(cpu: dict, low: int, high: int, expected: float) -> None:
    assert metrics.marginal(cpu, low, high) == pytest.approx(expected, nan_ok=True)


@pytest.mark.parametrize(("sizes", "pairs"), [
    ([2, 8, 16, 32, 64], [(2, 16), (16, 64), (2, 32)]),
    ([64, 2, 16], [(2, 16), (16, 64)]),
    ([2, 8, 32], [(2, 32)]),
    ([4, 8], [(4, 8)]),  # none of issue 26's steps: smallest to largest
    ([8], []),
])
def test_marginal_pairs(sizes: list, pairs: list) -> None:
    assert metrics.marginal_pairs(sizes) == pairs


@pytest.mark.parametrize(("a", "b", "expected"), [
    (0.5, 0.6, 1.2), (0.6, 0.5, 1.2), (0.4, 0.4, 1.0), (0.0, 0.4, float("nan")), (float("nan"), 0.4, float("nan"))])
def test_spread(a: float, b: float, expected: float) -> None:
    assert metrics.spread(a, b) == pytest.approx(expected, nan_ok=True)


def test_reps_per_size() -> None:
    overrides = metrics.parse_size_map("32:2, 64:1")
    assert overrides == {32: 2, 64: 1}
    assert [metrics.reps_at(n, 3, overrides) for n in (2, 16, 32, 64)] == [3, 3, 2, 1]
    assert metrics.parse_size_map("") == {}
    with pytest.raises(ValueError, match="SIZE:REPS pairs .* got '64'"):
        metrics.parse_size_map("32:2,64")
    with pytest.raises(ValueError, match="got '64:0'"):
        metrics.parse_size_map("64:0")


def test_linear_fit_and_estimate() -> None:
    assert metrics.linear_fit({2: 7.0, 8: 13.0, 32: 37.0}) == pytest.approx((5.0, 1.0))
    assert metrics.linear_fit({2: 7.0}) is None
    plan = [("new", 2, 3), ("baseline", 2, 3), ("new", 64, 1)]
    model = {"new": (5.0, 1.0), "baseline": (5.0, 2.0)}
    # runs: 3 x 7 + 3 x 9 + 69; set-up: (2 + 0.5 x 2) + (2 + 0.5 x 64)
    assert metrics.estimate_seconds(plan, model, setup_per_host=0.5) == pytest.approx(21 + 27 + 69 + 3 + 34)


@pytest.mark.parametrize(("wall", "cpu", "smoke", "start"), [
    (0.70, 1.00, 1.00, "Mitogen: make it the default"),
    (1.00, 0.75, float("nan"), "Mitogen: make it the default"),
    (0.86, 1.01, 1.00, "Mitogen: keep it opt-in (not enough of a gain)"),
    (0.70, 0.70, 1.34, "Mitogen: keep it opt-in (the smoke is slower under it)"),
    (float("nan"), 1.0, 1.0, "Mitogen: no recommendation"),
])
def test_mitogen_recommendation(wall: float, cpu: float, smoke: float, start: str) -> None:
    line = metrics.mitogen_recommendation(wall, cpu, smoke, 32)
    assert line.startswith(start)
    if wall == wall:
        assert f"at N = 32 it took {wall:.2f}x the default strategy's wall time and {cpu:.2f}x" in line


def test_module_execs_per_host_and_phase_from_unordered_records() -> None:
    events = [
        {"event": "play", "t": 1.0, "file": "/r/playbooks/preflight.yml", "name": "Check"},
        {"event": "module", "t": 4.5, "host": "a", "module": "tf_worker_status"},  # written before the play mark
        {"event": "module", "t": 1.5, "host": "a", "module": "tf_preflight_host"},
        {"event": "module", "t": 1.6, "host": "b", "module": "tf_preflight_host"},
        {"event": "play", "t": 3.0, "file": "/r/playbooks/launch.yml", "name": "Start"},
        {"event": "module", "t": 3.5, "host": "a", "module": "tf_worker_launch"},
        {"event": "play", "t": 4.0, "file": "/r/playbooks/wait.yml", "name": "Wait"},
        {"event": "module", "t": 4.6, "host": "a", "module": "tf_worker_status"},
        {"event": "result", "t": 4.7, "host": "a", "kind": "ok", "action": "set_fact"},
    ]
    runs = metrics.module_execs(events)
    assert runs == {"a": {"preflight": 1, "launch": 1, "wait": 2, "total": 4}, "b": {"preflight": 1, "total": 1}}
    assert metrics.per_host(runs, "wait", 2) == 1.0


def test_the_callback_counts_every_module_an_action_runs(tmp_path: Path) -> None:
    """In a process of its own: the wrapper is installed on Ansible's ActionBase for good."""
    events = tmp_path / "events.jsonl"
    code = (
        "import importlib.util, json, sys, types\n"
        "from ansible.plugins.action import ActionBase\n"
        "ActionBase._execute_module = lambda self, module_name=None, module_args=None, tmp=None, task_vars=None: {'ran': module_name}\n"
        f"spec = importlib.util.spec_from_file_location('cb', {str(BENCH / 'callback' / 'tf_bench.py')!r})\n"
        "cb = importlib.util.module_from_spec(spec); spec.loader.exec_module(cb)\n"
        f"cb._count_module_runs({str(events)!r}); cb._count_module_runs({str(events)!r})  # installed once\n"
        "me = types.SimpleNamespace(_task=types.SimpleNamespace(action='ansible.builtin.copy'), "
        "_play_context=types.SimpleNamespace(remote_addr='10.0.0.9'))\n"
        "print(json.dumps([ActionBase._execute_module(me, 'ansible.legacy.stat', {}, None, {'inventory_hostname': 'h1'}),\n"
        "                  ActionBase._execute_module(me, None, None, None, None)]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout) == [{"ran": "ansible.legacy.stat"}, {"ran": None}]
    records = [json.loads(line) for line in events.read_text().splitlines()]
    assert [(r["event"], r["host"], r["module"], r["task_action"]) for r in records] == [
        ("module", "h1", "ansible.legacy.stat", "ansible.builtin.copy"),
        ("module", "10.0.0.9", "ansible.builtin.copy", "ansible.builtin.copy")]


@pytest.mark.parametrize(("text", "parts"), [
    ("issue26", ["smoke", "orch"]),
    ("orch,smoke", ["smoke", "orch"]),
    ("all", ["smoke", "restart", "ckpt", "hosts", "orch", "mitogen", "faults"]),
    ("issue42", ["smoke", "restart", "ckpt", "orch"]),
    ("issue26,mitogen", ["smoke", "orch", "mitogen"]),
])
def test_expand_parts(text: str, parts: list) -> None:
    assert _bench().expand_parts(text) == parts


def test_expand_parts_refuses_an_unknown_part() -> None:
    with pytest.raises(ValueError, match="unknown part 'orchestra'"):
        _bench().expand_parts("smoke,orchestra")


def test_the_estimate_fits_the_last_runs_walls() -> None:
    bench = _bench()
    earlier = {"controller": {str(n): {"new": [_sample(n + 1.0, n)], "baseline": [_sample(2.0 * n + 2.0, n)]}
                              for n in (2, 8, 32)}}
    # _sample's wall is twice its CPU: new 2 + 2 N, baseline 4 + 4 N.
    assert bench.run_model(earlier) == {"new": pytest.approx((2.0, 2.0)), "baseline": pytest.approx((4.0, 4.0))}
    assert bench.run_model({}) == bench.DEFAULT_RUN_SECONDS
    args = bench.argparse.Namespace(reps=5, baseline_ref="x", orch_sizes="2,64", orch_reps=3, orch_reps_at="64:1",
                                    forks_at="", mitogen_sizes="8", sizes="2")
    seconds, lines = bench.estimate(["orch"], args, earlier)
    runs = 3 * (2 + 2 * 2) + 3 * (4 + 4 * 2) + (2 + 2 * 64) + (4 + 4 * 64)
    assert seconds == pytest.approx(runs + (2 + 0.6 * 2) + (2 + 0.6 * 64))
    assert lines == [f"  orch: ~{seconds / 60:.0f} min (N = 2 x 3, N = 64 x 1 x 2 tree(s))"]


def test_variant_settings() -> None:
    bench = _bench()
    base = bench.Variant("baseline", Path("/b"), extra={"x": 1}, retry_extra={"tf_preflight_reach_check": False},
                         retry_from=48)
    assert base.retry_at(32) is None and base.retry_at(64) == {"x": 1, "tf_preflight_reach_check": False}
    assert base.describe() == ('-e {"x": 1}; at N >= 48, a failed run is made again with -e '
                               '{"tf_preflight_reach_check": false}')
    assert bench.Variant("new", Path("/n")).retry_at(64) is None
    forks = bench.Variant("new --forks 64", Path("/n"), args=("--forks", "64"), sizes=frozenset({64}))
    assert [forks.runs_at(n) for n in (32, 64)] == [False, True]
    assert forks.describe() == "--forks 64; only at N = 64"
    assert bench.Variant("new", Path("/n")).describe() == "" and bench.Variant("new", Path("/n")).runs_at(2)


@pytest.mark.parametrize(("action", "launch"), [
    ("tf_runbook.multiworker.tf_worker_launch", True), ("tf_worker_launch", True),
    ("tf_runbook.multiworker.tf_worker_deploy_launch", True), ("tf_runbook.multiworker.tf_worker_go", False),
    ("ansible.builtin.include_role", False), (None, False)])
def test_the_launch_task_is_found_by_its_action(action: str, launch: bool) -> None:
    bench = _bench()
    assert bench.is_launch_action(action) is launch
    marks = [{"event": "task", "t": 1.0, "action": "tf_runbook.multiworker.tf_run_dir", "name": "Deploy"},
             {"event": "task", "t": 2.0, "action": action, "name": "Whatever it is called"}]
    assert bench.launch_start(marks) == (2.0 if launch else None)


def _issue26_data() -> dict:
    def at(n: int, per_host: float, fixed: float, label_skew: float = 0.02) -> list:
        return [_sample(fixed + per_host * n + d, n, skew=label_skew) for d in (-0.5, 0.0, 0.5)]
    smoke_new = [{"rc": 0, "wall": w, "cpu": w, "hand": h} for w, h in ((7.0, 5.0), (8.0, 5.0), (9.0, 6.0))]
    smoke_base = [{"rc": 0, "wall": w, "cpu": w, "hand": h} for w, h in ((10.0, 5.0), (11.0, 5.0), (12.0, 6.0))]
    return {
        "versions": {"ansible": "test"}, "baseline": "4c11a93",
        "smoke": {"hand": [5.0, 5.0, 6.0], "startup": [{"rc": 0, "wall": 1.0, "cpu": 0.8}],
                  "variants": {"new": smoke_new, "baseline": [*smoke_base, {"rc": 2, "wall": 1.0, "cpu": 1.0, "hand": 5.0}]}},
        # new: 0.4 s per host everywhere; baseline: 0.8 s from 2 to 16, then 1.0 s per host.
        "controller": {"2": {"new": at(2, 0.4, 4.0), "baseline": at(2, 0.8, 4.0, 0.03)},
                       "16": {"new": at(16, 0.4, 4.0), "baseline": at(16, 0.8, 4.0, 0.03)},
                       "32": {"new": at(32, 0.4, 4.0, 0.06), "baseline": at(32, 1.0, 0.8, 0.03)},
                       "64": {"new": at(64, 0.4, 4.0), "baseline": at(64, 1.0, 0.8, 0.03)}},
        "orch_plan": {"reps": 3, "settings": {"baseline": "at N >= 48, a failed run is made again with -e {...}"}},
    }


def test_issue26_targets_side_by_side_with_the_baseline(tmp_path: Path) -> None:
    bench = _bench()
    data = _issue26_data()
    ratios = bench.smoke_ratios(data["smoke"])
    # paired: the medians of 7/5, 8/5, 9/6 and of 10/5, 11/5, 12/6
    assert ratios["new"] == pytest.approx({"ratio": 8.0 / 5.0, "paired": 1.5})
    assert ratios["baseline"] == pytest.approx({"ratio": 11.0 / 5.0, "paired": 2.0})  # its failed run left out
    rows = {row[0]: row[1:] for row in bench.targets(data)}
    assert rows["smoke / hand launch (wall, medians of the paired runs)"] == pytest.approx(
        [1.6, 2.2, "<= 1.5x (stretch 1.25x)", "missed by 0.10"])
    assert rows["controller CPU s per extra host, N = 2 to 16 (trivial job)"] == pytest.approx(
        [0.4, 0.8, "<= 0.5 s (stretch 0.3 s)", "met"])
    assert rows["CPU per extra host, 2 to 16 against 16 to 64 (larger / smaller)"] == pytest.approx(
        [1.0, 1.25, "within 1.2x", "met"])
    assert rows["launch skew at N = 32 (s)"] == pytest.approx([0.06, 0.03, "kept: <= 0.08 s (baseline + 0.05 s)", "met"])
    out = tmp_path / "B.md"
    bench.write_report(out, data, 5, "bench")
    text = out.read_text()
    assert "| baseline | 2 | 16 | 0.80 |" in text and "| baseline | 16 | 64 | 1.00 |" in text
    assert "| new | 2 | 32 | 0.40 |" in text
    assert "| baseline | 0.80 | 1.00 | 1.25 |" in text  # the spread table
    assert "- runs per tree: N = 2: 3, N = 16: 3, N = 32: 3, N = 64: 3" in text
    assert "- baseline: at N >= 48, a failed run is made again with -e {...}" in text
    assert "| `ansible-playbook train.yml --limit localhost` (new) | 8.00 | 7.0, 8.0, 9.0 | **1.60x** | 1.50x |" in text
    assert "| `ansible-playbook train.yml --limit localhost` (baseline) | 11.00 | 10.0, 11.0, 12.0 | 2.20x | 2.00x |" in text
    assert "| first worker start s (after ansible-playbook started) |" in text


def test_the_report_says_where_fewer_runs_were_made(tmp_path: Path) -> None:
    bench = _bench()
    data = _issue26_data()
    retried = {**_sample(70.0, 64), "retried_with": {"tf_preflight_reach_check": False}}
    data["controller"]["64"] = {"new": [_sample(30.0, 64)], "baseline": [retried]}
    lines = bench.plan_lines(data["orch_plan"], data["controller"])
    assert lines[0] == ("- runs per tree: N = 2: 3, N = 16: 3, N = 32: 3, N = 64: 1 "
                        "(fewer than 3 at N = 64, for time: medians of fewer runs)")
    assert lines[-1] == ('- baseline at N = 64: 1 of 1 runs failed with the defaults and were made again with '
                         '-e {"tf_preflight_reach_check": false}; its figures there are those runs\'')


def test_mitogen_advice_from_the_largest_n_and_the_smoke() -> None:
    bench = _bench()
    m = {"hosts": {"8": {"default": [_sample(10.0, 8)], "mitogen": [_sample(5.0, 8)]},
                   "32": {"default": [_sample(40.0, 32)], "mitogen": [_sample(36.0, 32)]}},
         "smoke": {"variants": {"default": [{"rc": 0, "wall": 10.0}], "mitogen": [{"rc": 0, "wall": 13.4}]}}}
    line = bench.mitogen_advice(m)
    assert line.startswith("Mitogen: keep it opt-in (not enough of a gain): at N = 32 it took 0.90x")
    assert "1.34x its wall time on the smoke" in line
    assert bench.mitogen_advice({"hosts": {}}).startswith("Mitogen: no recommendation")


def test_the_callback_also_counts_a_class_that_overrides_the_method(tmp_path: Path) -> None:
    """Mitogen mixes its own _execute_module into every action: the callback wraps that too, once."""
    events = tmp_path / "events.jsonl"
    code = (
        "import importlib.util, json, types\n"
        "from ansible.plugins.action import ActionBase\n"
        "class Mixin(ActionBase):\n"
        "    def run(self, tmp=None, task_vars=None): return {}\n"
        "    def _execute_module(self, module_name=None, module_args=None, tmp=None, task_vars=None):\n"
        "        return {'mixin': module_name}\n"
        f"spec = importlib.util.spec_from_file_location('cb', {str(BENCH / 'callback' / 'tf_bench.py')!r})\n"
        "cb = importlib.util.module_from_spec(spec); spec.loader.exec_module(cb)\n"
        f"cb._count_module_runs({str(events)!r}, Mixin); cb._count_module_runs({str(events)!r}, Mixin)\n"
        "class Plain(ActionBase):\n"
        "    def run(self, tmp=None, task_vars=None): return {}\n"
        f"cb._count_module_runs({str(events)!r}, Plain)  # does not override it: nothing to wrap\n"
        "assert '_execute_module' not in Plain.__dict__\n"
        "me = types.SimpleNamespace(_task=types.SimpleNamespace(action='a'), _play_context=None)\n"
        "print(json.dumps(Mixin._execute_module(me, 'm', {}, None, {'inventory_hostname': 'h2'})))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout) == {"mixin": "m"}
    assert [json.loads(line)["host"] for line in events.read_text().splitlines()] == ["h2"]


def test_part_compare_runs_fewer_reps_where_asked_and_retries_a_failed_baseline_run(tmp_path: Path,
                                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench()

    class Hosts:
        def __init__(self, size: int, workdir: Path, static_neighbors: bool = False) -> None:
            self.hosts: list = []

        def __enter__(self) -> "Hosts":
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def write_inventory(self, path: Path, groupvars: dict) -> Path:
            return path

    monkeypatch.setitem(sys.modules, "nshosts", type(sys)("nshosts"))
    sys.modules["nshosts"].NamespaceHosts = Hosts  # type: ignore[attr-defined]
    calls: list[tuple[str, tuple, dict]] = []

    class Inst:
        def run(self, tree: Path, playbook: str, args: list, extra: dict, **kwargs: object) -> dict:
            calls.append((str(tree), tuple(args[2:]), extra))
            # The baseline's first try at 64 hosts fails; every other run goes through.
            rc = 2 if str(tree) == "/b" and "tf_preflight_reach_check" not in extra and "-64-" in extra["tf_run_id"] else 0
            return {"rc": rc, "wall": 1.0, "cpu": 1.0, "cpu_phases": {}, "wall_phases": {}, "cpu_tasks": {},
                    "left_in_cgroup": 0, "ops": {}, "runs": {}, "modules": {}, "new_connections": {},
                    "started": 0.0, "ended": 1.0, **({"error": "host h10 cannot reach worker 33"} if rc else {})}

    variants = [bench.Variant("new", Path("/n")),
                bench.Variant("baseline", Path("/b"), retry_extra={"tf_preflight_reach_check": False}, retry_from=48),
                bench.Variant("new --forks 64", Path("/n"), args=("--forks", "64"), sizes=frozenset({64}))]
    table = bench.part_compare([2, 64], 3, tmp_path, Inst(), variants, "orch", reps_at={64: 1})
    assert {n: {label: len(s) for label, s in by.items()} for n, by in table.items()} == {
        2: {"new": 3, "baseline": 3}, 64: {"new": 1, "baseline": 1, "new --forks 64": 1}}
    retried = table[64]["baseline"][0]
    assert retried["rc"] == 0 and retried["retried_with"] == {"tf_preflight_reach_check": False}
    assert "cannot reach worker 33" in retried["first_error"]
    at64 = [c for c in calls if "-64-" in c[2]["tf_run_id"]]
    assert [(tree, args, extra.get("tf_preflight_reach_check")) for tree, args, extra in at64] == [
        ("/n", (), None), ("/b", (), None), ("/b", (), False), ("/n", ("--forks", "64"), None)]
    assert at64[2][2]["tf_run_id"].endswith("-retry")


def test_a_restarts_latency_is_split_by_the_runs_own_records() -> None:
    marks = [
        {"event": "task", "t": 99.0, "name": "tf_attempts : Record the decision, its culprit and every worker's cause"},
        {"event": "task", "t": 103.0, "name": "tf_attempts : Record the decision, its culprit and every worker's cause"},
        {"event": "module", "t": 103.5, "host": "a", "module": "m"},
        {"event": "task", "t": 104.0, "name": "tf_attempts : Choose the marker of the chief's checkpoint directory and start the clock"},
        {"event": "module", "t": 104.5, "host": "b", "module": "m"},
        {"event": "task", "t": 106.0, "name": "Launch the new attempt"},
        {"event": "module", "t": 106.5, "host": "a", "module": "launch"},
        {"event": "module", "t": 109.0, "host": "b", "module": "wait, after the go"},
    ]
    failed = [{"finished_at": 101.0}, {"finished_at": 102.0}]
    restarted = [{"started_at": 107.0, "joined_at": 110.0}, {"started_at": 107.5, "joined_at": 111.0}]
    split = metrics.restart_split(100.0, failed, restarted, marks)
    assert split == {"detection": 2.0, "decision": 1.0, "prepare": 1.0, "copy": 2.0, "launch": 1.5, "join": 3.5,
                     "total": 11.0, "modules_per_host": 1.5}
    with pytest.raises(ValueError, match="no decision or no launch"):
        metrics.restart_split(100.0, failed, restarted, marks[:3])


def test_issue42s_targets_read_the_restart_part() -> None:
    data = {"restart": {"variants": {
        "new": [{"rc": 0, "total": 9.0}, {"rc": 0, "total": 11.0}, {"rc": 0, "total": 9.5}, {"rc": 2, "total": 1.0}],
        "baseline": [{"rc": 0, "total": 14.0}]}}}
    rows = _bench().targets42(data)
    assert rows[0][1:] == [9.5, 14.0, "<= 10 s", "met"]
    assert rows[1][-1] == "not measured" and rows[2][-1] == "not measured"


def test_run_timings_gives_the_first_start_to_the_last_join_where_every_worker_joined(tmp_path: Path) -> None:
    """The smoke's split (issue 42): the job's start-up, from the supervisors' records."""
    bench = _load("tf_bench_script", BENCH / "bench.py")
    for index, (started, joined, finished) in enumerate([(100.0, 102.5, 105.0), (100.2, 103.0, 105.5)]):
        wdir = tmp_path / "h" / "runs" / "r1" / f"worker-{index}"
        wdir.mkdir(parents=True)
        (wdir / "state.json").write_text(json.dumps({"started_at": started, "joined_at": joined}))
        (wdir / "exit.json").write_text(json.dumps({"finished_at": finished}))
    timings = bench.run_timings(tmp_path, "r1", 98.0, 106.0)
    assert timings["start_to_joined"] == pytest.approx(3.0)
    assert timings["job"] == pytest.approx(5.5)
    assert timings["first_start"] == pytest.approx(2.0)
    # A worker that never joined: no figure rather than a wrong one.
    (tmp_path / "h" / "runs" / "r1" / "worker-1" / "state.json").write_text(json.dumps({"started_at": 100.2, "joined_at": None}))
    assert "start_to_joined" not in bench.run_timings(tmp_path, "r1", 98.0, 106.0)


def test_the_ckpt_parts_report_gives_the_time_ratio_and_the_controllers_bytes() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import bench_ckpt
    from metrics import md_table, median

    ckpt = {"megabytes": 10, "variants": {
        "new": {"1": [{"rc": 0, "seconds": 2.0, "bytes": 300_000, "again": {"rc": 0, "seconds": 1.0, "bytes": 200_000}}],
                "8": [{"rc": 0, "seconds": 3.0, "bytes": 900_000, "again": {"rc": 0, "seconds": 1.5, "bytes": 800_000}}]},
        "baseline": {"1": [{"rc": 0, "seconds": 1.0, "bytes": 20_000_000}],
                     "8": [{"rc": 0, "seconds": 9.0, "bytes": 90_000_000}, {"rc": 2, "seconds": None, "bytes": 0}]}}}
    lines = bench_ckpt.ckpt_lines(ckpt, md_table, median)
    assert lines[1] == "## Checkpoints at size (issue 42)"
    table = "\n".join(lines)
    assert "| new | 2.00 | 3.00 | 1.50 | 0.30 | 0.90 | 1.00 / 1.50, 0.20 / 0.80 | 2 / 0 |" in table, table
    assert "| baseline | 1.00 | 9.00 | 9.00 | 20.00 | 90.00 | - | 2 / 1 |" in table, table
