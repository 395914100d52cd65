#!/usr/bin/env python3
"""Benchmark of the runbook's overhead, written to docs/BENCHMARKS.md.

    make bench                       # everything, medians of 5
    .venv/bin/python tests/bench/bench.py --parts smoke --reps 5

Parts (each measured side by side in one run, so that ratios compare like with like):
  smoke   the smoke playbook end to end vs the same two workers launched by hand as the
          seed does; the ratio of the medians
  hosts   namespace hosts N = 2, 4, 8 training the default job: end to end, time to the
          first worker start, skew between first and last start, last exit to verdict
  orch    orchestration alone at N = 16, 32 (and 2, 8 for the trend) with a trivial job
          in place of TensorFlow: overhead = end to end minus the job's own time
  faults  time from a fault to the playbook's exit (tests/integration/faults.py), and the
          supervision timings: SIGINT to no process of the run left, a killed worker of a
          detached run to every other worker stopped
Needs root for the namespace hosts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))

PYTHON = Path(sys.executable)
PLAYBOOK_BIN = PYTHON.with_name("ansible-playbook")
SEED_JOB = REPO / "files" / "multiworker_train.py"
TRIVIAL_JOB = """
import json, os
cfg = json.loads(os.environ["TF_CONFIG"]); i = cfg["task"]["index"]; n = len(cfg["cluster"]["worker"])
print(f"worker={i} cluster_workers={n} replicas={n} global_batch={16 * n}", flush=True)
print(f"worker={i} epoch=1 loss=0.5000", flush=True)
if i == 0:
    open("multiworker-complete.txt", "w").write("done\\n")
print(f"worker={i} training_complete", flush=True)
"""


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def play(playbook: str, args: list[str], extra: dict[str, Any]) -> tuple[float, subprocess.CompletedProcess[str]]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    started = time.monotonic()
    result = subprocess.run(
        [str(PLAYBOOK_BIN), playbook, *args, "-e", json.dumps(extra)],
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )
    elapsed = time.monotonic() - started
    if result.returncode != 0:
        errors = [line for line in result.stdout.splitlines() if "fatal" in line or "refused" in line or "[ERROR]" in line]
        raise RuntimeError(f"{playbook} {args} failed:\n" + "\n".join(errors[:20]) + "\n" + result.stdout[-1500:])
    return elapsed, result


def run_timings(base_dir: Path, run_id: str, wall_start: float, wall_end: float) -> dict[str, float]:
    """Start/exit times of every worker from the supervisors' records (same clock)."""
    starts, exits = [], []
    for state in base_dir.glob(f"**/runs/{run_id}/worker-*/state.json"):
        starts.append(json.loads(state.read_text())["started_at"])
        exits.append(json.loads((state.parent / "exit.json").read_text())["finished_at"])
    if not starts:
        raise RuntimeError(f"no worker records for {run_id} under {base_dir}")
    return {
        "e2e": wall_end - wall_start,
        "first_start": min(starts) - wall_start,
        "skew": max(starts) - min(starts),
        "exit_to_verdict": wall_end - max(exits),
        "job": max(exits) - min(starts),
        "overhead": (wall_end - wall_start) - (max(exits) - min(starts)),
    }


# -- part 1: smoke vs hand ---------------------------------------------------------------

def hand_launch(workdir: Path) -> float:
    """The seed's way: two background workers on localhost with hand-written TF_CONFIG."""
    cluster = ["localhost:12345", "localhost:23456"]
    started = time.monotonic()
    procs = []
    for index in range(2):
        config = json.dumps({"cluster": {"worker": cluster}, "task": {"type": "worker", "index": index}})
        log = open(workdir / f"worker-{index}.log", "w")
        procs.append(subprocess.Popen([str(PYTHON), str(SEED_JOB)], cwd=workdir, env=dict(os.environ, TF_CONFIG=config), stdout=log, stderr=subprocess.STDOUT))
    for proc in procs:
        if proc.wait() != 0:
            raise RuntimeError("hand-launched worker failed")
    return time.monotonic() - started


