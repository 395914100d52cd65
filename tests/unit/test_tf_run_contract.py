"""The run's on-disk contract lives in one module (issue 12):
``plugins/module_utils/tf_run.py``. The supervisor, standard-library only on the hosts,
imports it (shipped next to it, issue 25), keeps no copies; no plugin spells it out."""

from __future__ import annotations

import ast
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

import tf_supervisor
import yaml
from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_causes, tf_run

REPO = Path(__file__).resolve().parents[2]
HOST_FILES = REPO / "roles" / "tf_worker" / "files"
SUPERVISOR = HOST_FILES / "tf_supervisor.py"
MODULE_UTILS = REPO / "plugins" / "module_utils"
# The contract's literals no plugin may spell out again.
CONTRACT_LITERALS = {
    tf_run.STATE_FILE, tf_run.EXIT_FILE, tf_run.LOG_FILE, tf_run.CONFIG_FILE, tf_run.JOB_ENV_FILE,
    tf_run.STOP_FILE, tf_run.LAUNCH_OUTPUT_FILE, tf_run.WORKER_PREFIX, tf_run.RETRY_PREFIX, tf_run.RUNS_DIR,
}  # fmt: skip
DOC_NAMES = {"DOCUMENTATION", "EXAMPLES", "RETURN"}


@pytest.mark.parametrize(
    "name",
    [
        "STATE_FILE", "EXIT_FILE", "LOG_FILE", "CONFIG_FILE", "JOB_ENV_FILE", "STOP_FILE", "STOPPED_BY",
        "GO_MAGIC", "GO_STARTED", "GO_FAILED", "GO_LINE_BYTES", "ANNOUNCE_MAGIC", "SECRETS_FLAG",
        "SECRETS_LINE_BYTES", "SECRET_GO_TOKEN", "SECRET_ANNOUNCE_KEY", "parse_secrets_line", "read_json",
        "write_json_atomic",
    ],  # fmt: skip
)
def test_the_supervisor_imports_the_contract(name: str) -> None:
    assert getattr(tf_supervisor, name) is getattr(sys.modules["tf_run"], name)
    assert Path(sys.modules["tf_run"].__file__ or "").resolve() == Path(tf_run.__file__ or "").resolve()


def top_level_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    names |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    return names - {"__all__", "DOCUMENTATION", "EXAMPLES", "RETURN"}


@pytest.mark.parametrize("host_file", [tf_run.SUPERVISOR_FILE, tf_run.JOB_WRAPPER])
def test_the_host_files_copy_nothing_of_the_shared_modules(host_file: str) -> None:
    mine = top_level_names(HOST_FILES / host_file)
    for shared in tf_run.SHARED_MODULES:
        copied = mine & top_level_names(MODULE_UTILS / shared)
        assert not copied, f"{host_file} defines {sorted(copied)} of {shared} again: import it"


def test_the_protocol_magics_are_distinct() -> None:
    magics = [tf_run.GO_MAGIC, tf_run.GO_STARTED, tf_run.GO_FAILED, tf_run.ANNOUNCE_MAGIC]
    assert len(set(magics)) == len(magics)
    assert not any(a != b and a.startswith(b) for a in magics for b in magics)


def test_the_deploy_ships_the_supervisor_with_what_it_imports() -> None:
    from ansible_collections.tf_runbook.multiworker.plugins.filter.tf_launch import FilterModule

    shipped = FilterModule().filters()["tf_supervisor_files"]("")
    own_files = (tf_run.SUPERVISOR_FILE, tf_run.JOB_WRAPPER, tf_run.SERVER_ENTRY, tf_run.CHECKPOINT_PUSH_FILE)
    assert [entry["name"] for entry in shipped] == [*own_files, *tf_run.SHARED_MODULES]
    for entry in shipped:
        own = entry["name"] in own_files
        assert entry["content"] == ((HOST_FILES if own else MODULE_UTILS) / entry["name"]).read_text(encoding="utf-8")


