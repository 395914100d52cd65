"""The smoke inventory's choice of module interpreter (plugins/filter/tf_local.py, issue 13)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.tf_runbook.multiworker.plugins.filter.tf_local import tf_module_python

FALLBACK = "/opt/controller/venv/bin/python"


def _python(tmp_path: Path, name: str, link: str = "python3", executable: bool = True) -> Path:
    real = tmp_path / name
    real.write_text("#!/bin/sh\n")
    real.chmod(0o755 if executable else 0o644)
    alias = tmp_path / link
    if alias != real:
        alias.symlink_to(real)
    return alias


@pytest.mark.parametrize("name", ["python3.9", "python3.11", "python3.14", "python4.0"])
def test_a_supported_system_python_is_preferred(tmp_path: Path, name: str) -> None:
    system = _python(tmp_path, name)
    assert tf_module_python(FALLBACK, str(system)) == str(system)


@pytest.mark.parametrize("name", ["python3.6", "python3.8", "python2.7"])
def test_a_system_python_too_old_for_the_modules_is_passed_over(tmp_path: Path, name: str) -> None:
    assert tf_module_python(FALLBACK, str(_python(tmp_path, name))) == FALLBACK


def test_a_name_without_a_version_is_passed_over(tmp_path: Path) -> None:
    # A macOS /usr/bin/python3 is a stub of that name: its version is unknown without running it.
    system = _python(tmp_path, "python3", link="python3")
    assert tf_module_python(FALLBACK, str(system)) == FALLBACK


def test_a_missing_or_not_executable_system_python_is_passed_over(tmp_path: Path) -> None:
    assert tf_module_python(FALLBACK, str(tmp_path / "nowhere" / "python3")) == FALLBACK
    assert tf_module_python(FALLBACK, str(_python(tmp_path, "python3.12", executable=False))) == FALLBACK


def test_this_machine_gets_a_python_that_runs_the_modules() -> None:
    chosen = tf_module_python(sys.executable)
    assert os.access(chosen, os.X_OK)
    name = os.path.basename(os.path.realpath(chosen))
    assert chosen == sys.executable or tuple(int(p) for p in name[len("python"):].split(".")) >= (3, 9)


@pytest.mark.parametrize("bad", [None, "", 3])
def test_no_fallback_is_an_error(bad: object) -> None:
    with pytest.raises(ValueError, match="fallback"):
        tf_module_python(bad)


def test_the_smoke_inventory_runs_localhost_modules_under_the_chosen_interpreter() -> None:
    # The inventory's own value, templated by Ansible: the filter's choice for this machine.
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [str(Path(sys.executable).with_name("ansible")), "localhost", "-i", "inventory/local", "-o",
         "-m", "ansible.builtin.debug", "-a", "msg={{ ansible_python_interpreter }}"],
        cwd=repo, env=dict(os.environ, ANSIBLE_CONFIG=str(repo / "ansible.cfg")),
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f'"msg": "{tf_module_python(sys.executable)}"' in out.stdout, out.stdout
