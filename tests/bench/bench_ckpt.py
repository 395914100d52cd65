"""The bench's part ``ckpt`` (issue 42, checkpoints at size): the chief's checkpoint of
``--ckpt-mb`` MB copied to 1 and to 8 namespace hosts by the runbook's copy between
attempts (roles/tf_attempts/tasks/checkpoints.yml, run alone by a small playbook written
here), for each tree (this one, the baseline), with the copy's time and the bytes that
cross the controller.

How the bytes are measured: the namespace hosts hang on one Linux bridge in the root
namespace, where the controller (Ansible, its ssh clients) runs. The bridge device's own
counters (/sys/class/net/<bridge>/statistics/{rx,tx}_bytes) count only the frames that
go up to the root namespace's stack or come down from it, i.e. the controller's traffic;
frames the bridge forwards from one host's port to another's (the relay between hosts)
are not counted there. Each run's bytes are the counters' difference around the
playbook: the checkpoint's bytes through the controller plus every module run's SSH
traffic (payloads, results), which grows a little with the hosts whatever the copy does.
Each run's time is the copy's own, as its record says (``seconds``, from the copy's
first task to its sum), and the playbook's wall.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

PLAYBOOK = """\
# Written by tests/bench/bench_ckpt.py: the copy of the chief's checkpoint between
# attempts, alone (the facts the restart would have set are extra vars).
- name: Copy the chief's checkpoint (bench)
  hosts: tf_workers
  gather_facts: false
  tasks:
    - name: Copy
      ansible.builtin.include_role:
        name: tf_attempts
        tasks_from: checkpoints.yml
"""

CKPT_DIR = "/tmp/ckpt-bench"  # each namespace host's own /tmp
TARGETS = (1, 8)


def counters(bridge: str) -> int:
    base = Path(f"/sys/class/net/{bridge}/statistics")
    return sum(int((base / name).read_text()) for name in ("rx_bytes", "tx_bytes"))


def make_checkpoint(hosts: Any, megabytes: int) -> None:
    """A TensorFlow-shaped checkpoint on node0: its data file of ``megabytes`` MB (random:
    nothing compresses it on the way), its index and the pointer file."""
    chief = f"{CKPT_DIR}/chief"
    rc, _out, err = hosts.run(0, f"rm -rf {CKPT_DIR} && mkdir -p {chief} && chmod 700 {CKPT_DIR} {chief} && "
                                 f"head -c {megabytes * 1000000} /dev/urandom > {chief}/ckpt-1.data-00000-of-00001 && "
                                 f"head -c 4000 /dev/urandom > {chief}/ckpt-1.index && "
                                 f"printf 'model_checkpoint_path: \"ckpt-1\"\\n' > {chief}/checkpoint",
                              timeout=600)  # fmt: skip
    if rc:
        raise RuntimeError(f"cannot make the checkpoint on node0: {err}")


def clear_targets(hosts: Any, count: int) -> None:
    """Every target's copy of the last run removed: each run copies the whole checkpoint."""
    for index in range(1, count + 1):
        hosts.run(index, f"rm -rf {CKPT_DIR}/chief; mkdir -p {CKPT_DIR} && chmod 700 {CKPT_DIR}", timeout=120)


def copy_record(runs_dir: Path, run_id: str, attempt: int = 1) -> dict[str, Any]:
    found = runs_dir / run_id / f"checkpoint-sync-{attempt}.json"
    return json.loads(found.read_text()) if found.exists() else {}


