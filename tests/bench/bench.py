#!/usr/bin/env python3
"""Benchmark of the runbook's overhead, written to docs/BENCHMARKS.md.

    make bench                       # everything
    make bench-issue26               # issue 26's figures alone (--parts issue26), about 25 min
    .venv/bin/python tests/bench/bench.py --parts smoke --reps 5
    .venv/bin/python tests/bench/bench.py --parts issue26 --estimate-only   # the plan and its time

Parts (each measured side by side in one run, so that ratios compare like with like; the
script prints the plan and its expected time, from the last run's figures, before it starts):
  smoke   the smoke playbook end to end, this tree and a checkout of --baseline-ref, each
          rep paired with the same two workers launched by hand as the seed does; the
          ratio of the medians and the median of the paired ratios; wall, CPU and module
          runs by phase
  hosts   namespace hosts N = 2, 4, 8 training the default job: end to end, time to the
          first worker start, skew between first and last start, last exit to verdict
  orch    orchestration alone at N = 2, 8, 16, 32, 64 with a trivial job in place of
          TensorFlow (--orch-reps runs at each N, fewer at the largest: --orch-reps-at):
          overhead = end to end minus the job's own time; and the controller's cost per
          host (CPU per phase, CPU per extra host from 2 to 16, 16 to 64 and 2 to 32,
          task results and module runs per host and phase, SSH operations, first worker
          start, last exit to verdict), this tree side by side with a checkout of
          --baseline-ref (interleaved runs, each tree with its own ansible.cfg and
          playbooks, measured by this tree's instruments); and, at the sizes of
          --forks-at, this tree again with --forks N after the run with ansible.cfg's forks
  mitogen the smoke and N = 8, 32 under Mitogen's mitogen_linear strategy (installed
          into .cache/mitogen) side by side with the default strategy, and a one-line
          recommendation computed from the figures
  ckpt    the chief's checkpoint (--ckpt-mb, default 1000 MB) copied between attempts to 1 and to 8
          namespace hosts, this tree and --baseline-ref: the copy's time and the bytes that cross
          the controller (tests/bench/bench_ckpt.py)
  faults  time from a fault to the playbook's exit (tests/integration/faults.py), and the
          supervision timings: SIGINT to no process of the run left, a killed worker of a
          detached run to every other worker stopped
Needs root for the namespace hosts, and a cgroup v2 hierarchy for the controller's CPU.

How the controller's CPU is measured: ansible-playbook runs in a fresh cgroup v2 of its
own (its child joins it before exec), so the cgroup's cpu.stat counts it, its forks and
its ssh clients, including the ControlPersist masters that detach from the process tree;
the namespace hosts' sshd were started by this script before, outside that cgroup, so
their sessions (module interpreters, workers) are not counted. Each run gets its own
ControlPath directory, and what is left in its cgroup when the playbook exits (the
masters) is stopped by PID, so every run starts its connections cold and pays for them.
The callback tests/bench/callback/tf_bench.py notes the cgroup's usage at each play
start (phases from the phase playbook a play came from) and every task result per host;
the ssh, sftp and scp that Ansible runs are tests/bench/oplog.sh, which records each
invocation and execs the real binary. The callback also notes when the strategy hands a
task to the worker process of each host (the launch's dispatch spread). With
TF_BENCH_KEEP_EVENTS=DIR, each run's callback events are kept in DIR for a closer look.
TF_BENCH_WRAP="CMD ..." runs each playbook under a command ({run} becomes the run's number),
for example a sampling profiler:
TF_BENCH_WRAP="py-spy record --subprocesses -r 250 -f raw -o /tmp/prof-{run}.txt --".
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, NamedTuple

REPO = Path(__file__).resolve().parents[2]
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(REPO / "tests" / "integration"))
# tests/helpers.py, which the integration helpers (faults.py) import.
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(BENCH))

import metrics  # noqa: E402 - the bench's pure parts, beside this file
from metrics import median  # noqa: E402

BASELINE_REF = "4c11a93"  # main before issue 26's redesign
MITOGEN_PIN = "mitogen==0.3.54"
MITOGEN_DIR = REPO / ".cache" / "mitogen"
NOTES = BENCH / "NOTES.md"
# Figures measured by the integration tests, not by this script (their commands and dates
# are in the text): kept in the page by every report this script writes.
ELSEWHERE = BENCH / "ELSEWHERE.md"

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


def run_timings(base_dir: Path, run_id: str, wall_start: float, wall_end: float,
                launch_at: float | None = None) -> dict[str, float]:
    """Start/exit times of every worker from the supervisors' records (same clock).

    With ``launch_at`` (the launch task's start), also the first and the median worker's
    start after it: the skew is the last start minus the first.
    """
    starts, exits, joins = [], [], []
    for state in base_dir.glob(f"**/runs/{run_id}/worker-*/state.json"):
        record = json.loads(state.read_text())
        starts.append(record["started_at"])
        joins.append(record.get("joined_at"))
        exits.append(json.loads((state.parent / "exit.json").read_text())["finished_at"])
    if not starts:
        raise RuntimeError(f"no worker records for {run_id} under {base_dir}")
    after = {}
    if launch_at:
        after = {"launch_to_first_start": min(starts) - launch_at,
                 "launch_to_median_start": median([s - launch_at for s in starts]),
                 "launch_to_last_start": max(starts) - launch_at}
    return {**after,
        "e2e": wall_end - wall_start,
        "first_start": min(starts) - wall_start,
        "skew": max(starts) - min(starts),
        "exit_to_verdict": wall_end - max(exits),
        "job": max(exits) - min(starts),
        # The first start to the last worker joined (the job's start-up), where every worker joined.
        **({"start_to_joined": max(joins) - min(starts)} if joins and None not in joins else {}),
        "overhead": (wall_end - wall_start) - (max(exits) - min(starts)),
    }


# -- the controller's instruments ------------------------------------------------------------

def cgroup2_root() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (pure v2 or the hybrid's unified), if any."""
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


def configured_callbacks(tree: Path) -> list[str]:
    """The callbacks the tree's own ansible.cfg enables (the bench's environment variable
    replaces that list, so the bench names them again, after its own)."""
    import configparser

    config = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";",))
    try:
        config.read(tree / "ansible.cfg", encoding="utf-8")
    except configparser.Error:
        return []
    value = config.get("defaults", "callbacks_enabled", fallback="")
    return [name.strip() for name in value.split(",") if name.strip()]

