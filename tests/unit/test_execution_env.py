"""The execution environment (execution-environment.yml) for AWX and Ansible Automation Platform.

``ansible-builder create`` writes the build context of the image without a container
engine: the collection is built as the file says (``ansible-galaxy collection build`` into
.cache/ee/, here in a temporary copy), and the context is checked: the Containerfile
installs the ansible-core the controller pins (2.21), the Python packages are the
controller's pins, and the collection archive the galaxy requirements name is there and is
tf_runbook.multiworker at galaxy.yml's version, without the clone's tests.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def requirement_pins() -> dict[str, str]:
    """requirements.txt's pins, by lower-case package name: ``{"ansible-core": "ansible-core==2.21.5"}``."""
    pins = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            pins[line.split("==", 1)[0].lower()] = line
    return pins


def tool(name: str) -> str:
    path = BIN / name
    assert path.is_file(), f"{name} is not in {BIN}: run `make setup` (requirements.txt pins it)"
    return str(path)


@pytest.fixture(scope="module")
def ee() -> dict[str, Any]:
    return yaml.safe_load((REPO / "execution-environment.yml").read_text())


@pytest.fixture(scope="module")
def context(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The build context ``ansible-builder create`` writes for a copy of the file, after
    the collection was built where the file looks for it."""
    root = tmp_path_factory.mktemp("ee")
    shutil.copy(REPO / "execution-environment.yml", root)
    subprocess.run(
        [tool("ansible-galaxy"), "collection", "build", "--force", "--output-path", str(root / ".cache" / "ee")],
        cwd=REPO, check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    created = subprocess.run(
        [tool("ansible-builder"), "create", "-f", str(root / "execution-environment.yml"), "-c", str(root / "context"),
         "--output-filename", "Containerfile"],
        cwd=root, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert created.returncode == 0, created.stdout + created.stderr
    assert "No matches" not in created.stdout + created.stderr, created.stdout + created.stderr
    return root / "context"


def test_ansible_builder_runs_at_the_version_requirements_txt_pins() -> None:
    version = subprocess.run([tool("ansible-builder"), "--version"], capture_output=True, text=True, check=True)
    assert f"ansible-builder=={version.stdout.strip()}" == requirement_pins()["ansible-builder"]


def test_the_containerfile_installs_the_controllers_ansible_core_2_21(ee: dict[str, Any], context: Path) -> None:
    pin = requirement_pins()["ansible-core"]
    assert pin.startswith("ansible-core==2.21.")
    assert ee["version"] == 3
    assert ee["dependencies"]["ansible_core"] == {"package_pip": pin}
    containerfile = (context / "Containerfile").read_text()
    refs = next(line for line in containerfile.splitlines() if line.startswith("ARG ANSIBLE_INSTALL_REFS="))
    assert refs.split("=", 1)[1].strip('"').split() == [pin, ee["dependencies"]["ansible_runner"]["package_pip"]]
    assert f'ARG EE_BASE_IMAGE="{ee["images"]["base_image"]["name"]}"' in containerfile
    # The collection is installed in the galaxy stage and copied into the final image.
    assert "ansible-galaxy collection install $ANSIBLE_GALAXY_CLI_COLLECTION_OPTS -r requirements.yml" in containerfile
    assert containerfile.count("COPY --from=galaxy /usr/share/ansible /usr/share/ansible") == 2


def test_the_python_packages_are_the_controllers_pins(ee: dict[str, Any], context: Path) -> None:
    pins = requirement_pins()
    wanted = (context / "_build" / "requirements.txt").read_text().split()
    assert wanted == ee["dependencies"]["python"]
    assert {pin.split("==", 1)[0].lower() for pin in wanted} == {"jinja2", "pyyaml"}
    for pin in wanted:
        assert pins[pin.split("==", 1)[0].lower()] == pin
    assert "openssh-clients [platform:rpm]" in (context / "_build" / "bindep.txt").read_text().splitlines()


def test_the_galaxy_requirements_name_the_built_collection(context: Path) -> None:
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    requirements = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    assert requirements == {
        "collections": [
            {"name": f"collections/{galaxy['namespace']}-{galaxy['name']}-{galaxy['version']}.tar.gz", "type": "file"}
        ]
    }
    # Installed from /build, where the context's _build/ is copied.
    archive = context / "_build" / requirements["collections"][0]["name"]
    assert archive.is_file(), sorted(p.name for p in (context / "_build").rglob("*"))
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        manifest = json.load(tar.extractfile("MANIFEST.json"))  # type: ignore[arg-type]
    info = manifest["collection_info"]
    assert (info["namespace"], info["name"], info["version"]) == (galaxy["namespace"], galaxy["name"], galaxy["version"])
    assert {"plugins/module_utils/tf_run.py", "roles/tf/defaults/main.yml", "playbooks/train.yml"} <= set(names)
    assert not [name for name in names if name.startswith(("tests/", ".venv", "collections/"))]
