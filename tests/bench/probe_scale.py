#!/usr/bin/env python3
"""The reachability probe alone on N namespace hosts, a baseline's module against this tree's.

    flock /tmp/tf-integration.lock .venv/bin/python tests/bench/probe_scale.py --hosts 48

Each host holds a probe listener on one worker port (as ``tf_preflight_host`` with
``listen`` starts it), then every host runs the reach (``tf_preflight_reach``) against all
N endpoints at once (as with ``--forks`` >= N), with the preflight's default per-endpoint
timeout. No Ansible: each host runs the module's own functions, loaded from the module
file, in a Python of the controller's virtualenv entered into the host's namespaces, so
what is timed is the probe, not the playbook around it. Reported per variant: the wall
time until every host's connect returned, the slowest and median host, and the endpoints
that could not be reached. Needs root (namespace hosts).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import importlib.util
import inspect
import json
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any, Iterator

REPO = Path(__file__).resolve().parents[2]
MODULE = Path("plugins/modules/tf_preflight_host.py")
# The probe's module at a baseline before issue 40 split it into one module per job.
BASELINE_MODULE = Path("plugins/modules/tf_preflight_probe.py")
REACH = Path("plugins/module_utils/tf_probe_reach.py")
PORT = 2222


def load(module_path: str) -> Any:
    sys.path.insert(0, str(REPO / "collections"))
    spec = importlib.util.spec_from_file_location("probe_under_test", module_path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if hasattr(module, "connect_all") and not module_path.endswith("tf_probe_reach.py"):
        return module  # a baseline's module, which held the probe's functions itself
    # This tree's module dispatches (issue 40): the functions are in module_utils/tf_probe_*;
    # a reach of another tree (--reach-ref) is that tree's tf_probe_reach.py beside this
    # tree's listener.
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_probe_listen, tf_probe_reach

    if module_path.endswith("tf_probe_reach.py"):
        tf_probe_reach = module

    return types.SimpleNamespace(
        probe_token=tf_probe_listen.probe_token, start_listener=tf_probe_listen.start_listener,
        stop_listeners=tf_probe_listen.stop_listeners, connect_all=tf_probe_reach.connect_all,
    )


def on_host(argv: list[str]) -> None:
    """What runs inside one host: ``listen``, ``connect`` or ``stop``."""
    action, module_path, run_id, me = argv[:4]
    probe = load(module_path)
    token = probe.probe_token(run_id, me)
    if action == "listen":
        peers, lifetime = argv[4].split(","), float(argv[5])
        print(probe.start_listener([PORT], peers, lifetime, token))
    elif action == "connect":
        endpoints, timeout = json.loads(Path(argv[4]).read_text()), float(argv[5])
        began = time.monotonic()
        # The preflight's settle (roles/tf_preflight/tasks/main.yml): a refused port is
        # tried again for that long.
        settle = timeout + len(endpoints)
        takes_settle = "settle" in inspect.signature(probe.connect_all).parameters  # not a baseline's
        failures = probe.connect_all(endpoints, me, timeout, run_id, **({"settle": settle} if takes_settle else {}))
        print(json.dumps({"seconds": time.monotonic() - began, "failures": failures}))
    else:
        print(json.dumps(probe.stop_listeners([PORT], 10, token, int(argv[4]))))


def run_variant(hosts: Any, module_path: str, run_id: str, timeout: float, workdir: Path) -> dict[str, Any]:
    names = [h.name for h in hosts]
    if not hosts.static_neighbors:
        # Each variant meets its peers first: no address learnt by the one before.
        for h in hosts:
            subprocess.run(["/usr/sbin/ip", "-n", h.namespace, "neigh", "flush", "dev", "eth0"], check=True)
    endpoints = [{"index": i, "host": h.name, "address": h.address, "port": PORT} for i, h in enumerate(hosts)]
    endpoints_file = workdir / f"{run_id}-endpoints.json"
    endpoints_file.write_text(json.dumps(endpoints))
    me = [sys.executable, str(Path(__file__).resolve())]

    def in_host(i: int, *args: str, limit: float = 120) -> str:
        done = hosts.host_exec(i, [*me, "--on-host", *args], timeout=limit)
        if done.returncode != 0:
            raise RuntimeError(f"{names[i]}: {done.stderr[-2000:]}")
        return done.stdout.strip().splitlines()[-1]

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(names)) as pool:
        pids = list(pool.map(lambda i: int(in_host(i, "listen", module_path, run_id, names[i], ",".join(names), "120")),
                             range(len(names))))
        began = time.monotonic()
        results = list(pool.map(
            lambda i: json.loads(in_host(i, "connect", module_path, run_id, names[i], str(endpoints_file), str(timeout),
                                         limit=600)),
            range(len(names)),
        ))
        wall = time.monotonic() - began
        list(pool.map(lambda i: in_host(i, "stop", module_path, run_id, names[i], str(pids[i])), range(len(names))))
    seconds = [r["seconds"] for r in results]
    failures = [(names[i], f["host"], f["reason"]) for i, r in enumerate(results) for f in r["failures"]]
    return {
        "wall": wall,
        "slowest_host": max(seconds),
        "median_host": statistics.median(seconds),
        "failures": len(failures),
        "pairs": len(names) ** 2,
        "hosts_with_failures": len({f[0] for f in failures}),
        "first_failures": failures[:3],
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--on-host":
        on_host(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=48)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=5.0, help="per endpoint (tf_preflight_probe_timeout)")
    parser.add_argument("--baseline-ref", default="4c11a93",
                        help="git ref of the baseline's module (main before issue 26); '' for none")
    parser.add_argument("--reach-ref", default="",
                        help="also a variant with the connect side (tf_probe_reach.py) of this git ref (issue 42)")
    parser.add_argument("--no-static-neighbors", action="store_true",
                        help="leave out the hosts' static neighbour entries (set from 16 hosts otherwise): the "
                             "connects then resolve their peers' addresses (ARP) on the bridge")
    parser.add_argument("--neighbour-table", type=int, default=0,
                        help="entries the kernel's neighbour table, which every namespace shares, may hold during the "
                             "run (net.ipv4.neigh.default.gc_thresh3, and gc_thresh2 half of it), restored after; "
                             "0 leaves it (1024 by default: N hosts without static entries need N * (N - 1))")
    args = parser.parse_args()
    with neighbour_table(args.neighbour_table):
        run(args)


THRESH = Path("/proc/sys/net/ipv4/neigh/default")


@contextlib.contextmanager
def neighbour_table(entries: int) -> Iterator[None]:
    """The kernel's neighbour table limits set for the block (``entries`` > 0), then restored."""
    if entries <= 0:
        yield
        return
    saved = {name: (THRESH / name).read_text() for name in ("gc_thresh2", "gc_thresh3")}
    # gc_thresh2 must stay below gc_thresh3: raise the upper one first, restore it last.
    (THRESH / "gc_thresh3").write_text(str(entries))
    (THRESH / "gc_thresh2").write_text(str(entries // 2))
    try:
        yield
    finally:
        (THRESH / "gc_thresh2").write_text(saved["gc_thresh2"])
        (THRESH / "gc_thresh3").write_text(saved["gc_thresh3"])


def run(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    sys.path.insert(0, str(REPO / "tests"))
    from nshosts import NamespaceHosts

    # Not under /tmp or /home: each host has its own (nshosts' private directories).
    (REPO / ".cache").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="probe-bench-", dir=REPO / ".cache") as scratch:
        workdir = Path(scratch)
        variants = {}
        for ref, path, name in ((args.baseline_ref, BASELINE_MODULE, "baseline_probe.py"),
                                (args.reach_ref, REACH, "tf_probe_reach.py")):
            if ref:
                (workdir / ref).mkdir()
                (workdir / ref / name).write_text(subprocess.run(
                    ["git", "show", f"{ref}:{path}"], cwd=REPO, capture_output=True, text=True, check=True
                ).stdout)
                variants[f"{'baseline' if name == 'baseline_probe.py' else 'reach'} ({ref})"] = str(workdir / ref / name)
        variants["this tree"] = str(REPO / MODULE)
        static = args.hosts >= 16 and not args.no_static_neighbors
        with NamespaceHosts(args.hosts, workdir / "ns", static_neighbors=static) as hosts:
            print(f"{args.hosts} namespace hosts up in {hosts.setup_seconds:.1f} s, static neighbour entries: {static}, "
                  f"neighbour table: {(THRESH / 'gc_thresh3').read_text().strip()} entries",
                  flush=True)
            for rep in range(args.reps):
                for number, (label, path) in enumerate(variants.items()):
                    result = run_variant(hosts, path, f"probe-{rep}-{number}", args.timeout, workdir)
                    print(json.dumps({"variant": label, "rep": rep, "hosts": args.hosts,
                                      "timeout": args.timeout, **result}), flush=True)


if __name__ == "__main__":
    main()