def test_both_writers_of_the_job_directory_take_its_files_from_one_definition() -> None:
    """tf_worker's tf_run_dir (where the managed virtualenv or a resume needs the run's
    directories first) and the launch's module run write the same files: role tf's
    __tf_run_job_files (the script, or nothing where the project's archive brings the job,
    and the supervisor's files) and __tf_run_job_archive, defined once."""
    roles = REPO / "roles"
    variables = yaml.safe_load((roles / "tf" / "vars" / "main.yml").read_text(encoding="utf-8"))
    assert "('' | tf_runbook.multiworker.tf_supervisor_files)" in variables["__tf_run_job_files"]
    # The script is read where the person who named it meant it (tf_controller_path).
    assert (
        "lookup('ansible.builtin.file', tf_train_script | tf_runbook.multiworker.tf_controller_path, rstrip=false)"
        in " ".join(variables["__tf_run_job_files"].split())
    )
    assert "/job-archives/" in variables["__tf_run_job_archive"]
    tasks = yaml.safe_load((roles / "tf_worker" / "tasks" / "directories.yml").read_text(encoding="utf-8"))
    run_dir = next(t for t in tasks if "tf_runbook.multiworker.tf_run_dir" in t)["tf_runbook.multiworker.tf_run_dir"]
    tasks = yaml.safe_load((roles / "tf_launch" / "tasks" / "main.yml").read_text(encoding="utf-8"))
    # The launch sits in a block (its rescue clears the firewall of a failed launch).
    flat = [inner for task in tasks for inner in [task, *task.get("block", []), *task.get("rescue", [])]]
    deploy = next(t for t in flat if "tf_runbook.multiworker.tf_worker_launch" in t)["tf_runbook.multiworker.tf_worker_launch"]["deploy"]
    for args in (run_dir, deploy):
        assert args["job_files"] == "{{ __tf_run_job_files }}"
        assert args["job_archive"] == "{{ __tf_run_job_archive }}"
    archive = yaml.safe_load((roles / "tf_worker" / "tasks" / "archive.yml").read_text(encoding="utf-8"))
    assert next(t for t in archive if "ansible.builtin.copy" in t)["ansible.builtin.copy"]["dest"] == "{{ __tf_run_job_archive }}"


