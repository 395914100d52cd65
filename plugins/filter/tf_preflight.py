"""Turn what the preflight probes saw on each host into the problems that refuse a run.

Each function returns a list of messages, one per problem, each naming the host and the
value; an empty list means the run may go on.
"""

from __future__ import annotations

import os
from typing import Any

from ansible.errors import AnsibleFilterError


def _worker_at(spec: dict[str, Any], host: str, port: int) -> str:
    for worker in spec.get("workers", []):
        if worker["host"] == host and int(worker["port"]) == int(port):
            return f"worker {worker['index']}'s "
    return ""


def tf_preflight_host_problems(
    probes: dict[str, dict[str, Any]], spec: dict[str, Any], min_free_mb: int, run_id: str = ""
) -> list[str]:
    """Taken ports, too little disk, a run id already launched, and GPU counts that differ."""
    if not isinstance(probes, dict):
        raise AnsibleFilterError(f"expected probe results by host, got {type(probes).__name__}")
    problems = []
    for host, probe in probes.items():
        for busy in probe.get("busy_ports", []):
            if busy.get("pid"):
                owner = f"by pid {busy['pid']} ({busy.get('process') or 'unknown'})"
            else:
                owner = "by a process this user cannot see"
            problems.append(
                f"host {host}: {_worker_at(spec, host, busy['port'])}port {busy['port']} is already in use "
                f"{owner}: {busy.get('error', '')}".rstrip(": ")
            )
        free = int(probe.get("free_mb", 0))
        if free < int(min_free_mb):
            problems.append(
                f"host {host}: only {free} MB free under {probe.get('base_dir', 'tf_worker_base_dir')}, "
                f"below tf_preflight_min_free_mb={min_free_mb}"
            )
        if probe.get("run_launched"):
            problems.append(
                f"host {host}: run id {run_id!r} was already launched there ({probe['run_launched']}); "
                "its files are kept: give a new -e tf_run_id or leave it empty"
            )
    gpus = {host: int(probe.get("gpus", 0)) for host, probe in probes.items()}
    if any(gpus.values()) and len(set(gpus.values())) > 1:
        listing = ", ".join(f"{host}={count}" for host, count in gpus.items())
        problems.append(f"hosts show different numbers of GPUs: {listing}")
    return problems


def tf_preflight_address_problems(probes: dict[str, dict[str, Any]], spec: dict[str, Any]) -> list[str]:
    """Worker addresses as each host resolves them: a name that does not resolve on a
    host, and two workers whose addresses stand for one IP address and share a port
    (a name and its IP, two names of one machine), which the controller may not see."""
    problems: list[str] = []
    clashes: set[tuple[int, int]] = set()
    workers = spec.get("workers", [])
    for host, probe in probes.items():
        resolved = probe.get("resolved") or {}
        if not resolved:
            continue
        for address in sorted({w["address"] for w in workers}):
            if address in resolved and not resolved[address]:
                owners = sorted({w["host"] for w in workers if w["address"] == address})
                problems.append(
                    f"host {host}: worker address {address!r} of host {', '.join(owners)} does not resolve there"
                )
        owner: dict[tuple[str, int], dict[str, Any]] = {}
        for worker in workers:
            for ip in resolved.get(worker["address"]) or []:
                key = (ip, int(worker["port"]))
                first = owner.setdefault(key, worker)
                pair = (int(first["index"]), int(worker["index"]))
                if first is not worker and pair not in clashes:
                    clashes.add(pair)
                    problems.append(
                        f"host {host} resolves worker {first['index']}'s address {first['address']!r} (host "
                        f"{first['host']}) and worker {worker['index']}'s {worker['address']!r} (host "
                        f"{worker['host']}) to the same {ip} port {worker['port']}; two workers cannot share "
                        "an address and port"
                    )
    return problems


def tf_preflight_controller_run(run_id: str, runs_dir: str) -> list[str]:
    """A run id is used once per controller: ``<runs_dir>/<run_id>`` must not exist yet.

    The hosts only show the runs launched on them; this catches the reuse of an id with
    other hosts (``--limit``), whose results would mix with the earlier run's under one
    directory, and whose earlier failure flags would stop the new run."""
    path = os.path.join(os.path.expanduser(str(runs_dir)), str(run_id))
    if os.path.lexists(path):
        return [
            f"run id {run_id!r} was already used on this controller ({path} exists); its files are kept: "
            "give a new -e tf_run_id or leave it empty"
        ]
    return []