class Instruments:
    """Runs ansible-playbook in a cgroup of its own, with the bench's callback and ssh log."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.count = 0
        self.cgroups = cgroup2_root()
        if self.cgroups is None or not os.access(self.cgroups, os.W_OK):
            raise RuntimeError("no writable cgroup v2 hierarchy: the controller's CPU cannot be measured "
                               "(run as root on a machine with cgroup v2)")
        real = shutil.which("ssh")
        if real is None:
            raise RuntimeError("no ssh client on PATH")
        self.real_ssh_dir = str(Path(real).parent)
        self.bin = tmp / "bin"
        self.bin.mkdir(exist_ok=True)
        for name in ("ssh", "sftp", "scp"):
            (self.bin / name).symlink_to(BENCH / "oplog.sh")

    def run(self, tree: Path, playbook: str, args: list[str], extra: dict[str, Any], *,
            env_extra: dict[str, str] | None = None, hosts: Any = None, timeout: float = 1800) -> dict[str, Any]:
        """One measured run; never raises for a failed playbook (the result says rc)."""
        self.count += 1
        work = self.tmp / f"m{self.count}"
        (work / "oplog").mkdir(parents=True)
        (work / "cp").mkdir()
        events = work / "events.jsonl"
        cgroup = self.cgroups / f"tf-bench-{os.getpid()}-{self.count}"
        cgroup.mkdir()
        env = dict(os.environ, ANSIBLE_CONFIG=str(tree / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_CALLBACK_PLUGINS=str(BENCH / "callback"),
                   ANSIBLE_CALLBACKS_ENABLED=",".join(["tf_bench", *configured_callbacks(tree)]),
                   TF_BENCH_CPU_STAT=str(cgroup / "cpu.stat"), TF_BENCH_EVENTS=str(events),
                   TF_BENCH_OPLOG=str(work / "oplog"), TF_BENCH_REAL_SSH_DIR=self.real_ssh_dir,
                   ANSIBLE_SSH_EXECUTABLE=str(self.bin / "ssh"), ANSIBLE_SFTP_EXECUTABLE=str(self.bin / "sftp"),
                   ANSIBLE_SCP_EXECUTABLE=str(self.bin / "scp"), ANSIBLE_SSH_CONTROL_PATH_DIR=str(work / "cp"),
                   **(env_extra or {}))
        logins = {h.name: self._logins(h) for h in hosts} if hosts else {}
        procs = str(cgroup / "cgroup.procs")

        def join_cgroup() -> None:
            with open(procs, "w") as f:
                f.write(str(os.getpid()))

        started = time.time()
        try:
            # TF_BENCH_WRAP: a command line the playbook runs under (a profiler, for a look
            # at where the controller's CPU goes; its own CPU then counts too).
            wrap = shlex.split(os.environ.get("TF_BENCH_WRAP", "").replace("{run}", str(self.count)))
            proc = subprocess.Popen([*wrap, str(PLAYBOOK_BIN), playbook, *args, "-e", json.dumps(extra)], cwd=tree, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=join_cgroup)
            try:
                output, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                output, _ = proc.communicate()
            ended = time.time()
            left = self._stop_cgroup(cgroup)
            usage = int(dict(line.split() for line in (cgroup / "cpu.stat").read_text().splitlines())["usage_usec"])
        finally:
            # Also on an interrupted bench: nothing the run started outlives it.
            self._stop_cgroup(cgroup)
            self._remove_cgroup(cgroup)
        marks = metrics.read_events(events)
        if os.environ.get("TF_BENCH_KEEP_EVENTS"):  # for a closer look at one run's timeline
            keep = Path(os.environ["TF_BENCH_KEEP_EVENTS"])
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(events, keep / f"{extra.get('tf_run_id', 'run')}-{self.count}.jsonl")
        names = {h.address: h.name for h in hosts} if hosts else {}
        result: dict[str, Any] = {
            "rc": proc.returncode, "wall": ended - started, "cpu": usage / 1e6,
            "cpu_phases": metrics.phase_cpu(marks, usage), "wall_phases": metrics.phase_wall(marks, started, ended),
            "cpu_tasks": dict(metrics.top(metrics.task_cpu(marks, usage, str(extra.get("tf_run_id", ""))), 60)),
            "runs": {h: dict(c) for h, c in metrics.module_runs(marks).items()},
            "modules": {h: dict(c) for h, c in metrics.module_execs(marks).items()},
            "ops": {h: dict(c) for h, c in metrics.ssh_ops(metrics.read_oplog(work / "oplog"), names).items()},
            "new_connections": {h.name: self._logins(h) - logins[h.name] for h in hosts} if hosts else {},
            "left_in_cgroup": left, "started": started, "ended": ended,
            # When the first launch began dispatching (the task's start): the workers'
            # start times against it split the skew into dispatch and start-up.
            "launch_at": launch_start(marks),
            **launch_spread(marks),
        }
        if proc.returncode != 0:
            errors = [line for line in output.splitlines() if "fatal" in line or "refused" in line or "[ERROR]" in line]
            result["error"] = "\n".join(errors[:20]) + "\n" + output[-1500:]
        return result

    @staticmethod
    def _logins(host: Any) -> int:
        try:
            return metrics.accepted_logins(host.sshd_log.read_text(errors="replace"))
        except OSError:
            return 0

    @staticmethod
    def _stop_cgroup(cgroup: Path) -> int:
        """Stop what the run left in its cgroup (ControlPersist masters), by PID; how many."""
        left = 0
        for attempt in range(50):
            pids = [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]
            if not pids:
                break
            left = max(left, len(pids))
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGTERM if attempt < 10 else signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        return left

    @staticmethod
    def _remove_cgroup(cgroup: Path) -> None:
        for _ in range(50):
            try:
                cgroup.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)
        print(f"  could not remove {cgroup}", flush=True)


# The module that starts (or arms) a host's workers: `tf_worker_launch` in the baseline;
# any of the collection's modules whose name says launch, so that a merged deploy-and-launch
# module (issue 26) is found too. The go (`tf_worker_go`) is not the launch task.
_LAUNCH_ACTION = re.compile(r"^(tf_runbook\.multiworker\.)?tf_\w*launch\w*$")


def is_launch_action(action: Any) -> bool:
    return bool(_LAUNCH_ACTION.match(str(action or "")))


def launch_start(marks: list[dict[str, Any]]) -> float | None:
    """When the first launch task started (its task mark), or None without one."""
    return next((m["t"] for m in marks if m.get("event") == "task" and is_launch_action(m.get("action"))), None)


def launch_spread(marks: list[dict[str, Any]]) -> dict[str, float]:
    """The launch task's own times on the controller, from the callback's per-host events.

    `launch_dispatch`: first to last host handed to a worker process (the strategy's loop
    alone); `launch_returned`: first to last host's result. A skew far above the dispatch
    spread comes from the hosts' side.
    """
    starts = [m["t"] for m in marks if m.get("event") == "start" and is_launch_action(m.get("action"))]
    ends = [m["t"] for m in marks if m.get("event") == "result" and "t" in m and is_launch_action(m.get("action"))]
    if not starts or not ends:
        return {}
    return {"launch_dispatch": max(starts) - min(starts), "launch_returned": max(ends) - min(ends)}


def worker_timings(hosts: Any, workdir: Path, run_id: str, wall_start: float, wall_end: float,
                   launch_at: float | None = None) -> dict[str, float]:
    """run_timings of a namespace-host run: the records are read through each host's root."""
    merged = workdir / f"records-{run_id}"
    for host_home in (h.private_path("/home") for h in hosts.hosts):
        for state in host_home.glob(f"**/runs/{run_id}/worker-*/*.json"):
            target = merged / host_home.parent.name / state.relative_to(host_home)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(state.read_bytes())
    return run_timings(merged, run_id, wall_start, wall_end, launch_at)


# -- part 1: smoke vs hand ---------------------------------------------------------------

EMPTY_PLAY = "- name: Do nothing (ansible-playbook's own start-up)\n  hosts: localhost\n  gather_facts: false\n  tasks: []\n"


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


def slim(result: dict[str, Any], hosts: int) -> dict[str, Any]:
    """What a report keeps of one measured run: totals, phases and per-host means."""
    ops = Counter()
    for counts in result["ops"].values():
        ops.update(counts)
    out = {key: result[key] for key in ("rc", "wall", "cpu", "cpu_phases", "wall_phases", "cpu_tasks", "left_in_cgroup")}
    out.update({
        "hosts": hosts,
        "cpu_per_host": result["cpu"] / hosts,
        "results_per_host": metrics.per_host(result["runs"], "results", hosts),
        "remote_runs_per_host": metrics.per_host(result["runs"], "remote", hosts),
        # What the hosts ran: every module an action sent (issue 26: one per host per phase).
        "modules_per_host": metrics.per_host(result["modules"], "total", hosts),
        "modules_phase_per_host": {phase: metrics.per_host(result["modules"], phase, hosts)
                                   for phase in sorted({p for c in result["modules"].values() for p in c} - {"total"})},
        "ssh_per_host": {op: n / hosts for op, n in sorted(ops.items())},
        "new_connections_per_host": (sum(result["new_connections"].values()) / hosts
                                     if result["new_connections"] else float("nan")),
        "runs": result["runs"], "ops": result["ops"],
    })
    if "error" in result:
        out["error"] = result["error"][-800:]
    return out


class Variant(NamedTuple):
    """One way of running the playbook that a part measures side by side with the others.

    `tree`: the checkout whose ansible.cfg and playbooks run; `env`: extra environment
    (Mitogen); `args`: extra ansible-playbook arguments (`--forks`); `extra`: extra vars
    of every run; `retry_extra`: at N >= `retry_from`, a run that failed is made again
    once with these extra vars added (the baseline's probe may refuse many hosts); `sizes`:
    the host counts it runs at (all when empty). A NamedTuple rather than a dataclass: the
    script is also loaded by file path, without a module entry a dataclass needs. The
    dictionaries are never changed, so their shared defaults are safe.
    """

    label: str
    tree: Path
    env: dict[str, str] = {}
    args: tuple[str, ...] = ()
    extra: dict[str, Any] = {}
    retry_extra: dict[str, Any] = {}
    retry_from: int = 0
    sizes: frozenset[int] = frozenset()

    def runs_at(self, size: int) -> bool:
        return not self.sizes or size in self.sizes

    def retry_at(self, size: int) -> dict[str, Any] | None:
        """The extra vars of a second try of a failed run at this size, or None for no retry."""
        return {**self.extra, **self.retry_extra} if self.retry_extra and size >= self.retry_from else None

    def describe(self) -> str:
        """What sets this variant apart, for the report ('' when nothing)."""
        bits = []
        if self.args:
            bits.append(" ".join(self.args))
        if self.env.get("ANSIBLE_STRATEGY"):
            bits.append(f"strategy {self.env['ANSIBLE_STRATEGY']}")
        if self.extra:
            bits.append(f"-e {json.dumps(self.extra)}")
        if self.retry_extra:
            bits.append(f"at N >= {self.retry_from}, a failed run is made again with -e {json.dumps(self.retry_extra)}")
        if self.sizes:
            bits.append("only at N = " + ", ".join(str(n) for n in sorted(self.sizes)))
        return "; ".join(bits)


def part_smoke(reps: int, tmp: Path, inst: Instruments, variants: list[Variant],
               hand: bool = True) -> dict[str, Any]:
    """The smoke under each variant; with `hand`, also the hand launch and the start-up alone.

    Each rep runs the hand launch, then every variant, so that each variant's run is paired
    with the hand launch of its rep (`hand` in the sample) and drift in the machine's load
    hits all alike.
    """
    empty = tmp / "empty.yml"
    empty.write_text(EMPTY_PLAY)
    out: dict[str, Any] = {"hand": [], "startup": [], "variants": {v.label: [] for v in variants},
                           "settings": {v.label: v.describe() for v in variants if v.describe()}}
    for rep in range(reps):
        hand_s = float("nan")
        if hand:
            workdir = tmp / f"hand-{len(list(tmp.glob('hand-*')))}"
            workdir.mkdir()
            try:
                hand_s = hand_launch(workdir)
                out["hand"].append(hand_s)
            except RuntimeError as exc:
                print(f"  hand launch rep {rep} FAILED: {exc}", flush=True)
            startup = inst.run(REPO, str(empty), ["--limit", "localhost"], {})
            out["startup"].append(slim(startup, 1))
        for v in variants:
            run_id = f"smoke-{v.label.replace(' ', '-')}-{len(out['variants'][v.label])}-{int(time.time())}"
            result = inst.run(v.tree, "train.yml", ["--limit", "localhost", *v.args], {
                "tf_run_id": run_id, "tf_worker_base_dir": str(tmp / "host"), "tf_runs_dir": str(tmp / "runs"),
                **v.extra}, env_extra=v.env)
            sample = slim(result, 1)
            sample["hand"] = hand_s
            if result["rc"] == 0:
                try:
                    sample["timings"] = run_timings(tmp / "host", run_id, result["started"], result["ended"],
                                                    result.get("launch_at"))
                except (RuntimeError, OSError, ValueError) as exc:
                    sample["timings_error"] = str(exc)
            out["variants"][v.label].append(sample)
            state = "ok" if result["rc"] == 0 else f"FAILED rc={result['rc']}\n{result.get('error', '')}"
            print(f"  smoke {v.label} rep {rep}: {result['wall']:.1f} s wall, {result['cpu']:.1f} s CPU, "
                  f"{sample['modules_per_host']:.0f} module runs, {state}", flush=True)
    if hand and out["hand"]:
        ratios = smoke_ratios(out)
        out["ratios"] = ratios
        if "new" in ratios:
            out["playbook"] = [s["wall"] for s in _ok(out["variants"]["new"])]
            out["ratio"] = ratios["new"]["ratio"]
    return out


