"""Turn what the preflight probes saw on each host into the problems that refuse a run.

Each function returns a list of messages, one per problem, each naming the host and the
value; an empty list means the run may go on.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_base_dir import base_dir_problems
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import CONFIG_FILE, EXIT_FILE, LOG_FILE
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_verdict_run import marker_inside
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_messages import type_name
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_spec_packed import plain


def _worker_at(spec: dict[str, Any], host: str, port: int) -> str:
    for worker in spec.get("workers", []):
        if worker["host"] == host and int(worker["port"]) == int(port):
            return f"worker {worker['index']}'s "
    return ""


def _interpreter_problems(host: str, state: dict[str, Any] | None) -> list[str]:
    """tf_worker_python must be there: else every supervisor fails at the launch."""
    if not state:
        return []
    path = state.get("path", "")
    if "found" in state:
        if state["found"]:
            return _interpreter_fault(host, path, state)
        return [f"host {host}: tf_worker_python {path!r} is not found on the remote user's PATH there; "
                "give the interpreter's full path"]
    if not state.get("exists"):
        return [f"host {host}: tf_worker_python {path} does not exist there"]
    if not state.get("is_file") or not state.get("executable"):
        return [f"host {host}: tf_worker_python {path} is not an executable file there"]
    return _interpreter_fault(host, path, state)


def _interpreter_fault(host: str, path: str, state: dict[str, Any]) -> list[str]:
    """Where the probe ran the interpreter (its versions not read), what kept it from
    answering as Python 3."""
    if not state.get("fault"):
        return []
    named = f"{path!r} ({state['found']})" if state.get("found") else path
    return [f"host {host}: tf_worker_python {named} does not run as Python 3: {state['fault']}"]


def _checkpoint_dir_problems(host: str, state: dict[str, Any] | None) -> list[str]:
    """The run's checkpoints go under tf_checkpoint_dir: it must be a directory the remote
    user can write, or one it can create, outside the runs directory (the runs' own)."""
    if not state:
        return []
    path = state.get("path", "tf_checkpoint_dir")
    if state.get("runs_dir"):
        return [f"host {host}: tf_checkpoint_dir {path} is inside {state['runs_dir']}, where every run keeps its own "
                "directory: its backups would mix with a run's files, or take over another run's; choose a directory "
                "outside it (empty: each run keeps them in its own directory)"]
    if state.get("exists"):
        if not state.get("is_dir"):
            return [f"host {host}: tf_checkpoint_dir {path} exists and is not a directory"]
        if not state.get("writable"):
            return [f"host {host}: tf_checkpoint_dir {path} is not writable by the remote user there"]
        return []
    if state.get("parent_writable", True):
        return []
    return [f"host {host}: tf_checkpoint_dir {path} does not exist and the remote user cannot create it "
            f"(nearest existing parent: {state.get('parent')})"]


def _shared_base_dir_problems(probes: dict[str, dict[str, Any]]) -> list[str]:
    """Inventory hosts that are one machine with one tf_worker_base_dir (two names or
    addresses of one server): their workers would keep the run in the same directories,
    and each host's collect would bring the other's, which the verdict refuses after the
    training."""
    sharing: dict[str, list[str]] = {}
    for host, probe in probes.items():
        identity = probe.get("base_dir_identity")
        if identity:
            sharing.setdefault(str(identity), []).append(host)
    problems = []
    for hosts in sharing.values():
        if len(hosts) > 1:
            base = probes[hosts[0]].get("base_dir", "tf_worker_base_dir")
            problems.append(
                f"hosts {', '.join(hosts)} are one machine with one tf_worker_base_dir ({base}): their runs would "
                "share its directories; list the machine once, with tf_worker_slots for more workers, or give "
                "each host a tf_worker_base_dir of its own"
            )
    return problems


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
        problems.extend(base_dir_problems(host, probe.get("base_dir_state")))
        problems.extend(_interpreter_problems(host, probe.get("interpreter_state")))
        problems.extend(_checkpoint_dir_problems(host, probe.get("checkpoint_state")))
        if probe.get("run_launched"):
            problems.append(
                f"host {host}: run id {run_id!r} was already launched there ({probe['run_launched']}); "
                "its files are kept: give a new -e tf_run_id or leave it empty"
            )
    problems.extend(_shared_base_dir_problems(probes))
    gpus = {host: int(probe.get("gpus", 0)) for host, probe in probes.items()}
    if any(gpus.values()) and len(set(gpus.values())) > 1:
        listing = ", ".join(f"{host}={count}" for host, count in gpus.items())
        problems.append(f"hosts show different numbers of GPUs: {listing}")
    return problems


def tf_preflight_address_problems(probes: dict[str, dict[str, Any]], spec: dict[str, Any]) -> list[str]:
    """Worker addresses as each host resolves them: a name that does not resolve on a
    host, and two workers whose addresses stand for one IP address and share a port
    (a name and its IP, two names of one machine), which the controller may not see.
    A host reports its names only (``resolved``): an IP address stands for itself."""
    problems: list[str] = []
    clashes: set[tuple[int, int]] = set()
    workers = plain(spec).get("workers", [])
    literals = {w["address"]: ip_literal(w["address"]) for w in workers}
    for host, probe in probes.items():
        names = probe.get("resolved") if isinstance(probe, dict) else None
        if not isinstance(names, dict):
            continue
        resolved = {**names, **{address: [ip] for address, ip in literals.items() if ip}}
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


def ip_literal(address: str) -> str:
    """``address`` as its IP address where it is one (compressed), else empty."""
    try:
        return ipaddress.ip_address(address).compressed
    except ValueError:
        return ""


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
    """One message per worker endpoint some host could not reach. A host that cannot reach
    its own worker (a cluster on one host probes itself) is told what that usually means."""
    problems = []
    for host, failures in results.items():
        for failure in failures or []:
            own = (
                f"; the address does not lead back to host {host} itself: its tf_worker_address (default: "
                "ansible_host) must be an address this machine answers on"
                if failure["host"] == host else ""
            )
            what = "spare host" if failure["index"] == "spare" else f"worker {failure['index']} on host"
            problems.append(
                f"host {host} cannot reach {what} {failure['host']} "
                f"at {failure['address']}:{failure['port']}: {failure['reason']}{own}"
            )
    return problems


def tf_preflight_refused_hosts(hosts: Mapping[str, Mapping[str, Any]], registered: list[str]) -> list[str]:
    """The hosts a refused probe names, in play order: each that failed a task of its own
    (``ansible_failed_result``), and each whose result registered under one of the names in
    ``registered`` says SSH could not reach it. Ansible takes an unreachable host out of the
    play with no failed result (it runs no rescue), so only its registered result tells."""
    named = []
    for host, variables in hosts.items():
        if "ansible_failed_result" in variables:
            named.append(host)
        elif any((variables.get(name) or {}).get("unreachable") for name in registered):
            named.append(f"{host} did not answer over SSH")
    return named


def tf_preflight_probe_versions(probes: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The interpreter versions each host probe read, by host. A host whose interpreter the
    lookup refused already (missing, not executable) is left out: its versions could not be
    read, and the lookup's problem names the cause."""
    return {host: probe.get("versions") or {"error": "no versions were read"} for host, probe in probes.items()
            if not _interpreter_problems(host, probe.get("interpreter_state"))}


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


def tf_controller_path(path: Any) -> Any:
    """A path on the controller as the person who typed it means it: ``~`` expanded, and a
    relative path taken from the directory ansible-playbook was started in. Ansible would
    resolve it elsewhere: the file lookup in the roles' and the play's directories, a
    module run on the controller in the playbook's directory. Anything but a non-empty
    string is returned as it is (the contract's type checks name it)."""
    if not isinstance(path, str) or path == "":
        return path
    return os.path.abspath(os.path.expanduser(path))


def _as_given(path: Any) -> str:
    """``mytrain.py (/home/u/proj/mytrain.py)`` where the path was resolved, else the path."""
    resolved = tf_controller_path(path)
    return f"{path} ({resolved})" if isinstance(resolved, str) and resolved != path else str(path)


def tf_preflight_script_problems(path: str) -> list[str]:
    """The training script must be a readable file on the controller and, when it is
    Python, compile."""
    name = _as_given(path)
    try:
        with open(tf_controller_path(path), "rb") as handle:
            source = handle.read()
    except IsADirectoryError:
        return [f"tf_train_script {name}: is a directory, not a script"]
    except OSError as exc:
        return [f"tf_train_script {name}: cannot be read on the controller: {exc.strerror}"]
    if str(path).endswith(".py"):
        try:
            compile(source, str(path), "exec")
        except SyntaxError as exc:
            return [f"tf_train_script {name}: line {exc.lineno}: {exc.msg}"]
        except ValueError as exc:
            return [f"tf_train_script {name}: {exc}"]
    return []


# The inputs tf_preflight_input_problems checks (beyond their types and ranges).
INPUT_NAMES = (
    "tf_startup_pattern",
    "tf_worker_base_dir",
    "tf_worker_venv_dir",
    "tf_firewall_allow",
    "tf_verdict_report",
    "tf_verdict_report_template",
    "tf_verdict_expected_size",
    "tf_verdict_marker",
    "tf_runs_dir",
    "tf_controller_timeout",
    "tf_wait_poll_interval",
    "tf_collect_files",
    "tf_collect_artifacts",
    "tf_restart_on",
    "tf_min_workers",
)

# The records the verdict reads from every worker directory: a tf_collect_files that
# leaves one out fails the run's verdict after the training.
VERDICT_RECORDS = (LOG_FILE, EXIT_FILE, CONFIG_FILE)

# One label of a host name (RFC 1123): letters, digits and '-', not at either end.
_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def _bad_characters(value: str) -> str:
    if "\x00" in value:
        return "a NUL character"
    if "\n" in value or "\r" in value:
        return "a line break"
    return ""


def _remote_path_problem(name: str, value: Any, empty: str = "") -> str:
    """A path on a worker host: absolute, or under the remote user's home (``~/...``)."""
    if not isinstance(value, str):
        return f"{name} must be a path (a string), got {type_name(value)}: {value!r}"
    if value == "" and empty:
        return ""
    bad = _bad_characters(value)
    if bad:
        return f"{name} {value!r} holds {bad}"
    if not (value.startswith("/") or value == "~" or value.startswith("~/")):
        hint = f" (empty: {empty})" if empty else ""
        return f"{name} {value!r} must be an absolute path or start with ~/{hint}"
    return ""


def _pattern_problem(value: Any) -> str:
    if not isinstance(value, str):
        return f"tf_startup_pattern must be a regular expression (a string), got {type_name(value)}: {value!r}"
    if value == "":
        return ("tf_startup_pattern must not be empty: it would match any line, so a worker that prints anything "
                "would count as joined and the startup deadline never catch one that does not join "
                "(tf_startup_timeout: 0 turns the deadline off)")
    try:
        re.compile(value)
    except re.error as exc:
        return f"tf_startup_pattern {value!r} is not a valid regular expression: {exc}"
    return ""


def _source_problem(entry: Any) -> str:
    """One tf_firewall_allow entry: what the firewall accepts, an IP address or a host name."""
    if not isinstance(entry, str) or not entry.strip():
        return f"tf_firewall_allow entry {entry!r} is not an IP address or host name"
    text = entry.strip()
    try:
        ipaddress.ip_address(text.strip("[]"))
        return ""
    except ValueError:
        pass
    if "/" in text:
        try:
            ipaddress.ip_network(text, strict=False)
        except ValueError:
            pass
        else:
            return (
                f"tf_firewall_allow entry {entry!r} is a network: the firewall accepts IP addresses and host "
                "names, one per entry"
            )
    name = text[:-1] if text.endswith(".") else text
    if len(name) <= 253 and all(_LABEL.match(label) for label in name.split(".")) and not name.replace(".", "").isdigit():
        return ""
    return f"tf_firewall_allow entry {entry!r} is not an IP address or host name"


def _template_problem(value: Any, report: Any) -> str:
    """The report's template, a file on the controller (read at collect, hours later)."""
    if report is not None and str(report).lower() in ("false", "no", "off", "0"):
        return ""
    if not isinstance(value, str):
        return f"tf_verdict_report_template must be a path (a string), got {type_name(value)}: {value!r}"
    if value == "":
        return ""
    path = os.path.expanduser(value)
    if _bad_characters(value):
        return f"tf_verdict_report_template {value!r} holds {_bad_characters(value)}"
    if not os.path.exists(path):
        return f"tf_verdict_report_template {value} does not exist on the controller"
    if not os.path.isfile(path):
        return f"tf_verdict_report_template {value} is not a file"
    if not os.access(path, os.R_OK):
        return f"tf_verdict_report_template {value} cannot be read on the controller"
    return ""


def _marker_problem(value: Any) -> str:
    """The chief's completion marker, judged by the verdict inside each worker directory
    (the verdict's own rule, marker_inside): a path outside it could never be found."""
    rule = "must be a relative path inside the worker directory (multiworker-complete.txt, model/model.keras)"
    if not isinstance(value, str):
        return f"tf_verdict_marker {rule}, got {type_name(value)}: {value!r}"
    return "" if marker_inside(value) else f"tf_verdict_marker {json.dumps(value)} {rule}"


def _runs_dir_problem(value: Any) -> str:
    """The controller's runs directory, after templating."""
    if not isinstance(value, str) or value == "":
        return f"tf_runs_dir must be a directory path on the controller, got {value!r}"
    bad = _bad_characters(value)
    if bad:
        return f"tf_runs_dir {value!r} holds {bad}"
    path = os.path.expanduser(value)
    if not os.path.isabs(path):
        return f"tf_runs_dir {value!r} must be an absolute path or start with ~/ (it is a directory on the controller)"
    if os.path.lexists(path) and not os.path.isdir(path):
        return f"tf_runs_dir {value} exists and is not a directory"
    return ""


def _whole(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None  # refused by the range check


def _cross_problems(values: dict[str, Any], cluster_size: int) -> list[str]:
    problems = []
    size = _whole(values.get("tf_verdict_expected_size"))
    if size and cluster_size and size != cluster_size:
        problems.append(
            f"tf_verdict_expected_size {size} is not the cluster's {cluster_size} worker(s) "
            "(0: the size of the collected cluster); the verdict would fail the run"
        )
    fewest = _whole(values.get("tf_min_workers"))
    if fewest and cluster_size and fewest > cluster_size:
        problems.append(
            f"tf_min_workers {fewest} is more than the cluster's {cluster_size} worker(s): the cluster could only "
            "ever shrink below it (0: it never shrinks)"
        )
    timeout = _whole(values.get("tf_controller_timeout"))
    poll = _whole(values.get("tf_wait_poll_interval"))
    if timeout and poll and timeout > 0 and poll > 0 and timeout < 2 * poll:
        problems.append(
            f"tf_controller_timeout {timeout} must be at least twice tf_wait_poll_interval ({poll}), how often "
            "the wait renews the controller's heartbeat, or 0 (the run is not tied to the controller)"
        )
    return problems


def _collect_problems(values: dict[str, Any]) -> list[str]:
    """tf_collect_files matches file names in each worker directory and must keep the
    verdict's records; tf_collect_artifacts matches paths inside it. An entry that can
    never match (a path, a way out) would only show as a file missing after the run."""
    problems = []
    files = values.get("tf_collect_files")
    if isinstance(files, list):
        for entry in files:
            if isinstance(entry, str) and "/" in entry:
                problems.append(f"tf_collect_files entry {entry!r} is not a file name: its entries match the names of "
                                "the files in each worker directory (paths below it go in tf_collect_artifacts)")
        patterns = [entry for entry in files if isinstance(entry, str)]
        missing = [name for name in VERDICT_RECORDS if not any(fnmatch.fnmatch(name, p) for p in patterns)]
        if missing:
            problems.append(f"tf_collect_files leaves out {', '.join(missing)}, which the verdict reads from every "
                            "worker: keep the default list and add your own files to tf_collect_artifacts")
    artifacts = values.get("tf_collect_artifacts")
    for entry in artifacts if isinstance(artifacts, list) else []:
        if isinstance(entry, str) and (entry.startswith(("/", "~")) or ".." in entry.split("/")):
            problems.append(f"tf_collect_artifacts entry {entry!r} must be a path relative to each worker directory, "
                            "without '..': nothing outside it is collected")
    return problems


def input_problems(values: dict[str, Any], cluster_size: int = 0) -> list[str]:
    """Why the inputs in ``values`` (any of INPUT_NAMES; a name absent is not checked)
    would fail later, each message without its host."""
    problems = []
    checks = {
        "tf_startup_pattern": _pattern_problem,
        "tf_worker_base_dir": lambda v: _remote_path_problem("tf_worker_base_dir", v),
        "tf_worker_venv_dir": lambda v: _remote_path_problem("tf_worker_venv_dir", v, "venv under tf_worker_base_dir"),
        "tf_verdict_report_template": lambda v: _template_problem(v, values.get("tf_verdict_report")),
        "tf_verdict_marker": _marker_problem,
        "tf_runs_dir": _runs_dir_problem,
    }
    for name, check in checks.items():
        if name in values:
            problem = check(values[name])
            if problem:
                problems.append(problem)
    if "tf_firewall_allow" in values:
        allow = values["tf_firewall_allow"]
        if allow is None:
            allow = []
        if not isinstance(allow, list):
            problems.append(f"tf_firewall_allow must be a list of IP addresses or host names, got {allow!r}")
        else:
            problems.extend(p for p in map(_source_problem, allow) if p)
    problems.extend(_collect_problems(values))
    problems.extend(_cross_problems(values, cluster_size))
    restart_on = values.get("tf_restart_on")
    if isinstance(restart_on, list) and "operator" in restart_on:
        problems.append("tf_restart_on holds operator, which is never restarted: an operator's stop (stop.yml) is a "
                        "decision, not a failure; drop it (continue such a run with -e tf_resume=true)")
    return problems


def tf_preflight_input_problems(
    own: dict[str, Any], host: str, others: dict[str, dict[str, Any]], cluster_size: int = 0
) -> list[str]:
    """Inputs that fail late or never (a bad regex at launch, a bad firewall source after
    the deploy, a missing report template at collect, a relative base directory), for
    every host of the play, each message naming host and value.

    ``own`` holds the effective value of each of INPUT_NAMES on ``host`` that is defined
    there (role defaults and play variables included, the same on every host); ``others``
    maps each host to its host variables, of which only those names are read. A problem is
    named once per host."""
    if not isinstance(own, dict) or not isinstance(others, dict):
        raise AnsibleFilterError("expected the inputs of this host and the host variables of every host, as dicts")
    size = int(cluster_size or 0)
    found = input_problems(own, size)
    problems = [f"host {host}: {problem}" for problem in found]
    for other, variables in others.items():
        defined = {name: variables[name] for name in INPUT_NAMES if name in variables}
        if other == host or not defined:
            continue
        # The other host's own values, in the context of the play's (a poll interval set
        # only for the play still bounds a host's controller timeout); what it inherits
        # from the play or from every host was named on ``host`` already.
        problems.extend(f"host {other}: {problem}" for problem in input_problems(dict(own, **defined), size)
                        if problem not in found)
    return problems


def tf_preflight_input_names(_value: Any = None) -> list[str]:
    """Names of the inputs tf_preflight_input_problems checks."""
    return list(INPUT_NAMES)


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {
            "tf_preflight_host_problems": tf_preflight_host_problems,
            "tf_preflight_unreachable": tf_preflight_unreachable,
            "tf_preflight_refused_hosts": tf_preflight_refused_hosts,
            "tf_preflight_controller_run": tf_preflight_controller_run,
            "tf_preflight_address_problems": tf_preflight_address_problems,
            "tf_preflight_checkpoint_problems": tf_preflight_checkpoint_problems,
            "tf_preflight_versions": tf_preflight_versions,
            "tf_preflight_probe_versions": tf_preflight_probe_versions,
            "tf_preflight_script_problems": tf_preflight_script_problems,
            "tf_controller_path": tf_controller_path,
            "tf_preflight_input_problems": tf_preflight_input_problems,
            "tf_preflight_input_names": tf_preflight_input_names,
        }