def part_smoke(reps: int, tmp: Path) -> dict[str, Any]:
    hand, book = [], []
    for rep in range(reps):
        # Interleaved, so that drift in the machine's load hits both alike.
        workdir = tmp / f"hand-{rep}"
        workdir.mkdir()
        hand.append(hand_launch(workdir))
        elapsed, _ = play("train.yml", ["--limit", "localhost"], {
            "tf_worker_base_dir": str(tmp / "host"), "tf_runs_dir": str(tmp / "runs")})
        book.append(elapsed)
    return {"hand": hand, "playbook": book, "ratio": median(book) / median(hand)}


# -- parts 2 and 3: namespace hosts ----------------------------------------------------------

def part_hosts(sizes: list[int], reps: int, tmp: Path, trivial: bool,
               extra_vars: dict[str, Any] | None = None) -> dict[int, dict[str, float]]:
    from nshosts import NamespaceHosts
    from workerenv import shared_venv

    groupvars: dict[str, Any]
    if trivial:
        job = tmp / "trivial_job.py"
        job.write_text(TRIVIAL_JOB)
        groupvars = {"tf_worker_python": "/usr/bin/python3", "tf_train_script": str(job), "tf_startup_timeout": 0}
    else:
        groupvars = {"tf_worker_python": str(shared_venv())}
    groupvars.update(extra_vars or {})
    table: dict[int, dict[str, float]] = {}
    for size in sizes:
        workdir = tmp / f"{'orch' if trivial else 'hosts'}-{size}"
        samples: list[dict[str, float]] = []
        failures: list[str] = []
        with NamespaceHosts(size, workdir / "ns", static_neighbors=size >= 16) as hosts:
            inventory = hosts.write_inventory(workdir / "inventory.yml", groupvars=groupvars)
            for rep in range(reps):
                run_id = f"bench-{size}-{rep}"
                wall_start = time.time()
                try:
                    play("train.yml", ["-i", str(inventory)], {"tf_run_id": run_id, "tf_runs_dir": str(workdir / "runs")})
                except RuntimeError as exc:
                    # A failed run is a finding, not a reason to lose the other numbers.
                    failures.append(str(exc).splitlines()[0])
                    print(f"  N={size} rep {rep} FAILED:\n{exc}", flush=True)
                    continue
                wall_end = time.time()
                # The hosts' homes are private: read the records through the host's root.
                records = [h.private_path("/home") for h in hosts.hosts]
                merged = workdir / f"records-{rep}"
                for host_home in records:
                    for state in host_home.glob(f"**/runs/{run_id}/worker-*/*.json"):
                        target = merged / host_home.parent.name / state.relative_to(host_home)
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(state.read_bytes())
                samples.append(run_timings(merged, run_id, wall_start, wall_end))
        if not samples:
            print(f"  N={size}: every run failed", flush=True)
            continue
        table[size] = {key: median([s[key] for s in samples]) for key in samples[0]}
        table[size]["runs"] = len(samples)
        table[size]["failed"] = len(failures)
        print(f"  N={size}: " + ", ".join(f"{k}={v:.2f}" for k, v in table[size].items()), flush=True)
    return table


# -- part 4: faults --------------------------------------------------------------------------