def smoke_ratios(smoke: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per variant: the ratio of the medians (playbook / hand launch) and the median of the
    ratios of each run to the hand launch of its own rep (`paired`)."""
    hand = median(smoke.get("hand", []))
    out = {}
    for label, samples in smoke.get("variants", {}).items():
        good = _ok(samples)
        if not good:
            continue
        out[label] = {"ratio": median([s["wall"] for s in good]) / hand,
                      "paired": median([s["wall"] / s["hand"] for s in good if s.get("hand", float("nan")) > 0])}
    return out


# -- parts 2 and 3: namespace hosts ----------------------------------------------------------

def trivial_groupvars(tmp: Path) -> dict[str, Any]:
    job = tmp / "trivial_job.py"
    job.write_text(TRIVIAL_JOB)
    return {"tf_worker_python": "/usr/bin/python3", "tf_train_script": str(job), "tf_startup_timeout": 0}


def part_compare(sizes: list[int], reps: int, tmp: Path, inst: Instruments, variants: list[Variant], name: str,
                 extra_vars: dict[str, Any] | None = None,
                 reps_at: dict[int, int] | None = None) -> dict[int, dict[str, list[dict[str, Any]]]]:
    """The trivial job on N namespace hosts under each variant, interleaved (A, B, A, B...).

    `reps` runs of each variant at each size, or `reps_at[size]` where given (fewer runs
    at the largest sizes, to fit a time budget).
    """
    from nshosts import NamespaceHosts

    groupvars = {**trivial_groupvars(tmp), **(extra_vars or {})}
    table: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for size in sizes:
        workdir = tmp / f"{name}-{size}"
        here = [v for v in variants if v.runs_at(size)]
        table[size] = {v.label: [] for v in here}
        try:
            began = time.monotonic()
            with NamespaceHosts(size, workdir / "ns", static_neighbors=size >= 16) as hosts:
                print(f"  N={size}: {size} namespace hosts up in {time.monotonic() - began:.1f} s", flush=True)
                inventory = hosts.write_inventory(workdir / "inventory.yml", groupvars=groupvars)
                for rep in range(metrics.reps_at(size, reps, reps_at or {})):
                    for v in here:
                        run_id = f"bench-{name}-{v.label.replace(' ', '-')}-{size}-{rep}"

                        def once(extra: dict[str, Any], run_id: str = run_id, v: Variant = v) -> dict[str, Any]:
                            return inst.run(v.tree, "train.yml", ["-i", str(inventory), *v.args],
                                            {"tf_run_id": run_id, "tf_runs_dir": str(workdir / "runs"), **extra},
                                            env_extra=v.env, hosts=hosts.hosts)

                        result = once(v.extra)
                        retry = v.retry_at(size)
                        first_error = ""
                        if result["rc"] != 0 and retry is not None:
                            first_error = result.get("error", "")[-800:]
                            print(f"  N={size} {v.label} rep {rep}: FAILED rc={result['rc']} with its defaults "
                                  f"({result['wall']:.1f} s), made again with -e {json.dumps(retry)}\n{first_error}", flush=True)
                            run_id = f"{run_id}-retry"
                            result = once(retry, run_id)
                        sample = slim(result, size)
                        if first_error:
                            sample["retried_with"] = retry
                            sample["first_error"] = first_error
                        if result["rc"] == 0:
                            try:
                                sample["timings"] = worker_timings(hosts, workdir, run_id, result["started"], result["ended"],
                                                                   result.get("launch_at"))
                                sample["timings"].update({k: result[k] for k in ("launch_dispatch", "launch_returned")
                                                          if k in result})
                            except RuntimeError as exc:
                                sample["timings_error"] = str(exc)
                        table[size][v.label].append(sample)
                        state = "ok" if result["rc"] == 0 else f"FAILED rc={result['rc']}\n{result.get('error', '')}"
                        print(f"  N={size} {v.label} rep {rep}: {result['wall']:.1f} s wall, {result['cpu']:.1f} s CPU "
                              f"({sample['cpu_per_host']:.2f}/host), {sample['modules_per_host']:.1f} module runs/host "
                              f"({sample['remote_runs_per_host']:.1f} remote task results), "
                              f"ssh {sample['ssh_per_host']}, {state}", flush=True)
        except Exception as exc:  # noqa: BLE001 - hosts that would not come up must not lose the other sizes
            print(f"  N={size}: broke: {exc}", flush=True)
    return table


def wall_rows(samples: list[dict[str, Any]]) -> dict[str, float] | None:
    """The wall-time table's row (medians) from the runs that went through."""
    timed = [s["timings"] for s in samples if s.get("timings")]
    if not timed:
        return None
    row = {key: median([t[key] for t in timed]) for key in timed[0]}
    row["runs"] = len(timed)
    row["failed"] = len(samples) - len(timed)
    return row


def checkout(ref: str, tmp: Path) -> tuple[Path, str]:
    """A copy of the tree at `ref` (git archive, so no worktree is registered); its commit."""
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", f"{ref}^{{commit}}"],
                            capture_output=True, text=True, check=True).stdout.strip()
    dest = tmp / f"baseline-{commit[:10]}"
    dest.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", commit], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest, commit


UNPIN = """#!/bin/sh
# The smoke's worker interpreter under Mitogen, with every CPU allowed again: Mitogen pins
# the processes it spawns (here the local connection's target, hence the supervisor and
# the training) to the CPUs it does not reserve for itself, one of two on a 2-core machine.
exec taskset --all-tasks --cpu-list 0-{last} {python} "$@"
"""


def unpinned_python(tmp: Path) -> Path:
    """An interpreter for the smoke's workers that undoes Mitogen's CPU pinning (taskset)."""
    path = tmp / "python-unpinned"
    path.write_text(UNPIN.format(last=(os.cpu_count() or 1) - 1, python=PYTHON))
    path.chmod(0o755)
    return path


def mitogen_env() -> dict[str, str]:
    """Install Mitogen into .cache/mitogen (never into .venv) and return the env that turns it on."""
    marker = MITOGEN_DIR / ".installed"
    if not marker.exists() or marker.read_text().strip() != MITOGEN_PIN:
        subprocess.run([str(PYTHON), "-m", "pip", "install", "--quiet", "--upgrade", "--target", str(MITOGEN_DIR), MITOGEN_PIN],
                       check=True)
        marker.write_text(MITOGEN_PIN + "\n")
    return {"ANSIBLE_STRATEGY_PLUGINS": str(MITOGEN_DIR / "ansible_mitogen" / "plugins" / "strategy"),
            "ANSIBLE_STRATEGY": "mitogen_linear"}


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


# -- issue 42: a restart's latency ----------------------------------------------------------

RESTART_JOB_ARGS = ["--epochs=5", "--steps-per-epoch=40"]


def restart_records(hosts: Any, run_id: str, attempt_dir: str) -> list[dict[str, Any]]:
    """Every worker's state.json of one attempt (with its exit.json's finished_at where
    there is one), read through each namespace host's root."""
    out = []
    for host_home in (h.private_path("/home") for h in hosts.hosts):
        for state in host_home.glob(f"**/runs/{attempt_dir}/worker-*/state.json"):
            record = json.loads(state.read_text())
            end = state.parent / "exit.json"
            if end.exists():
                ending = json.loads(end.read_text())
                record["finished_at"] = ending.get("finished_at")
                record["ending"] = {key: ending.get(key) for key in ("returncode", "stopped_by", "reason", "cause")}
            out.append(record)
    return out


