"""GPU hosts that would train on the CPU (issue 24, point 8): the managed virtualenv's
pins on a GPU host, the check each worker interpreter runs, and the refusal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.tf_runbook.multiworker.plugins.filter.tf_gpus import (
    tf_gpu_given,
    tf_worker_devices,
    FilterModule,
    tf_gpu_pins,
    tf_gpu_probe_code,
    tf_gpu_problems,
)

DEFAULT_PINS = ["tensorflow-cpu==2.21.0", "numpy==2.3.5"]
# Two workers on host a (indices 0, 1) with 4 GPUs each, one on host b.
GPU_DEVICES = {"0": "0,1,2,3", "1": "4,5,6,7", "2": "0,1,2,3"}


@pytest.mark.parametrize(
    ("requirements", "devices", "pins"),
    [
        # The host shows GPUs and hands them out: the CUDA build, same version.
        (DEFAULT_PINS, GPU_DEVICES, ["tensorflow[and-cuda]==2.21.0", "numpy==2.3.5"]),
        (["TensorFlow_CPU >= 2.20 ; python_version >= '3.10'"], GPU_DEVICES,
         ["tensorflow[and-cuda]>= 2.20 ; python_version >= '3.10'"]),
        # A host without GPUs (None), or a CPU run (tf_worker_gpus_per_slot 0: ""): as written.
        (DEFAULT_PINS, {"0": None, "1": None}, DEFAULT_PINS),
        (DEFAULT_PINS, {"0": "", "1": ""}, DEFAULT_PINS),
        (DEFAULT_PINS, {}, DEFAULT_PINS),
        # Another build pinned by the user is the user's choice.
        (["tensorflow==2.21.0", "tf_keras==2.21.0"], GPU_DEVICES, ["tensorflow==2.21.0", "tf_keras==2.21.0"]),
        (["tensorflow[and-cuda]==2.21.0"], GPU_DEVICES, ["tensorflow[and-cuda]==2.21.0"]),
    ],
)
def test_the_managed_virtualenv_gets_the_cuda_build_where_its_workers_get_gpus(
    requirements: list[str], devices: dict[str, Any], pins: list[str]
) -> None:
    assert tf_gpu_pins(requirements, devices, [0, 1]) == pins


def test_only_this_hosts_workers_decide_its_pins() -> None:
    assert tf_gpu_pins(DEFAULT_PINS, {"0": None, "1": "0"}, [0]) == DEFAULT_PINS
    assert tf_gpu_pins(DEFAULT_PINS, {"0": None, "1": "0"}, [1])[0] == "tensorflow[and-cuda]==2.21.0"


def test_no_code_runs_where_no_worker_gets_gpus() -> None:
    assert tf_gpu_probe_code({"0": None, "1": ""}, [0, 1]) == ""
    assert tf_gpu_probe_code(GPU_DEVICES, [5]) == ""


def fake_tensorflow(root: Path, gpus_per_device: int) -> Path:
    """A `tensorflow` package whose GPU list follows CUDA_VISIBLE_DEVICES: a CUDA build
    (1 per listed device) or a CPU build (0)."""
    package = root / "tensorflow"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import os\n"
        "__version__ = '2.21.0'\n"
        "class _Config:\n"
        "    def list_physical_devices(self, kind):\n"
        "        listed = [d for d in os.environ.get('CUDA_VISIBLE_DEVICES', '').split(',') if d]\n"
        f"        return ['GPU'] * (len(listed) * {gpus_per_device}) if kind == 'GPU' else []\n"
        "config = _Config()\n"
    )
    return root


def run_code(code: str, path: Path | None) -> dict[str, Any]:
    """Runs ``code`` as the probe runs it (``python -c``), with ``path`` first on the
    module path of the interpreter and of its children; None: without site-packages (-S),
    so without any TensorFlow."""
    flags = ["-S"] if path is None else []
    if path is not None:
        code = f"import os, sys; sys.path.insert(0, {str(path)!r}); os.environ['PYTHONPATH'] = {str(path)!r}\n" + code
    done = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin"}, timeout=60, check=True)
    return json.loads(done.stdout)


@pytest.mark.parametrize(("build", "seen"), [(1, [4, 4]), (0, [0, 0])])
def test_the_code_asks_each_workers_tensorflow_under_its_own_devices(tmp_path: Path, build: int, seen: list[int]) -> None:
    path = fake_tensorflow(tmp_path / "site", build)
    found = run_code(tf_gpu_probe_code(GPU_DEVICES, [0, 1]), path)
    assert found["tensorflow"] is True
    assert [found["workers"][i]["gpus"] for i in ("0", "1")] == seen
    assert found["workers"]["0"]["version"] == "2.21.0"


def test_an_interpreter_without_tensorflow_says_so(tmp_path: Path) -> None:
    assert run_code(tf_gpu_probe_code(GPU_DEVICES, [0]), None) == {"tensorflow": False, "workers": {}}


def test_a_tensorflow_that_fails_to_import_is_an_error_per_worker(tmp_path: Path) -> None:
    package = tmp_path / "site" / "tensorflow"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('libcudart.so.12: cannot open shared object file')\n")
    found = run_code(tf_gpu_probe_code(GPU_DEVICES, [0]), package.parent)
    assert found["workers"]["0"]["error"] == "importing TensorFlow failed: ImportError: libcudart.so.12: cannot open " \
        "shared object file"


def test_a_worker_whose_tensorflow_sees_fewer_gpus_is_refused_naming_everything() -> None:
    seen = {
        "a": {"versions": {"tensorflow": True, "workers": {"0": {"gpus": 0, "version": "2.21.0"},
                                                            "1": {"gpus": 4, "version": "2.21.0"}}}},
        "b": {"skipped": True},
    }
    [problem] = tf_gpu_problems(seen, GPU_DEVICES, {"a": 8, "b": 8}, {"a": "/opt/venv/bin/python"})
    assert problem == (
        "host a: worker 0 gets 4 of the 8 GPU(s) the host shows (CUDA_VISIBLE_DEVICES=0,1,2,3), but its TensorFlow "
        "2.21.0 /opt/venv/bin/python sees 0: it would train on the CPU; install TensorFlow's CUDA build, "
        "tensorflow[and-cuda] (in tf_worker_requirements, or in the tf_worker_python you name), or set "
        "tf_worker_gpus_per_slot: 0 for a CPU run"
    )


def test_workers_that_see_their_gpus_or_hosts_without_tensorflow_pass() -> None:
    seen = {
        "a": {"versions": {"tensorflow": True, "workers": {"0": {"gpus": 4}, "1": {"gpus": 4}}}},
        "b": {"versions": {"tensorflow": False, "workers": {}}},
    }
    assert tf_gpu_problems(seen, GPU_DEVICES, {"a": 8, "b": 4}) == []


def test_errors_of_the_interpreter_or_of_one_worker_are_named() -> None:
    seen = {
        "a": {"versions": {"error": "/x/python does not run: No such file"}},
        "b": {"versions": {"tensorflow": True, "workers": {"2": {"error": "importing TensorFlow failed: boom"}}}},
    }
    assert tf_gpu_problems(seen, GPU_DEVICES, {"a": 8, "b": 4}) == [
        "host a: the worker interpreter could not be asked for its GPUs: /x/python does not run: No such file",
        "host b: worker 2's TensorFlow could not list its GPUs (CUDA_VISIBLE_DEVICES=0,1,2,3, the host shows 4): "
        "importing TensorFlow failed: boom",
    ]


def test_the_filters_are_registered() -> None:
    assert set(FilterModule().filters()) == {"tf_gpu_pins", "tf_gpu_probe_code", "tf_gpu_problems", "tf_worker_devices",
                                          "tf_gpu_given"}


def test_the_code_asks_in_the_environment_the_job_gets(tmp_path: Path) -> None:
    """A TensorFlow that finds CUDA only through tf_worker_env (LD_LIBRARY_PATH here):
    asked without it, it would be refused although the job sees its GPUs."""
    package = tmp_path / "site" / "tensorflow"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import os\n"
        "class _Config:\n"
        "    def list_physical_devices(self, kind):\n"
        "        found = os.environ.get('LD_LIBRARY_PATH') == '/opt/cuda/lib64'\n"
        "        return os.environ['CUDA_VISIBLE_DEVICES'].split(',') if found else []\n"
        "config = _Config()\n"
    )
    with_env = run_code(tf_gpu_probe_code(GPU_DEVICES, [0], {"LD_LIBRARY_PATH": "/opt/cuda/lib64"}), package.parent)
    without = run_code(tf_gpu_probe_code(GPU_DEVICES, [0]), package.parent)
    assert (with_env["workers"]["0"]["gpus"], without["workers"]["0"]["gpus"]) == (4, 0)


class UnlistedDict(dict):
    """Every worker's devices, whose entries may only be looked up one by one."""

    def items(self):
        raise AssertionError("every worker's entry was read")

    def __iter__(self):
        raise AssertionError("every worker's entry was read")

    values = keys = items


def test_a_host_gets_its_own_workers_devices_looked_up_not_the_whole_map() -> None:
    devices = UnlistedDict({str(i): (str(i % 2) if i < 100 else None) for i in range(128)})
    assert tf_worker_devices(devices, [3, "4"]) == {"3": "1", "4": "0"}
    assert tf_worker_devices(devices, [120]) == {"120": None}
    assert tf_worker_devices(devices, [500]) == {}
    with pytest.raises(Exception, match="expected worker index to CUDA_VISIBLE_DEVICES, got list"):
        tf_worker_devices([], [1])


def test_a_run_gives_gpus_when_any_worker_gets_a_device_list() -> None:
    assert tf_gpu_given({"0": None, "1": "", "2": " 1 "}) is True
    assert tf_gpu_given({"0": "0,1"}) is True
    # No GPU on the host (None), every GPU hidden (""), or no worker at all: none given.
    assert tf_gpu_given({"0": None, "1": "", "2": "  "}) is False
    assert tf_gpu_given({}) is False
    with pytest.raises(Exception, match="expected worker index to CUDA_VISIBLE_DEVICES, got list"):
        tf_gpu_given([])