def part_faults(tmp: Path) -> dict[str, float]:
    from faults import LONG_JOB_ARGS, remote_pid, run_with_fault, wait_for_log
    from nshosts import NamespaceHosts
    from workerenv import shared_venv

    common = {"tf_worker_python": str(shared_venv()), "tf_train_args": LONG_JOB_ARGS,
              "tf_startup_timeout": 60, "tf_job_timeout": 600, "tf_wait_poll_interval": 5}
    results: dict[str, float] = {}
    run = "~/tf-runbook/runs"

    def scenario(name: str, count: int, inject: Callable[[NamespaceHosts, str], Callable[[], None]], hostvars: dict[str, Any] | None = None) -> None:
        workdir = tmp / f"fault-{name}"
        try:
            with NamespaceHosts(count, workdir / "ns") as hosts:
                out = run_with_fault(hosts, workdir, name, common, inject(hosts, name), hostvars=hostvars)
        except Exception as exc:  # noqa: BLE001 - one broken scenario must not hide the others
            print(f"  {name}: scenario broke: {exc}", flush=True)
            return
        if out.returncode == 0:
            print(f"  {name}: the playbook did not fail", flush=True)
            return
        results[name] = out.fault_to_exit
        print(f"  {name}: {out.fault_to_exit:.1f} s from fault to playbook exit", flush=True)

    def kill(hosts: NamespaceHosts, run_id: str) -> Callable[[], None]:
        def inject() -> None:
            wait_for_log(hosts, 1, f"{run}/{run_id}/worker-1/worker.log", "epoch=2 ")
            hosts.run(1, f"kill -9 {remote_pid(hosts, 1, f'{run}/{run_id}/worker-1')}")
        return inject

    def lose(method: str) -> Callable[[NamespaceHosts, str], Callable[[], None]]:
        def make(hosts: NamespaceHosts, run_id: str) -> Callable[[], None]:
            def inject() -> None:
                wait_for_log(hosts, 1, f"{run}/{run_id}/worker-1/worker.log", "epoch=2 ")
                getattr(hosts, method)(1)
            return inject
        return make

    def never_starts(hosts: NamespaceHosts, run_id: str) -> Callable[[], None]:
        # The fault is there from the launch on: time from the launch of worker 0.
        return lambda: wait_for_log(hosts, 0, f"{run}/{run_id}/worker-0/state.json", "pid")

    scenario("killed-worker", 2, kill)
    # The preflight refuses a missing interpreter before launch; with that check off, this
    # measures the runtime safety net for a worker that fails to start.
    scenario("never-starts", 2, never_starts,
             hostvars={"node1": {"tf_worker_python": "/nonexistent/python3", "tf_preflight_versions_check": False},
                       "node0": {"tf_preflight_versions_check": False}})
    scenario("cut-network", 2, lose("cut_network"))
    scenario("powered-off", 2, lose("power_off"))
    supervision(tmp, results)
    return results


def supervision(tmp: Path, results: dict[str, float]) -> None:
    """Supervision timings (tests/integration/faults.py, as test_supervision.py runs them)."""
    from faults import LONG_JOB_ARGS, ctrl_c, detached_worker_killed
    from nshosts import NamespaceHosts
    from workerenv import shared_venv

    extra = {"tf_worker_python": str(shared_venv()), "tf_train_args": LONG_JOB_ARGS, "tf_startup_timeout": 60,
             "tf_job_timeout": 600, "tf_wait_poll_interval": 2, "tf_preflight_versions_check": False}
    cases: dict[str, Callable[[NamespaceHosts, Path], dict[str, Any]]] = {
        "controller lost (SIGINT to ansible-playbook, tf_controller_timeout 10): no process left":
            lambda hosts, work: ctrl_c(hosts, work, {**extra, "tf_controller_timeout": 10}, "ctrl-c", bound=25),
        "detached run, a worker killed: every other worker stopped, no controller":
            lambda hosts, work: detached_worker_killed(hosts, work, extra, "peer"),
    }
    for name, case in cases.items():
        workdir = tmp / f"supervision-{len(results)}"
        try:
            with NamespaceHosts(2, workdir / "ns") as hosts:
                results[name] = case(hosts, workdir)["seconds"]
        except Exception as exc:  # noqa: BLE001 - one broken scenario must not hide the others
            print(f"  {name}: scenario broke: {exc}", flush=True)
            continue
        print(f"  {name}: {results[name]:.1f} s", flush=True)


def versions() -> dict[str, str]:
    out = subprocess.run([str(PLAYBOOK_BIN), "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    tf = subprocess.run([str(PYTHON), "-c", "import tensorflow as tf; print(tf.__version__)"], capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")).stdout.strip()
    return {"ansible": out, "tensorflow": tf, "python": platform.python_version(),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}"}