def part_restart(reps: int, tmp: Path, inst: Instruments, variants: list[Variant]) -> dict[str, Any]:
    """Issue 42's restart latency: the default job on 2 namespace hosts, tf_restart_attempts 1,
    worker 1's job killed (SIGKILL) once it logged its first epoch; from the kill to every
    worker of the next attempt joined, split by metrics.restart_split from the workers'
    records and the callback's task marks. Each rep runs every variant, on the same hosts."""
    import threading

    from faults import remote_pid, wait_for_log
    from nshosts import NamespaceHosts
    from workerenv import shared_venv

    groupvars = {"tf_worker_python": str(shared_venv()), "tf_train_args": RESTART_JOB_ARGS, "tf_restart_attempts": 1,
                 "tf_startup_timeout": 60, "tf_job_timeout": 600}
    out: dict[str, Any] = {"variants": {v.label: [] for v in variants}, "job_args": RESTART_JOB_ARGS}
    workdir = tmp / "restart"
    with NamespaceHosts(2, workdir / "ns") as hosts:
        inventory = hosts.write_inventory(workdir / "inventory.yml", groupvars=groupvars)
        for rep in range(reps):
            for v in variants:
                run_id = f"restart-{v.label}-{rep}"
                killed: list[float] = []

                def inject(run_id: str = run_id, killed: list[float] = killed) -> None:
                    try:
                        worker = f"~/tf-runbook/runs/{run_id}/worker-1"
                        wait_for_log(hosts, 1, f"{worker}/worker.log", "epoch=1 ", timeout=240)
                        pid = remote_pid(hosts, 1, worker)
                        killed.append(time.time())
                        hosts.run(1, f"kill -9 {pid}")
                    except Exception as exc:  # noqa: BLE001 - the run's result says what broke
                        print(f"  restart {run_id}: no kill: {exc}", flush=True)

                thread = threading.Thread(target=inject, daemon=True)
                thread.start()
                result = inst.run(v.tree, "train.yml", ["-i", str(inventory), *v.args],
                                  {"tf_run_id": run_id, "tf_runs_dir": str(workdir / "runs"), **v.extra},
                                  env_extra=v.env, hosts=hosts.hosts, timeout=600)
                thread.join(timeout=5)
                sample: dict[str, Any] = {"rc": result["rc"], "wall": result["wall"], "cpu": result["cpu"]}
                try:
                    if not killed:
                        raise ValueError("the kill never happened")
                    marks = metrics.read_events(inst.tmp / f"m{inst.count}" / "events.jsonl")
                    failed = restart_records(hosts, run_id, run_id)
                    sample.update(metrics.restart_split(killed[0], failed,
                                                        restart_records(hosts, run_id, f"{run_id}/retry-1"), marks))
                    # How each worker of the killed attempt ended, and when after the kill: the
                    # detection's spread (a survivor that waits out its grace) is read here.
                    sample["failed_workers"] = [{"after_kill": w["finished_at"] - killed[0], **w.get("ending", {})}
                                                for w in failed if w.get("finished_at")]
                except (ValueError, KeyError, TypeError, OSError) as exc:
                    sample["error"] = str(exc)
                    sample.setdefault("rc", 1)
                out["variants"][v.label].append(sample)
                if "total" in sample:
                    print(f"  restart {v.label} rep {rep}: {sample['total']:.1f} s from the kill to every worker "
                          "joined (" + ", ".join(f"{k} {sample[k]:.2f}" for k in RESTART_STEPS) +
                          f"), {sample['modules_per_host']:.1f} module runs per host, rc={result['rc']}", flush=True)
                else:
                    print(f"  restart {v.label} rep {rep}: FAILED rc={result['rc']}: {sample.get('error')}\n"
                          f"{result.get('error', '')[-1500:]}", flush=True)
    return out


RESTART_STEPS = ("detection", "decision", "prepare", "copy", "launch", "join")


def restart_lines(restart: dict[str, Any]) -> list[str]:
    """The report's section: medians per variant of each step of a restart."""
    headers = ["tree", "kill to every worker joined s", *[f"{step} s" for step in RESTART_STEPS],
               "module runs per host, kill to go", "runs ok / failed"]
    rows = []
    for label, samples in restart.get("variants", {}).items():
        good = [s for s in samples if "total" in s and s.get("rc") == 0]
        rows.append([label, _med(good, lambda s: s["total"]), *[_med(good, lambda s, k=k: s[k]) for k in RESTART_STEPS],
                     _med(good, lambda s: s["modules_per_host"]), f"{len(good)} / {len(samples) - len(good)}"])
    return ["", "## A restart's latency (issue 42)", "",
            "The default job (`tf_train_args` " + json.dumps(restart.get("job_args", [])) + ") on 2 namespace hosts, "
            "`tf_restart_attempts: 1`; worker 1's job killed (SIGKILL) once it logged its first epoch. Each step "
            "runs from the end of the one before: detection (every worker of the attempt stopped, their "
            "exit.json), decision (the controller's task mark of the recorded decision), prepare (to the "
            "checkpoint copy's first task), copy (to the new attempt's launch task), launch (to the last "
            "worker's start, the go), join (to the last worker joined, state.json). Medians.", "",
            *metrics.md_table(headers, rows)]


def versions() -> dict[str, str]:
    out = subprocess.run([str(PLAYBOOK_BIN), "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    tf = subprocess.run([str(PYTHON), "-c", "import tensorflow as tf; print(tf.__version__)"], capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")).stdout.strip()
    return {"ansible": out, "tensorflow": tf, "python": platform.python_version(),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}"}


def _by_n(table: dict[Any, Any]) -> list[tuple[Any, Any]]:
    """Items of a table keyed by N (or by a name such as "smoke"), numbers in order first."""
    return sorted(table.items(), key=lambda kv: (0, int(kv[0]), "") if str(kv[0]).isdigit() else (1, 0, str(kv[0])))


def _ok(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in samples if s.get("rc") == 0]


def _med(samples: list[dict[str, Any]], get: Callable[[dict[str, Any]], float]) -> float:
    return median([get(s) for s in _ok(samples)])


def controller_rows(table: dict[Any, dict[str, list[dict[str, Any]]]]) -> list[list[Any]]:
    """Rows of the controller-cost table: one per N and variant, medians of the good runs."""
    rows = []
    for n, by_label in _by_n(table):
        for label, samples in by_label.items():
            rows.append([
                n, label, _med(samples, lambda s: s["wall"]), _med(samples, lambda s: s["cpu"]),
                _med(samples, lambda s: s["cpu_per_host"]), _med(samples, lambda s: s["results_per_host"]),
                _med(samples, lambda s: s["remote_runs_per_host"]),
                _med(samples, lambda s: s.get("modules_per_host", float("nan"))),
                _med(samples, lambda s: s["ssh_per_host"].get("exec", 0.0)),
                _med(samples, lambda s: s["ssh_per_host"].get("put", 0.0)),
                _med(samples, lambda s: s["ssh_per_host"].get("fetch", 0.0)),
                _med(samples, lambda s: s["new_connections_per_host"]),
                _med(samples, lambda s: s.get("timings", {}).get("launch_to_first_start", float("nan"))),
                _med(samples, lambda s: s.get("timings", {}).get("launch_to_median_start", float("nan"))),
                _med(samples, lambda s: s.get("timings", {}).get("launch_to_last_start", float("nan"))),
                _med(samples, lambda s: s.get("timings", {}).get("skew", float("nan"))),
                _med(samples, lambda s: s.get("timings", {}).get("launch_dispatch", float("nan"))),
                _med(samples, lambda s: s.get("timings", {}).get("launch_returned", float("nan"))),
                _med(samples, lambda s: s.get("timings", {}).get("first_start", float("nan"))),
                _med(samples, lambda s: s.get("timings", {}).get("exit_to_verdict", float("nan"))),
                f"{len(_ok(samples))} / {len(samples) - len(_ok(samples))}",
            ])
    return rows


CONTROLLER_HEADERS = ["N", "tree", "wall s", "controller CPU s", "CPU s per host", "task results per host",
                      "remote task results per host", "module runs per host", "ssh exec per host", "put per host",
                      "fetch per host", "new SSH connections per host", "launch task to first worker start s",
                      "launch task to median worker start s", "launch task to last worker start s", "launch skew s",
                      "launch dispatch spread s (controller)", "launch results spread s",
                      "ansible-playbook start to first worker start s", "last exit to verdict s", "runs ok / failed"]


def phase_rows(table: dict[Any, dict[str, list[dict[str, Any]]]], key: str) -> tuple[list[str], list[list[Any]]]:
    """Per-phase medians (`cpu_phases` or `wall_phases`), one row per N and variant."""
    names = list(metrics.CPU_ROWS)
    for by_label in table.values():
        for samples in by_label.values():
            for s in _ok(samples):
                names += [p for p in s[key] if p not in names and p != "total"]
    rows = []
    for n, by_label in _by_n(table):
        for label, samples in by_label.items():
            rows.append([n, label, *[_med(samples, lambda s, p=p: s[key].get(p, 0.0)) for p in names],
                         _med(samples, lambda s: s[key].get("total", float("nan")))])
    return ["N", "tree", *names, "total"], rows


def ratio_rows(table: dict[Any, dict[str, list[dict[str, Any]]]], new: str, base: str) -> list[list[Any]]:
    rows = []
    for n, by_label in _by_n(table):
        if new in by_label and base in by_label:
            a = _med(by_label[new], lambda s: s["cpu_per_host"])
            b = _med(by_label[base], lambda s: s["cpu_per_host"])
            wa = _med(by_label[new], lambda s: s["wall"])
            wb = _med(by_label[base], lambda s: s["wall"])
            rows.append([n, a, b, a / b if b == b and b else float("nan"), wa / wb if wb == wb and wb else float("nan")])
    return rows


