"""Shared setup of the unit tests.

- Loads the code under test (filter plugins, modules, the supervisor script) by file
  path with importlib and registers each under its plain name, so that the tests simply
  ``import tf_cluster`` and so on, whatever pytest's import mode.
- ``reaper``: makes this pytest process a child subreaper and reaps, like a real init,
  the orphans that the supervisor tests leave behind. PID 1 of some containers does not
  reap orphans; their zombies would keep a process group "alive" for ``os.killpg(pgid,
  0)`` although nothing in it runs any more.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
PLUGINS = REPO / "plugins"
SUPERVISOR = ROLES / "tf_worker" / "files" / "tf_supervisor.py"
# The clone as the collection tf_runbook.multiworker (its plugins import the shared
# plugins/module_utils/ by that name), as ansible.cfg's collections_path finds it.
sys.path.insert(0, str(REPO / "collections"))
# The tests' shared helpers (tests/helpers.py).
sys.path.insert(0, str(REPO / "tests"))

import helpers  # noqa: E402

MODULES: dict[str, Path] = {
    "tf_cluster": PLUGINS / "filter" / "tf_cluster.py",
    "tf_run_id": PLUGINS / "filter" / "tf_run_id.py",
    "tf_worker_config": PLUGINS / "filter" / "tf_worker_config.py",
    "tf_wait": PLUGINS / "filter" / "tf_wait.py",
    "tf_launch": PLUGINS / "filter" / "tf_launch.py",
    "tf_verdict": PLUGINS / "modules" / "tf_verdict.py",
    "tf_report": PLUGINS / "filter" / "tf_report.py",
    "tf_report_action": PLUGINS / "action" / "tf_report.py",
    "tf_worker_stop": PLUGINS / "modules" / "tf_worker_stop.py",
    "tf_worker_status": PLUGINS / "modules" / "tf_worker_status.py",
    "tf_worker_wait": PLUGINS / "modules" / "tf_worker_wait.py",
    "tf_worker_launch": PLUGINS / "modules" / "tf_worker_launch.py",
    "tf_worker_go": PLUGINS / "modules" / "tf_worker_go.py",
    "tf_supervisor": SUPERVISOR,
    "tf_preflight": PLUGINS / "filter" / "tf_preflight.py",
    "tf_preflight_host": PLUGINS / "modules" / "tf_preflight_host.py",
    "tf_preflight_reach": PLUGINS / "modules" / "tf_preflight_reach.py",
    "tf_firewall": PLUGINS / "modules" / "tf_firewall.py",
    "tf_collect_bundle": PLUGINS / "modules" / "tf_collect_bundle.py",
    "tf_collect_unpack": PLUGINS / "action" / "tf_collect_bundle.py",
    "tf_run_dir": PLUGINS / "modules" / "tf_run_dir.py",
    "tf_job_archive": PLUGINS / "modules" / "tf_job_archive.py",
    "tf_worker_job": PLUGINS / "filter" / "tf_worker_job.py",
    "tf_worker_status_action": PLUGINS / "action" / "tf_worker_status.py",
    "tf_worker_wait_action": PLUGINS / "action" / "tf_worker_wait.py",
    "tf_role_inputs_action": PLUGINS / "action" / "tf_role_inputs.py",
    "tf_run_claim_action": PLUGINS / "action" / "tf_run_claim.py",
    "tf_run_record_action": PLUGINS / "action" / "tf_run_record.py",
}


def load_module(name: str, path: Path) -> ModuleType:
    """Import ``path`` as module ``name`` (registered in sys.modules)."""
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, f"cannot load {path}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


for _name, _path in MODULES.items():
    load_module(_name, _path)


@pytest.fixture(scope="session")
def supervisor_path() -> Path:
    return SUPERVISOR


PR_SET_CHILD_SUBREAPER = 36


def _zombie_orphans() -> list[int]:
    """Zombie children of this process that are not in its own process group.

    The supervisors the tests start with Popen stay in pytest's group and are waited for
    by Popen; only orphans reparented from the jobs' own process groups are reaped here.
    """
    me = os.getpid()
    own_group = os.getpgrp()
    found = []
    for pid in helpers.processes():
        stat = helpers.proc_stat(pid)
        if stat is None:
            continue
        fields = stat[1]
        if fields[0] == "Z" and int(fields[1]) == me and int(fields[2]) != own_group:
            found.append(pid)
    return found


@pytest.fixture(scope="session")
def reaper() -> Iterator[None]:
    """Reap orphaned zombies as an init would, for as long as the session runs."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            for pid in _zombie_orphans():
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
            time.sleep(0.05)

    thread = threading.Thread(target=loop, name="orphan-reaper", daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=1)


@pytest.fixture
def jinja_compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every template Jinja compiles from now on, by source ("<expression>" for an
    expression, which Jinja compiles from a parsed tree)."""
    from ansible._internal._templating._jinja_bits import AnsibleEnvironment

    seen: list[str] = []
    real = AnsibleEnvironment.from_string

    def from_string(self: Any, source: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(source if isinstance(source, str) else "<expression>")
        return real(self, source, *args, **kwargs)

    monkeypatch.setattr(AnsibleEnvironment, "from_string", from_string)
    return seen