@pytest.mark.parametrize("shared", tf_run.SHARED_MODULES)
def test_the_shipped_modules_need_only_the_standard_library(shared: str) -> None:
    """They run under the worker's interpreter, which has no Ansible: anything else they
    import is another shipped module, or guarded (the collection's name, on the controller)."""
    tree = ast.parse((MODULE_UTILS / shared).read_text(encoding="utf-8"))
    own = {name.removesuffix(".py") for name in tf_run.SHARED_MODULES}
    guarded = {id(n) for t in ast.walk(tree) if isinstance(t, ast.Try) for b in t.body for n in ast.walk(b)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and id(node) not in guarded and node.module != "__future__":
            top = node.module.split(".")[0]
            assert top in sys.stdlib_module_names or top in own, f"{shared} imports {node.module}"
        if isinstance(node, ast.Import) and id(node) not in guarded:
            for alias in node.names:
                top = alias.name.split(".")[0]
                assert top in sys.stdlib_module_names or top in own, f"{shared} imports {alias.name}"


def test_the_supervisors_exit_record_has_the_contracts_fields() -> None:
    record = tf_supervisor.exit_record(-signal.SIGTERM, "stopped", "runbook", 1.0, True)
    assert tuple(record) == tf_run.EXIT_FIELDS
    assert record["returncode"] == 128 + signal.SIGTERM


def test_a_killed_workers_record_has_the_contracts_fields() -> None:
    record = tf_run.killed_exit_record("stopped by the operator", "operator", 1.0, 2.0)
    assert tuple(record) == tf_run.EXIT_FIELDS
    assert (record["returncode"], record["stopped_by"]) == (137, "operator")


def test_stop_requesters_and_victims_are_stopped_by_values() -> None:
    assert set(tf_run.STOP_REQUESTERS) <= set(tf_run.STOPPED_BY)
    assert tf_causes.VICTIM_STOPS <= set(tf_run.STOPPED_BY)


@pytest.mark.parametrize(
    ("run_id", "safe"),
    [("20260101T000000Z-abc123", True), ("exp1", True), ("a" * 64, True), ("a" * 65, False),
     ("../x", False), ("a..b", False), (".", False), ("", False), (None, False), ("a/b", False), ("-a", False)],
)  # fmt: skip
def test_run_id_rules(run_id: Any, safe: bool) -> None:
    assert tf_run.run_id_is_safe(run_id) is safe


def test_layout() -> None:
    run = tf_run.run_dir_of("/b", "r1")
    assert run == "/b/runs/r1"
    assert tf_run.attempt_dir_of(run, 0) == run
    assert tf_run.attempt_dir_of(run, 2) == "/b/runs/r1/retry-2"
    assert tf_run.worker_dir_name("3") == "worker-3"
    assert [tf_run.worker_index(n) for n in ("worker-3", "worker-x", "retry-1", "worker-")] == [3, None, None, None]
    assert [tf_run.retry_index(n) for n in ("retry-2", "retry-", "worker-1")] == [2, None, None]


def test_json_read_and_atomic_write(tmp_path: Path) -> None:
    path = str(tmp_path / "exit.json")
    assert tf_run.read_json(path) is None
    tf_run.write_json_atomic(path, {"b": 1, "a": [1]})
    assert tf_run.read_json(path) == {"a": [1], "b": 1}
    assert os.listdir(tmp_path) == ["exit.json"]
    (tmp_path / "list.json").write_text("[1]")
    (tmp_path / "bad.json").write_text("{")
    assert tf_run.read_json(str(tmp_path / "list.json")) is None
    assert tf_run.read_json(str(tmp_path / "bad.json")) is None
    assert json.loads((tmp_path / "exit.json").read_text()) == {"a": [1], "b": 1}


def test_cluster_checksum_ignores_key_order() -> None:
    one = tf_run.cluster_checksum({"worker": ["a:1"], "ps": ["b:2"]})
    assert one == tf_run.cluster_checksum({"ps": ["b:2"], "worker": ["a:1"]})
    assert one != tf_run.cluster_checksum({"worker": ["b:2"], "ps": ["a:1"]})


@pytest.mark.parametrize(
    ("record", "victim"),
    [({"stopped_by": "peer"}, True), ({"stopped_by": None, "reason": "stopped by the operator"}, False),
     ({"reason": "stopped by signal SIGTERM"}, False), ({"stopped_by": "job-deadline"}, False)],
)  # fmt: skip
def test_only_the_structured_field_makes_a_victim(record: dict[str, Any], victim: bool) -> None:
    assert tf_causes.stopped_as_victim(record) is victim


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("evil\u202etxt.exe", "evil\\u202etxt.exe"),  # right-to-left override
        ("a\u2066b\u2069c", "a\\u2066b\\u2069c"),  # isolates
        ("zero\u200bwidth\ufeff", "zero\\u200bwidth\\ufeff"),
        ("line\u2028sep", "line\\u2028sep"),
        ("épée 训练 ✓", "épée 训练 ✓"),  # visible text stays as it is
    ],
)
def test_printable_escapes_invisible_format_characters(text: str, shown: str) -> None:
    """Issue 38, point 15: a log line cannot show other text than it holds."""
    assert tf_run.printable(text) == shown


@pytest.mark.parametrize(
    ("number", "name"),
    [(int(signal.SIGKILL), "SIGKILL"), (int(signal.SIGRTMIN) + 3, "SIGRTMIN+3"), (int(signal.SIGRTMAX), "SIGRTMAX"),
     (int(signal.SIGRTMAX) - 2, "SIGRTMAX-2"), (200, "SIG200")],
)  # fmt: skip
def test_every_signal_a_process_can_die_of_has_a_name(number: int, name: str) -> None:
    """Issue 38, point 1: signal.Signals raises for the real-time signals."""
    assert tf_run.signal_name(number) == name