def write_report(path: Path, data: dict[str, Any], reps: int, command: str) -> None:
    lines = ["# Benchmarks", "", f"Written by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", ""]
    for key, value in data["versions"].items():
        lines.append(f"- {key}: {value}")
    lines.append(f"- medians of {reps} runs each; every table was measured in the same run of the script")
    if "smoke" in data:
        s = data["smoke"]
        lines += ["", "## Smoke playbook vs hand launch (two workers, localhost)", "",
                  "| | median s | runs (s) |", "|---|---|---|",
                  f"| hand launch (seed) | {median(s['hand']):.2f} | {', '.join(f'{v:.1f}' for v in s['hand'])} |",
                  f"| `ansible-playbook train.yml --limit localhost` | {median(s['playbook']):.2f} | {', '.join(f'{v:.1f}' for v in s['playbook'])} |",
                  f"| ratio | **{s['ratio']:.2f}x** | target <= 1.5x (stretch 1.25x) |"]
    for key, title in (("hosts", "Namespace hosts, default TensorFlow job"), ("orch", "Orchestration alone, trivial job")):
        if key in data:
            lines += ["", f"## {title}", "", "| N | end to end s | first start s | start skew s | last exit to verdict s | job s | overhead s | runs ok / failed |", "|---|---|---|---|---|---|---|---|"]
            for n, row in sorted(data[key].items(), key=lambda kv: int(kv[0])):
                lines.append(f"| {n} | {row['e2e']:.2f} | {row['first_start']:.2f} | {row['skew']:.2f} | {row['exit_to_verdict']:.2f} | {row['job']:.2f} | {row['overhead']:.2f} | {row.get('runs', '?')} / {row.get('failed', 0)} |")
            rows = {int(k): v for k, v in data[key].items()}
            base = rows.get(2)
            if base:
                ratios = ", ".join(f"N={n}: {rows[n]['overhead'] / base['overhead']:.2f}x" for n in sorted(rows) if n != 2)
                lines.append(f"\nOverhead relative to N=2: {ratios}.")
    for note in data.get("notes", []):
        lines += ["", note]
    if "faults" in data:
        lines += ["", "## Fault to playbook exit", "", "| fault | seconds |", "|---|---|"]
        for name, value in data["faults"].items():
            lines.append(f"| {name} | {value:.1f} |")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="smoke,hosts,orch,faults")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--sizes", default="2,4,8")
    parser.add_argument("--orch-sizes", default="2,8,16,32")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "BENCHMARKS.md")
    parser.add_argument("--vars", type=json.loads, default={},
                        help="JSON of inventory variables for every host (e.g. to turn a check off)")
    parser.add_argument("--merge", action="store_true",
                        help="keep the parts and sizes of the last run's JSON that this run does not measure")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    data: dict[str, Any] = {"versions": versions()}
    earlier: dict[str, Any] = {}
    if args.merge and args.out.with_suffix(".json").exists():
        earlier = json.loads(args.out.with_suffix(".json").read_text())
        data = {**earlier, "versions": data["versions"]}
    with tempfile.TemporaryDirectory(prefix="tf-bench-") as tmp_name:
        tmp = Path(tmp_name)
        if "smoke" in parts:
            print("smoke vs hand launch ...", flush=True)
            data["smoke"] = part_smoke(args.reps, tmp)
            print(f"  ratio {data['smoke']['ratio']:.2f}", flush=True)
        def save() -> None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.with_suffix(".json").write_text(json.dumps(data, indent=2, default=str))

        save()
        if "hosts" in parts:
            print("namespace hosts ...", flush=True)
            data["hosts"] = part_hosts([int(n) for n in args.sizes.split(",")], args.reps, tmp, trivial=False,
                                      extra_vars=args.vars)
            save()
        if "orch" in parts:
            print("orchestration alone ...", flush=True)
            data["orch"] = {**earlier.get("orch", {}),
                            **part_hosts([int(n) for n in args.orch_sizes.split(",")], args.reps, tmp, trivial=True,
                                       extra_vars=args.vars)}
            save()
        if "faults" in parts:
            print("faults ...", flush=True)
            data["faults"] = part_faults(tmp)
            save()
    (args.out.with_suffix(".json")).write_text(json.dumps(data, indent=2, default=str))
    write_report(args.out, data, args.reps, "python tests/bench/bench.py " + " ".join(sys.argv[1:]))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