def part_ckpt(megabytes: int, reps: int, tmp: Path, inst: Any, variants: list[Any]) -> dict[str, Any]:
    """Each variant copies the checkpoint to 1 and to 8 hosts, ``reps`` times, interleaved;
    one sample per run: the copy's seconds, the playbook's wall and the controller's bytes."""
    from nshosts import NamespaceHosts

    workdir = tmp / "ckpt"
    workdir.mkdir(parents=True, exist_ok=True)
    playbook = workdir / "copy.yml"
    playbook.write_text(PLAYBOOK)
    out: dict[str, Any] = {"megabytes": megabytes, "variants": {v.label: {str(n): [] for n in TARGETS} for v in variants}}
    port = 2700
    with NamespaceHosts(max(TARGETS) + 1, workdir / "ns") as hosts:
        inventory = hosts.write_inventory(workdir / "inventory.yml", port=port)
        started = time.monotonic()
        make_checkpoint(hosts, megabytes)
        print(f"  ckpt: a checkpoint of {megabytes} MB made on node0 in {time.monotonic() - started:.1f} s", flush=True)
        workers = [{"host": h.name, "slot": 0, "address": h.address, "port": port, "endpoint": f"{h.address}:{port}",
                    "index": i, "type": "chief" if i == 0 else "worker"} for i, h in enumerate(hosts.hosts)]
        for rep in range(reps):
            for count in TARGETS:
                for v in variants:
                    clear_targets(hosts, count)
                    run_id = f"ckpt-{v.label}-{count}-{rep}"
                    (workdir / "runs" / run_id).mkdir(parents=True, exist_ok=True)
                    names = [h.name for h in hosts.hosts[: count + 1]]
                    spec = {"chief": names[0], "workers": workers[: count + 1], "size": count + 1}
                    extra = {"tf_run_id": run_id, "tf_runs_dir": str(workdir / "runs"), "tf_run_attempt": 1,
                             "tf_worker_checkpoint_dir": f"{CKPT_DIR}/chief", "tf_cluster_spec": spec}
                    before = counters(hosts.bridge)
                    result = inst.run(v.tree, str(playbook), ["-i", str(inventory), "--limit", ",".join(names)], extra,
                                      hosts=hosts.hosts[: count + 1], timeout=1800)
                    moved = counters(hosts.bridge) - before
                    record = copy_record(workdir / "runs", run_id)
                    sample = {"rc": result["rc"], "wall": result["wall"], "cpu": result["cpu"], "bytes": moved,
                              "seconds": record.get("seconds"), "message": record.get("message", "")}
                    if result["rc"]:
                        sample["error"] = result.get("error", "")[-1500:]
                    if v.label == "new" and not result["rc"]:
                        # The same copy again, every host holding the files now: what the skip
                        # costs, and the controller's bytes without any of the checkpoint's.
                        before = counters(hosts.bridge)
                        again = inst.run(v.tree, str(playbook), ["-i", str(inventory), "--limit", ",".join(names)],
                                         {**extra, "tf_run_attempt": 2}, hosts=hosts.hosts[: count + 1], timeout=1800)
                        record = copy_record(workdir / "runs", run_id, 2)
                        sample["again"] = {"rc": again["rc"], "wall": again["wall"], "seconds": record.get("seconds"),
                                           "bytes": counters(hosts.bridge) - before,
                                           "message": record.get("message", "")}
                    out["variants"][v.label][str(count)].append(sample)
                    print(f"  ckpt {v.label} to {count} host(s) rep {rep}: copy {sample['seconds']} s, wall "
                          f"{result['wall']:.1f} s, controller {moved / 1e6:.1f} MB, rc={result['rc']}"
                          + (f"\n{sample.get('error', '')}" if result["rc"] else f" ({sample['message'][:160]})"),
                          flush=True)
                    if "again" in sample:
                        print(f"    again (every host holds it): copy {sample['again']['seconds']} s, controller "
                              f"{sample['again']['bytes'] / 1e6:.1f} MB ({sample['again']['message'][:200]})", flush=True)
        hosts.run(0, f"rm -rf {CKPT_DIR}", timeout=120)
        clear_targets(hosts, max(TARGETS))
    return out


def ckpt_lines(ckpt: dict[str, Any], md_table: Any, median: Any) -> list[str]:
    """The report's section: per tree, the copy's seconds and the controller's MB at 1 and
    8 hosts, and the ratios the issue asks for."""
    headers = ["tree", "copy to 1 host s", "copy to 8 hosts s", "8 / 1", "controller MB, 1 host",
               "controller MB, 8 hosts", "again, every host holding it: s at 1 / 8, controller MB at 1 / 8",
               "runs ok / failed"]
    rows = []
    for label, by_count in ckpt.get("variants", {}).items():
        good = {n: [s for s in by_count.get(str(n), []) if s.get("rc") == 0 and s.get("seconds") is not None]
                for n in TARGETS}
        secs = {n: median([s["seconds"] for s in good[n]]) if good[n] else float("nan") for n in TARGETS}
        mbytes = {n: median([s["bytes"] / 1e6 for s in good[n]]) if good[n] else float("nan") for n in TARGETS}
        total = sum(len(by_count.get(str(n), [])) for n in TARGETS)
        ok = sum(len(good[n]) for n in TARGETS)
        again = {n: [s["again"] for s in good[n] if s.get("again", {}).get("rc") == 0] for n in TARGETS}
        said = "-"
        if all(again.values()):
            said = " / ".join(f"{median([a['seconds'] for a in again[n]]):.2f}" for n in TARGETS) + ", " + " / ".join(
                f"{median([a['bytes'] / 1e6 for a in again[n]]):.2f}" for n in TARGETS)
        rows.append([label, secs[1], secs[8], secs[8] / secs[1] if secs[1] else float("nan"), mbytes[1], mbytes[8],
                     said, f"{ok} / {total - ok}"])
    return ["", "## Checkpoints at size (issue 42)", "",
            f"A checkpoint of {ckpt.get('megabytes')} MB (random bytes, TensorFlow's layout) on node0 copied by the "
            "copy between attempts (tasks/checkpoints.yml alone) to 1 and to 8 namespace hosts that hold none of it. "
            "Copy s: the copy's record; controller MB: the bridge's own counters around the playbook (the "
            "controller's traffic only; frames between hosts are not counted there), module runs' SSH traffic "
            "included; again: the same copy run once more (this tree), every host holding the files, so nothing "
            "of the checkpoint moves: its bytes are the module runs' alone. Medians.", "", *md_table(headers, rows)]