def task_lines(table: dict[Any, dict[str, list[dict[str, Any]]]], count: int = 12) -> list[str]:
    """The tasks that cost the controller most at the largest N, per tree (medians)."""
    sizes = [n for n, _ in _by_n(table) if str(n).isdigit()]
    if not sizes:
        return []
    n = sizes[-1]
    lines: list[str] = []
    for label, samples in table[n].items():
        good = [s for s in _ok(samples) if s.get("cpu_tasks")]
        if not good:
            continue
        names = {name for s in good for name in s["cpu_tasks"]}
        medians = {name: median([s["cpu_tasks"].get(name, 0.0) for s in good]) for name in names}
        total = median([s["cpu"] for s in good])
        lines += ["", f"### Where the controller's CPU goes at N = {n} ({label}): the {count} costliest tasks", "",
                  "From each task's start to the next task's (with the linear strategy, every host's run "
                  "of that task); names as the tree's task names.", "",
                  *metrics.md_table(["phase: task", "CPU s", "share of the run"],
                                    [[name, cpu, f"{100 * cpu / total:.0f}%"] for name, cpu in metrics.top(medians, count)])]
        repeated = metrics.repeated_tasks(medians)
        if repeated:
            lines += ["", f"Tasks that run in more than one phase ({label}, N = {n}), summed over the phases:", "",
                      *metrics.md_table(["task", "phases", "CPU s", "share of the run"],
                                        [[name, k, cpu, f"{100 * cpu / total:.0f}%"] for name, k, cpu in repeated[:count]])]
    return lines


def cpu_by_n(table: dict[Any, dict[str, list[dict[str, Any]]]], label: str) -> dict[int, float]:
    """Median controller CPU of one tree's good runs at each N it has."""
    out = {}
    for n, by_label in _by_n(table):
        if str(n).isdigit() and label in by_label and _ok(by_label[label]):
            out[int(n)] = _med(by_label[label], lambda s: s["cpu"])
    return out


def marginal_rows(table: dict[Any, dict[str, list[dict[str, Any]]]]) -> list[list[Any]]:
    """CPU per added host for each step of metrics.MARGINAL_PAIRS, per tree."""
    labels = list(dict.fromkeys(label for _, by_label in _by_n(table) for label in by_label))
    rows = []
    for label in labels:
        cpu = cpu_by_n(table, label)
        for low, high in metrics.marginal_pairs(cpu):
            rows.append([label, low, high, metrics.marginal(cpu, low, high)])
    return rows


def marginal_spread(table: dict[Any, dict[str, list[dict[str, Any]]]], label: str) -> tuple[float, float, float]:
    """(2 -> 16, 16 -> 64, how far apart: larger / smaller) for one tree; NaN where not measured."""
    cpu = cpu_by_n(table, label)
    low, high = metrics.marginal(cpu, 2, 16), metrics.marginal(cpu, 16, 64)
    return low, high, metrics.spread(low, high)


def first_marginal(table: dict[Any, dict[str, list[dict[str, Any]]]], label: str) -> tuple[str, float]:
    """The CPU per added host from 2 to 16 hosts, or from 2 to 32 where 16 was not measured."""
    cpu = cpu_by_n(table, label)
    for low, high in ((2, 16), (2, 32)):
        value = metrics.marginal(cpu, low, high)
        if value == value:
            return f"{low} to {high}", value
    return "2 to 16", float("nan")


def module_phase_lines(table: dict[Any, dict[str, list[dict[str, Any]]]]) -> list[str]:
    """Module runs per host in each phase (issue 26's design: one per phase that touches hosts)."""
    phases = [p for p in (*metrics.CPU_ROWS, "status", "stop")
              if any(p in s.get("modules_phase_per_host", {}) for v in table.values() for x in v.values() for s in _ok(x))]
    if not phases:
        return []
    rows = [[n, label, *[_med(samples, lambda s, p=p: s.get("modules_phase_per_host", {}).get(p, 0.0)) for p in phases],
             _med(samples, lambda s: s.get("modules_per_host", float("nan")))]
            for n, by_label in _by_n(table) for label, samples in by_label.items()]
    return ["", "### Module runs per host, by phase", "",
            "Every module a task's action sent to a host (an action that polls or fetches counts each "
            "module it runs; set_fact and controller-only actions count none), mean over the hosts.", "",
            *metrics.md_table(["N", "tree", *phases, "total"], rows)]


def plan_lines(plan: dict[str, Any], table: dict[Any, dict[str, list[dict[str, Any]]]]) -> list[str]:
    """How many runs each size had (fewer at the largest sizes for time), and what sets each tree apart."""
    lines = []
    counts = {str(n): max((len(v) for v in by_label.values()), default=0) for n, by_label in _by_n(table)}
    if counts:
        reps = plan.get("reps")
        fewer = [n for n, c in counts.items() if reps and c < reps]
        lines.append("- runs per tree: " + ", ".join(f"N = {n}: {c}" for n, c in counts.items())
                     + (f" (fewer than {reps} at N = {', '.join(fewer)}, for time: medians of fewer runs)" if fewer else ""))
    for label, text in plan.get("settings", {}).items():
        lines.append(f"- {label}: {text}")
    for n, by_label in _by_n(table):
        for label, samples in by_label.items():
            retried = [s for s in samples if s.get("retried_with")]
            if retried:
                lines.append(f"- {label} at N = {n}: {len(retried)} of {len(samples)} runs failed with the defaults and "
                             f"were made again with -e {json.dumps(retried[0]['retried_with'])}; its figures there are "
                             "those runs'")
    return lines


def mitogen_advice(m: dict[str, Any]) -> str:
    """The one-line recommendation from the Mitogen part's medians (largest N and the smoke)."""
    hosts = m.get("hosts", {})
    sizes = [n for n, by_label in _by_n(hosts)
             if str(n).isdigit() and _ok(by_label.get("default", [])) and _ok(by_label.get("mitogen", []))]
    nan = float("nan")
    if not sizes:
        return metrics.mitogen_recommendation(nan, nan, nan, 0)
    n = sizes[-1]
    d, g = hosts[n]["default"], hosts[n]["mitogen"]
    wall = _med(g, lambda s: s["wall"]) / _med(d, lambda s: s["wall"])
    cpu = _med(g, lambda s: s["cpu"]) / _med(d, lambda s: s["cpu"])
    smoke = m.get("smoke", {}).get("variants", {})
    smoke_ratio = nan
    if _ok(smoke.get("default", [])) and _ok(smoke.get("mitogen", [])):
        smoke_ratio = _med(smoke["mitogen"], lambda s: s["wall"]) / _med(smoke["default"], lambda s: s["wall"])
    return metrics.mitogen_recommendation(wall, cpu, smoke_ratio, int(n))


def _times(value: float) -> str:
    """A ratio as "1.60x", or "n/a"."""
    return f"{value:.2f}x" if value == value else "n/a"