def test_printable_escapes_control_characters() -> None:
    assert tf_run.printable("a\x1b[2Jb\x9b\tc") == "a\\x1b[2Jb\\x9b\\tc"


def plugin_files() -> list[Path]:
    plugins = REPO / "plugins"
    return sorted(
        path
        for kind in ("modules", "action", "filter")
        for path in plugins.glob(f"{kind}/*.py")
    )


def code_literals(path: Path) -> set[str]:
    """String constants of a file's code: not its docstrings nor its documentation blocks."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in DOC_NAMES for t in node.targets):
            skipped.update(id(n) for n in ast.walk(node.value))
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(node) is not None:
            skipped.add(id(node.body[0].value))  # type: ignore[attr-defined]
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped
    }


@pytest.mark.parametrize("path", plugin_files(), ids=lambda p: f"{p.parts[-3]}/{p.parts[-2]}/{p.name}")
def test_no_plugin_spells_out_the_contract(path: Path) -> None:
    spelled = sorted(code_literals(path) & CONTRACT_LITERALS)
    assert not spelled, f"{path.name} writes {spelled} itself: import them from tf_run"


def test_plugins_that_touch_a_runs_files_import_the_contract() -> None:
    # tf_run_files (a run's files on a host, shared by tf_run_dir and tf_worker_launch)
    # imports the contract itself; a plugin that imports it imports the contract with it.
    shared = REPO / "plugins" / "module_utils" / "tf_run_files.py"
    assert "module_utils.tf_run import" in shared.read_text(encoding="utf-8")
    # The run id's rule, for the contract's check and the run id filters.
    assert "module_utils.tf_run import" in (REPO / "plugins" / "plugin_utils" / "tf_contract.py").read_text(encoding="utf-8")
    assert not code_literals(shared) & CONTRACT_LITERALS
    touching = [
        p for p in plugin_files()
        if any(f"module_utils.{name} import" in p.read_text(encoding="utf-8") for name in ("tf_run", "tf_run_files"))
    ]  # fmt: skip
    names = {p.name for p in touching}
    # The verdict reads a run's files through tf_verdict_run, which imports the contract.
    assert "module_utils.tf_run import" in (REPO / "plugins" / "module_utils" / "tf_verdict_run.py").read_text(encoding="utf-8")
    # The preflight probe looks for an earlier launch through tf_probe_host, which imports it.
    assert "module_utils.tf_run import" in (REPO / "plugins" / "module_utils" / "tf_probe_host.py").read_text(encoding="utf-8")
    assert {
        "tf_run_dir.py", "tf_worker_launch.py", "tf_worker_wait.py", "tf_worker_stop.py",
        "tf_collect_bundle.py", "tf_cluster.py", "tf_worker_config.py",
    } <= names  # fmt: skip


def test_the_stop_roles_and_modules_cause_choices_are_the_contracts() -> None:
    spec = yaml.safe_load((REPO / "roles" / "tf_stop" / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))
    assert spec["argument_specs"]["stop"]["options"]["tf_stop_cause"]["choices"] == ["", *tf_causes.CAUSES]
    source = (REPO / "plugins" / "modules" / "tf_worker_stop.py").read_text(encoding="utf-8")
    documentation = yaml.safe_load(ast.literal_eval(source.split("DOCUMENTATION = ", 1)[1].split('\n"""', 1)[0] + '\n"""'))
    assert documentation["options"]["cause"]["choices"] == ["", *tf_causes.CAUSES]


def test_private_dirs_are_made_0700_whatever_the_umask_and_existing_ones_are_left(tmp_path: Path) -> None:
    (tmp_path / "kept").mkdir(mode=0o755)
    os.chmod(tmp_path / "kept", 0o755)
    old = os.umask(0o022)
    try:
        tf_run.make_private_dirs(str(tmp_path / "kept" / "a" / "b"))
    finally:
        os.umask(old)
    assert oct((tmp_path / "kept").stat().st_mode & 0o777) == "0o755"
    for path in (tmp_path / "kept" / "a", tmp_path / "kept" / "a" / "b"):
        assert oct(path.stat().st_mode & 0o777) == "0o700", path