def tf_preflight_checkpoint_problems(dirs: dict[str, Any]) -> list[str]:
    """``tf_checkpoint_dir`` of each host: empty (under the run), absolute, or ``~/...``; a
    relative path would land in each worker's own directory and never be resumed from."""
    problems = []
    for host, path in dirs.items():
        text = "" if path is None else str(path)
        if text and not (text.startswith("/") or text == "~" or text.startswith("~/")):
            problems.append(
                f"host {host}: tf_checkpoint_dir {text!r} must be an absolute path or start with ~/ "
                "(empty: under the run's directory)"
            )
    return problems


def tf_preflight_unreachable(results: dict[str, list[dict[str, Any]]]) -> list[str]:
    """One message per worker endpoint some host could not reach."""
    problems = []
    for host, failures in results.items():
        for failure in failures or []:
            problems.append(
                f"host {host} cannot reach worker {failure['index']} on host {failure['host']} "
                f"at {failure['address']}:{failure['port']}: {failure['reason']}"
            )
    return problems


def tf_preflight_probe_versions(probes: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The interpreter versions each host probe read, by host."""
    return {host: probe.get("versions") or {"error": "no versions were read"} for host, probe in probes.items()}


def _python_key(version: str, match: str) -> str:
    parts = str(version).split(".")
    return ".".join(parts[:2]) if match == "minor" else str(version)


def tf_preflight_versions(versions: dict[str, dict[str, Any]], python_match: str = "minor") -> list[str]:
    """Python (by ``python_match``: minor or exact), TensorFlow and numpy must agree; a
    package installed on some hosts and missing on others counts as a difference."""
    if python_match not in ("minor", "exact"):
        raise AnsibleFilterError(f"tf_preflight_python_match must be minor or exact, got {python_match!r}")
    problems = []
    for host, found in versions.items():
        if (found or {}).get("error"):
            problems.append(f"host {host}: worker interpreter {found['error']}")
    versions = {host: found for host, found in versions.items() if not (found or {}).get("error")}
    for name in ("python", "tensorflow", "numpy"):
        seen = {host: (found or {}).get(name) or "missing" for host, found in versions.items()}
        keys = {
            host: _python_key(value, python_match) if name == "python" and value != "missing" else value
            for host, value in seen.items()
        }
        # A package no host has is not drift: the runbook runs any script, TensorFlow or not.
        if len(set(keys.values())) > 1:
            listing = ", ".join(f"{host}={value}" for host, value in seen.items())
            problems.append(f"{name} versions differ across hosts: {listing}")
    return problems


def tf_preflight_script_problems(path: str) -> list[str]:
    """The training script must be a readable file on the controller and, when it is
    Python, compile."""
    try:
        with open(path, "rb") as handle:
            source = handle.read()
    except IsADirectoryError:
        return [f"tf_train_script {path}: is a directory, not a script"]
    except OSError as exc:
        return [f"tf_train_script {path}: cannot be read on the controller: {exc.strerror}"]
    if str(path).endswith(".py"):
        try:
            compile(source, str(path), "exec")
        except SyntaxError as exc:
            return [f"tf_train_script {path}: line {exc.lineno}: {exc.msg}"]
        except ValueError as exc:
            return [f"tf_train_script {path}: {exc}"]
    return []


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {
            "tf_preflight_host_problems": tf_preflight_host_problems,
            "tf_preflight_unreachable": tf_preflight_unreachable,
            "tf_preflight_controller_run": tf_preflight_controller_run,
            "tf_preflight_address_problems": tf_preflight_address_problems,
            "tf_preflight_checkpoint_problems": tf_preflight_checkpoint_problems,
            "tf_preflight_versions": tf_preflight_versions,
            "tf_preflight_probe_versions": tf_preflight_probe_versions,
            "tf_preflight_script_problems": tf_preflight_script_problems,
        }