def _smoke_lines(s: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    trees = {label: _ok(samples) for label, samples in s.get("variants", {}).items() if _ok(samples)}
    if not (s.get("hand") and trees):
        return lines
    mine = "new" if "new" in trees else next(iter(trees))
    hand = median(s["hand"])
    ratios = smoke_ratios(s)
    lines += ["", "## Smoke playbook vs hand launch (two workers, localhost)", "",
              "Each rep runs the hand launch, then the playbook of each tree: \"paired\" is the median of "
              "each run's wall over its own rep's hand launch.", "",
              "| | median s | runs (s) | ratio of the medians | paired ratio |", "|---|---|---|---|---|",
              f"| hand launch (seed) | {hand:.2f} | {', '.join(f'{v:.1f}' for v in s['hand'])} | | |"]
    for label, book in trees.items():
        walls = [x["wall"] for x in book]
        r = ratios.get(label, {})
        bold = "**" if label == mine else ""
        lines.append(f"| `ansible-playbook train.yml --limit localhost` ({label}) | {median(walls):.2f} | "
                     f"{', '.join(f'{v:.1f}' for v in walls)} | {bold}{_times(r.get('ratio', float('nan')))}{bold} | "
                     f"{_times(r.get('paired', float('nan')))} |")
    lines.append("\nTarget: <= 1.5x (stretch 1.25x).")
    startup = [x for x in s.get("startup", []) if x.get("rc") == 0]
    book = trees[mine]
    wall, cpu = median([x["wall"] for x in book]), median([x["cpu"] for x in book])
    if startup:
        up_wall = median([x["wall"] for x in startup])
        up_cpu = median([x["cpu"] for x in startup])
        lines += ["", f"### Split of the smoke ({mine})", "",
                  "ansible-playbook's own start-up is an empty play against localhost with the same "
                  "configuration (`ansible.cfg`, inventory, callbacks): a fixed cost of any playbook. "
                  "The rest is ours. The smoke's CPU includes the two workers' training "
                  "(localhost uses the local connection, so they run in the playbook's cgroup).", "",
                  *metrics.md_table(["", "wall s", "CPU s"], [
                      ["ansible-playbook start-up (empty play)", up_wall, up_cpu],
                      ["the rest (the runbook's work, training included)", wall - up_wall, cpu - up_cpu],
                      ["smoke playbook", wall, cpu],
                      ["hand launch (wall)", hand, float("nan")],
                      ["smoke minus start-up, vs hand launch", (wall - up_wall) / hand, float("nan")],
                  ])]
    columns = (*metrics.CPU_ROWS, "total")
    phase_table = []
    for label, tree_book in trees.items():
        phase_table.append([f"wall s ({label})", *[median([x.get("wall_phases", {}).get(k, 0.0) for x in tree_book])
                                                   for k in columns]])
        phase_table.append([f"CPU s ({label})", *[median([x.get("cpu_phases", {}).get(k, 0.0) for x in tree_book])
                                                  for k in columns]])
        if any("modules_phase_per_host" in x for x in tree_book):
            phase_table.append([f"module runs ({label})",
                                *[median([x.get("modules_phase_per_host", {}).get(k, 0.0) for x in tree_book])
                                  for k in columns[:-1]],
                                median([x.get("modules_per_host", float("nan")) for x in tree_book])])
    timing_rows = [[label,
                    _med(tree_book, lambda x: x.get("timings", {}).get("first_start", float("nan"))),
                    _med(tree_book, lambda x: x.get("timings", {}).get("skew", float("nan"))),
                    _med(tree_book, lambda x: x.get("timings", {}).get("job", float("nan"))),
                    _med(tree_book, lambda x: x.get("timings", {}).get("exit_to_verdict", float("nan"))),
                    hand] for label, tree_book in trees.items()]
    lines += ["", "Where the smoke's wall time goes, by phase (medians; the wait phase holds the "
              "training), and the workers' own times from their records:", "",
              *metrics.md_table(["", *columns], phase_table), "",
              *metrics.md_table(["tree", "first worker start s (after ansible-playbook started)", "start skew s",
                                 "job s (first start to last exit)", "last exit to verdict s", "hand launch s"],
                                timing_rows)]
    return lines


TARGET_HEADERS = ["figure", "this tree", "baseline", "target", "met? (this tree)"]


def targets(data: dict[str, Any]) -> list[list[Any]]:
    """Issue 26's targets, this tree beside the baseline where the baseline was measured."""
    rows: list[list[Any]] = []
    nan = float("nan")
    ratios = smoke_ratios(data.get("smoke", {})) if data.get("smoke", {}).get("hand") else {}
    new_label = "new" if "new" in ratios else "default"
    smoke_new = ratios.get(new_label, {}).get("ratio", data.get("smoke", {}).get("ratio", nan))
    smoke_base = ratios.get("baseline", {}).get("ratio", nan)
    rows.append(["smoke / hand launch (wall, medians of the paired runs)", smoke_new, smoke_base,
                 "<= 1.5x (stretch 1.25x)", metrics.verdict(smoke_new, 1.5)])
    table = data.get("controller", {})
    step, per_host_new = first_marginal(table, "new")
    _, per_host_base = first_marginal(table, "baseline")
    rows.append([f"controller CPU s per extra host, N = {step} (trivial job)", per_host_new, per_host_base,
                 "<= 0.5 s (stretch 0.3 s)", metrics.verdict(per_host_new, 0.5)])
    new_spread = marginal_spread(table, "new")[2]
    base_spread = marginal_spread(table, "baseline")[2]
    rows.append(["CPU per extra host, 2 to 16 against 16 to 64 (larger / smaller)", new_spread, base_spread,
                 "within 1.2x", metrics.verdict(new_spread, 1.2)])
    big = table.get("32") or table.get(32) or {}
    skew_new = _med(big["new"], lambda s: s.get("timings", {}).get("skew", nan)) if "new" in big else nan
    skew_base = _med(big["baseline"], lambda s: s.get("timings", {}).get("skew", nan)) if "baseline" in big else nan
    # "Keep": no worse than the baseline's armed launch, give or take the noise of a few
    # tens of milliseconds; 0.1 s where the baseline was not measured.
    bound = (skew_base if skew_base == skew_base else 0.05) + 0.05
    rows.append(["launch skew at N = 32 (s)", skew_new, skew_base, f"kept: <= {bound:.2f} s (baseline + 0.05 s)",
                 metrics.verdict(skew_new, bound)])
    cpu_ratio = nan
    if "new" in big and "baseline" in big:
        r = ratio_rows({32: big}, "new", "baseline")
        cpu_ratio = r[0][3] if r else nan
    rows.append(["controller CPU per host at N = 32, this tree / baseline", cpu_ratio,
                 1.0 if cpu_ratio == cpu_ratio else nan, "<= 0.5 (half)",
                 metrics.verdict(cpu_ratio, 0.5)])
    return rows


def targets42(data: dict[str, Any]) -> list[list[Any]]:
    """Issue 42's targets, this tree beside the baseline where the baseline was measured
    (each from its own part: see the parts' dates and baselines above)."""
    nan = float("nan")
    rows: list[list[Any]] = []
    restart = data.get("restart", {}).get("variants", {})

    def kill_to_joined(label: str) -> float:
        return _med([s for s in restart.get(label, []) if "total" in s and s.get("rc") == 0], lambda s: s["total"])

    rows.append(["a restart: kill to every worker joined, s (2 hosts, default job)", kill_to_joined("new"),
                 kill_to_joined("baseline"), "<= 10 s", metrics.verdict(kill_to_joined("new"), 10.0)])
    ratios = smoke_ratios(data.get("smoke", {})) if data.get("smoke", {}).get("hand") else {}
    smoke_new, smoke_base = ratios.get("new", {}).get("ratio", nan), ratios.get("baseline", {}).get("ratio", nan)
    rows.append(["smoke / hand launch (wall, medians of the paired runs)", smoke_new, smoke_base, "<= 1.5x",
                 metrics.verdict(smoke_new, 1.5)])
    table = data.get("controller", {})
    cpu = {label: cpu_by_n(table, label) for label in ("new", "baseline")}

    def step(label: str, low: int, high: int) -> float:
        return metrics.marginal(cpu[label], low, high) if low in cpu[label] and high in cpu[label] else nan

    rows.append(["controller CPU s per extra host, 2 to 16 (trivial job)", step("new", 2, 16), step("baseline", 2, 16),
                 "<= 0.4 s", metrics.verdict(step("new", 2, 16), 0.4)])
    top = max((n for n in cpu["new"] if n > 16), default=None)
    if top is not None:
        spread = {label: step(label, 16, top) / step(label, 2, 16) for label in cpu}
        rows.append([f"CPU per extra host, 16 to {top} over 2 to 16", spread["new"], spread["baseline"], "within 1.2x",
                     metrics.verdict(spread["new"], 1.2)])
    return rows


# The key of data each part writes.
PART_KEYS = {"smoke": "smoke", "restart": "restart", "ckpt": "ckpt", "hosts": "hosts", "orch": "controller", "mitogen": "mitogen", "faults": "faults"}


def provenance(data: dict[str, Any]) -> list[str]:
    """Report lines saying when each part was measured, when they come from several runs."""
    measured = data.get("measured", {})
    present = [part for part, key in PART_KEYS.items() if key in data]
    when = {part: measured.get(part, "an earlier run of the script") for part in present}
    if len(set(when.values())) <= 1:
        return ["- medians of the runs of each part; every table was measured in the same run of the script"]
    lines = ["- the parts come from different runs of the script (`--merge`); ratios are only ever taken "
             "within one part, whose variants ran interleaved in one run:"]
    lines += [f"  - {part}: {stamp}" for part, stamp in when.items()]
    return lines


def write_report(path: Path, data: dict[str, Any], reps: int, command: str) -> None:
    now = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    # When the figures were measured: the run's end, or for an older JSON its last part's.
    written = data.get("written") or max(data.get("measured", {}).values(), default=now)
    rendered = f" (this page rendered again on {now} by `--report-only`)" if written != now else ""
    lines = ["# Benchmarks", "", f"Written by `{command}` on {written}{rendered}.", ""]
    for key, value in data["versions"].items():
        lines.append(f"- {key}: {value}")
    lines.append(f"- medians of {reps} runs each in the smoke, hosts and mitogen parts (this run); the orch part's "
                 "runs per N are listed in its section")
    lines += provenance(data)
    if "baseline" in data:
        lines.append(f"- baseline: commit {data['baseline']} (`--baseline-ref`), its own ansible.cfg and playbooks, "
                     "measured by this tree's instruments, runs interleaved with this tree's")
    # A report merged from runs against different baselines says which part had which.
    by_part = data.get("baselines", {})
    if len(set(by_part.values())) > 1:
        lines.append("- baseline of each part: " + ", ".join(f"{part}: {commit[:10]}" for part, commit in sorted(by_part.items())))
    if "restart" in data:
        lines += ["", "## Targets (issue 42)", "", *metrics.md_table(TARGET_HEADERS, targets42(data))]
    lines += ["", "## Targets (issue 26)", "", *metrics.md_table(TARGET_HEADERS, targets(data))]
    if "smoke" in data:
        lines += _smoke_lines(data["smoke"])
    if "restart" in data:
        lines += restart_lines(data["restart"])
    if "ckpt" in data:
        from bench_ckpt import ckpt_lines

        lines += ckpt_lines(data["ckpt"], metrics.md_table, median)
    if "hosts" in data:
        lines += ["", "## Namespace hosts, default TensorFlow job", "", "| N | end to end s | first start s | start skew s | last exit to verdict s | job s | overhead s | runs ok / failed |", "|---|---|---|---|---|---|---|---|"]
        for n, row in sorted(data["hosts"].items(), key=lambda kv: int(kv[0])):
            lines.append(f"| {n} | {row['e2e']:.2f} | {row['first_start']:.2f} | {row['skew']:.2f} | {row['exit_to_verdict']:.2f} | {row['job']:.2f} | {row['overhead']:.2f} | {row.get('runs', '?')} / {row.get('failed', 0)} |")
    if "orch" in data:
        lines += ["", "## Orchestration alone, trivial job (wall time, this tree)", "", "| N | end to end s | first start s | start skew s | last exit to verdict s | job s | overhead s | runs ok / failed |", "|---|---|---|---|---|---|---|---|"]
        for n, row in sorted(data["orch"].items(), key=lambda kv: int(kv[0])):
            lines.append(f"| {n} | {row['e2e']:.2f} | {row['first_start']:.2f} | {row['skew']:.2f} | {row['exit_to_verdict']:.2f} | {row['job']:.2f} | {row['overhead']:.2f} | {row.get('runs', '?')} / {row.get('failed', 0)} |")
        rows = {int(k): v for k, v in data["orch"].items()}
        base = rows.get(2)
        if base and len(rows) > 1:
            ratios = ", ".join(f"N={n}: {rows[n]['overhead'] / base['overhead']:.2f}x" for n in sorted(rows) if n != 2)
            lines.append(f"\nOverhead relative to N=2: {ratios}.")
    if data.get("controller"):
        table = data["controller"]
        lines += ["", "## Controller cost per host, trivial job", "", *plan_lines(data.get("orch_plan", {}), table), "",
                  "The controller is the `ansible-playbook` process tree in a cgroup of its own (forks, ssh "
                  "clients and their ControlPersist masters), not the namespace hosts' sshd, module "
                  "interpreters or workers. Task results count loop items, retries and async polls and "
                  "leave out skipped tasks; remote module runs leave out the controller-only actions "
                  "(set_fact, assert, debug, include_role, ...); SSH operations are the ssh/sftp/scp "
                  "invocations (with pipelining, one exec per module run, plus an action plugin's own); "
                  "new SSH connections are the logins each host's sshd accepted.", "",
                  *metrics.md_table(CONTROLLER_HEADERS, controller_rows(table))]
        headers, rows = phase_rows(table, "cpu_phases")
        lines += ["", "### Controller CPU seconds per phase", "", *metrics.md_table(headers, rows)]
        headers, rows = phase_rows(table, "wall_phases")
        lines += ["", "### Wall seconds per phase", "", *metrics.md_table(headers, rows)]
        lines += task_lines(table)
        marginal = marginal_rows(table)
        if marginal:
            lines += ["", "### Marginal controller CPU per added host", "",
                      "(median CPU at the larger N minus median CPU at the smaller) / (difference in N): the "
                      "per-host cost without the fixed cost that CPU per host still carries at small N.", "",
                      *metrics.md_table(["tree", "from N", "to N", "CPU s per added host"], marginal)]
            spreads = [[label, *marginal_spread(table, label)] for label in ("new", "baseline")
                       if any(label in by_label for by_label in table.values())]
            if any(row[3] == row[3] for row in spreads):
                lines += ["", "Does the cost per host grow with N? (target: the two within 1.2x of each other)", "",
                          *metrics.md_table(["tree", "2 to 16 s/host", "16 to 64 s/host", "larger / smaller"], spreads)]
        lines += module_phase_lines(table)
        ratios = ratio_rows(table, "new", "baseline")
        if ratios:
            lines += ["", "### This tree vs the baseline", "",
                      *metrics.md_table(["N", "new CPU s per host", "baseline CPU s per host", "CPU ratio new / baseline", "wall ratio new / baseline"], ratios)]
    if data.get("mitogen"):
        m = data["mitogen"]
        lines += ["", "## Mitogen (`mitogen_linear`) vs the default strategy", ""]
        if m.get("smoke"):
            lines += ["### Smoke", "", "CPU includes the two workers' training (local connection).", "",
                      *metrics.md_table(["strategy", "wall s", "CPU s", "first worker start s", "job s (first start to last exit)",
                                         "last exit to verdict s", "runs ok / failed"], [
                [label, _med(samples, lambda s: s["wall"]), _med(samples, lambda s: s["cpu"]),
                 _med(samples, lambda s: s.get("timings", {}).get("first_start", float("nan"))),
                 _med(samples, lambda s: s.get("timings", {}).get("job", float("nan"))),
                 _med(samples, lambda s: s.get("timings", {}).get("exit_to_verdict", float("nan"))),
                 f"{len(_ok(samples))} / {len(samples) - len(_ok(samples))}"]
                for label, samples in m["smoke"]["variants"].items()])]
            headers, rows = phase_rows({"smoke": m["smoke"]["variants"]}, "cpu_phases")
            lines += ["", "CPU seconds per phase:", "", *metrics.md_table(headers, rows)]
            headers, rows = phase_rows({"smoke": m["smoke"]["variants"]}, "wall_phases")
            lines += ["", "Wall seconds per phase:", "", *metrics.md_table(headers, rows)]
        if m.get("hosts"):
            lines += ["", "### Namespace hosts, trivial job", "", *metrics.md_table(CONTROLLER_HEADERS, controller_rows(m["hosts"]))]
            headers, rows = phase_rows(m["hosts"], "cpu_phases")
            lines += ["", "CPU seconds per phase:", "", *metrics.md_table(headers, rows)]
            headers, rows = phase_rows(m["hosts"], "wall_phases")
            lines += ["", "Wall seconds per phase:", "", *metrics.md_table(headers, rows)]
    if data.get("mitogen"):
        lines += ["", f"**{mitogen_advice(data['mitogen'])}**"]
    for note in data.get("notes", []):
        lines += ["", note]
    if "faults" in data:
        lines += ["", "## Fault to playbook exit", "", "| fault | seconds |", "|---|---|"]
        for name, value in data["faults"].items():
            lines.append(f"| {name} | {value:.1f} |")
    for extra in (ELSEWHERE, NOTES):
        if extra.exists():
            lines += ["", extra.read_text().rstrip()]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


ALL_PARTS = ("smoke", "restart", "ckpt", "hosts", "orch", "mitogen", "faults")
PRESETS = {
    # Issue 26's figures alone: the smoke against the hand launch and the controller's CPU per
    # host from 2 to 64 hosts, this tree beside the baseline (about 25 minutes on 2 cores).
    "issue26": ("smoke", "orch"),
    # Issue 42's figures: the smoke, a restart's latency and the controller's CPU per host,
    # this tree beside the tree before the issue (--baseline-ref c5c7618 in make bench-issue42).
    "issue42": ("smoke", "restart", "ckpt", "orch"),
    "all": ALL_PARTS,
}


def expand_parts(text: str) -> list[str]:
    """The parts named (presets expanded), in the order they run; ValueError for an unknown name."""
    names: list[str] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        for part in PRESETS.get(item, (item,)):
            if part not in ALL_PARTS:
                raise ValueError(f"unknown part {part!r}: choose among {', '.join((*ALL_PARTS, *PRESETS))}")
            if part not in names:
                names.append(part)
    return sorted(names, key=ALL_PARTS.index)


# One run's wall time, (intercept s, s per host), where no earlier run of the script says better.
DEFAULT_RUN_SECONDS = {"new": (3.0, 1.5), "baseline": (3.0, 1.5)}  # 4c11a93: 99.7 s at 64 hosts
DEFAULT_SMOKE_SECONDS = {"hand": 5.5, "startup": 1.0, "playbook": 12.0}


def run_model(earlier: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Per tree, one run's wall against N, fitted on the last run's controller table (medians)."""
    model = dict(DEFAULT_RUN_SECONDS)
    for label in ("new", "baseline"):
        points = {int(n): _med(v[label], lambda s: s["wall"]) for n, v in earlier.get("controller", {}).items()
                  if str(n).isdigit() and label in v and _ok(v[label])}
        fit = metrics.linear_fit(points)
        if fit and fit[1] > 0:
            model[label] = (max(fit[0], 1.0), fit[1])
    return model


def estimate(parts: list[str], args: argparse.Namespace, earlier: dict[str, Any]) -> tuple[float, list[str]]:
    """Expected wall seconds of the parts chosen, and one line per part saying how it adds up."""
    model = run_model(earlier)
    smoke = dict(DEFAULT_SMOKE_SECONDS)
    old = earlier.get("smoke", {})
    if old.get("hand"):
        smoke["hand"] = median(old["hand"])
    if old.get("playbook"):
        smoke["playbook"] = median(old["playbook"])
    trees = 2 if args.baseline_ref else 1
    lines, total = [], 0.0
    for part in parts:
        if part == "smoke":
            sec = args.reps * (smoke["hand"] + smoke["startup"] + trees * smoke["playbook"])
            text = f"{args.reps} reps x (hand launch + start-up + {trees} tree(s))"
        elif part == "orch":
            sizes = [int(n) for n in args.orch_sizes.split(",")]
            reps_at = metrics.parse_size_map(args.orch_reps_at)
            forks = {int(n) for n in filter(None, args.forks_at.split(","))}
            plan = [(tree, n, metrics.reps_at(n, args.orch_reps, reps_at)) for n in sizes
                    for tree in ("new", "baseline")[:trees]]
            plan += [("new", n, metrics.reps_at(n, args.orch_reps, reps_at)) for n in sizes if n in forks]
            sec = metrics.estimate_seconds(plan, model)
            text = ", ".join(f"N = {n} x {metrics.reps_at(n, args.orch_reps, reps_at)}" for n in sizes) + f" x {trees} tree(s)"
            text += "".join(f", and --forks {n} at N = {n}" for n in sorted(forks) if n in sizes)
        elif part == "mitogen":
            sizes = [int(n) for n in args.mitogen_sizes.split(",")]
            plan = [("new", n, args.reps) for n in sizes for _ in range(2)]
            sec = 3 * args.reps * smoke["playbook"] + metrics.estimate_seconds(plan, model)
            text = f"smoke x 3 strategies and N = {args.mitogen_sizes} x 2 strategies, {args.reps} reps"
        elif part == "restart":
            sec = args.restart_reps * (trees + 1) * 50.0
            text = (f"{args.restart_reps} reps x {trees} tree(s) and this tree without the pre-go import, about 50 s "
                    "each (2 namespace hosts, a kill, a restart)")
        elif part == "ckpt":
            sec = args.ckpt_reps * trees * (20.0 + args.ckpt_mb / 25.0)
            text = f"{args.ckpt_reps} rep(s) x {trees} tree(s) x 1 and 8 hosts, {args.ckpt_mb} MB"
        elif part == "hosts":
            sizes = [int(n) for n in args.sizes.split(",")]
            sec = metrics.estimate_seconds([("tf", n, args.reps) for n in sizes], {"tf": (20.0, 3.0)})
            text = f"N = {args.sizes} x {args.reps} reps (TensorFlow job)"
        else:
            sec, text = 420.0, "6 scenarios"
        total += sec
        lines.append(f"  {part}: ~{sec / 60:.0f} min ({text})")
    return total, lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="all",
                        help="comma-separated: smoke, restart, ckpt, hosts, orch, mitogen, faults; or a preset: "
                             "issue26 (smoke and orch: issue 26's figures, about 25 min), "
                             "issue42 (smoke, restart, ckpt and orch), all")
    parser.add_argument("--reps", type=int, default=5, help="runs of the smoke, hosts and mitogen parts")
    parser.add_argument("--restart-reps", type=int, default=3, help="runs of each tree in the restart part")
    parser.add_argument("--ckpt-mb", type=int, default=1000, help="the checkpoint's size in the ckpt part (MB)")
    parser.add_argument("--ckpt-reps", type=int, default=1, help="runs of each tree at each host count in the ckpt part")
    parser.add_argument("--sizes", default="2,4,8")
    parser.add_argument("--orch-sizes", default="2,8,16,32,64")
    parser.add_argument("--orch-reps", type=int, default=3, help="runs of each tree at each N of the orch part")
    parser.add_argument("--orch-reps-at", default="64:1",
                        help="fewer runs at the largest N, for time: SIZE:REPS pairs ('' for --orch-reps everywhere)")
    parser.add_argument("--forks-at", default="",
                        help="sizes at which the orch part also runs this tree with --forks N, after the run with "
                             "ansible.cfg's forks (128): above it, the preflight takes one more module run per host "
                             "with forks below the host count ('' for none)")
    parser.add_argument("--mitogen-sizes", default="8,32")
    parser.add_argument("--baseline-ref", default=BASELINE_REF,
                        help="commit measured beside this tree in the smoke and orch parts ('' for none)")
    parser.add_argument("--baseline-retry-vars", type=json.loads, default={"tf_preflight_reach_check": False},
                        help="at N >= --baseline-retry-from, a failed run of the baseline is made again with these "
                             "extra vars: its probe may refuse 48 hosts and more (issue 26); '{}' for no retry")
    parser.add_argument("--baseline-retry-from", type=int, default=48)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "BENCHMARKS.md")
    parser.add_argument("--vars", type=json.loads, default={},
                        help="JSON of inventory variables for every host (e.g. to turn a check off)")
    parser.add_argument("--merge", action="store_true",
                        help="keep the parts and sizes of the last run's JSON that this run does not measure")
    parser.add_argument("--report-only", action="store_true",
                        help="measure nothing: write the report again from the last run's JSON")
    parser.add_argument("--estimate-only", action="store_true",
                        help="measure nothing: print the plan and its expected time")
    args = parser.parse_args()
    if args.report_only:
        data = json.loads(args.out.with_suffix(".json").read_text())
        write_report(args.out, data, data.get("reps", args.reps), data.get("command", "python tests/bench/bench.py"))
        print(f"wrote {args.out}")
        return 0
    try:
        ordered = expand_parts(args.parts)
        reps_at = metrics.parse_size_map(args.orch_reps_at)
    except ValueError as exc:
        parser.error(str(exc))
    parts = set(ordered)
    last = args.out.with_suffix(".json")
    earlier_figures = json.loads(last.read_text()) if last.exists() else {}
    seconds, plan = estimate(ordered, args, earlier_figures)
    print(f"plan: {', '.join(ordered)}; expected about {seconds / 60:.0f} min on this machine "
          f"(from {'the last run of ' + str(last) if earlier_figures.get('controller') else 'built-in figures'}):",
          flush=True)
    print("\n".join(plan), flush=True)
    if args.estimate_only:
        return 0
    command = "python tests/bench/bench.py " + " ".join(sys.argv[1:])
    data: dict[str, Any] = {"versions": versions()}
    earlier: dict[str, Any] = {}
    if args.merge and last.exists():
        earlier = earlier_figures
        data = {**earlier, "versions": data["versions"]}
    data.update(reps=args.reps, command=command)
    for part in parts:  # measured again below
        data.get("measured", {}).pop(part, None)

    # When this run began: every part it measures carries the same stamp, so that a report
    # merged from several runs tells them apart (and the parts of one run stay together).
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())

    def save() -> None:
        for part in parts:
            if part in PART_KEYS and PART_KEYS[part] in data:
                data.setdefault("measured", {}).setdefault(part, stamp)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(data, indent=2, default=str))

    with tempfile.TemporaryDirectory(prefix="tf-bench-") as tmp_name:
        tmp = Path(tmp_name)
        inst = Instruments(tmp)
        mine = Variant("new", REPO)
        baseline: Variant | None = None
        if args.baseline_ref and parts & {"smoke", "restart", "ckpt", "orch"}:
            base, commit = checkout(args.baseline_ref, tmp)
            data["baseline"] = commit
            earlier_baseline = earlier_figures.get("baseline")
            data.setdefault("baselines", {})
            for part in ("smoke", "restart", "ckpt", "orch"):  # the parts kept from an earlier run keep their baseline
                if part not in parts and part in data.get("measured", {}) and earlier_baseline:
                    data["baselines"].setdefault(part, earlier_baseline)
            for part in parts & {"smoke", "restart", "ckpt", "orch"}:
                data["baselines"][part] = commit
            baseline = Variant("baseline", base, retry_extra=args.baseline_retry_vars, retry_from=args.baseline_retry_from)
        if "smoke" in parts:
            print("smoke vs hand launch ...", flush=True)
            data["smoke"] = part_smoke(args.reps, tmp, inst, [mine, *([baseline] if baseline else [])])
            print("  " + ", ".join(f"{label}: {r['ratio']:.2f}x the hand launch (paired {r['paired']:.2f}x)"
                                   for label, r in data["smoke"].get("ratios", {}).items()), flush=True)
            save()
        if "restart" in parts:
            print("a restart's latency ...", flush=True)
            # The pre-go import measured apart: this tree again with it off.
            cold = Variant("new-no-preimport", REPO, extra={"tf_launch_preimport": []})
            data["restart"] = part_restart(args.restart_reps, tmp, inst, [mine, cold, *([baseline] if baseline else [])])
            save()
        if "ckpt" in parts:
            print("checkpoints at size ...", flush=True)
            from bench_ckpt import part_ckpt

            data["ckpt"] = part_ckpt(args.ckpt_mb, args.ckpt_reps, tmp, inst, [mine, *([baseline] if baseline else [])])
            save()
        if "hosts" in parts:
            print("namespace hosts ...", flush=True)
            data["hosts"] = part_hosts([int(n) for n in args.sizes.split(",")], args.reps, tmp, trivial=False,
                                       extra_vars=args.vars)
            save()
        if "orch" in parts:
            print("orchestration alone, and the controller's cost per host ...", flush=True)
            variants = [mine, *([baseline] if baseline else [])]
            forks = frozenset(int(n) for n in filter(None, args.forks_at.split(",")))
            variants += [Variant(f"new --forks {n}", REPO, args=("--forks", str(n)), sizes=frozenset({n}))
                         for n in sorted(forks)]
            table = part_compare([int(n) for n in args.orch_sizes.split(",")], args.orch_reps, tmp, inst, variants,
                                 "orch", extra_vars=args.vars, reps_at=reps_at)
            # A part's sizes all come from this run: rows of an earlier run are not mixed in.
            data["controller"] = {str(n): v for n, v in table.items()}
            data["orch"] = {str(n): row for n, v in table.items() if (row := wall_rows(v["new"]))}
            data["orch_plan"] = {"reps": args.orch_reps, "reps_at": {str(k): v for k, v in reps_at.items()},
                                 "settings": {v.label: v.describe() for v in variants if v.describe()}}
            for label, low, high, per_host in marginal_rows(table):
                print(f"  {label}: {per_host:.2f} s of controller CPU per extra host from {low} to {high}", flush=True)
            save()
        if "mitogen" in parts:
            print("mitogen vs the default strategy ...", flush=True)
            env = mitogen_env()
            variants = [Variant("default", REPO), Variant("mitogen", REPO, env=env)]
            # A third smoke variant: Mitogen with the workers' CPU pinning undone, to tell
            # Mitogen's own cost from the pinning's (see tests/bench/NOTES.md).
            unpinned = Variant("mitogen-unpinned", REPO, env=env, extra={"tf_worker_python": str(unpinned_python(tmp))})
            data["mitogen"] = {"smoke": part_smoke(args.reps, tmp, inst, [*variants, unpinned], hand=False)}
            save()
            table = part_compare([int(n) for n in args.mitogen_sizes.split(",")], args.reps, tmp, inst, variants,
                                 "mitogen", extra_vars=args.vars)
            data["mitogen"]["hosts"] = {str(n): v for n, v in table.items()}
            print(f"  {mitogen_advice(data['mitogen'])}", flush=True)
            save()
        if "faults" in parts:
            print("faults ...", flush=True)
            data["faults"] = part_faults(tmp)
            save()
    data["written"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    save()
    write_report(args.out, data, args.reps, command)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
