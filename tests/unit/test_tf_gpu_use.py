"""GPU use counts as progress (issue 37): nvidia-smi found and asked on the worker host
(module_utils/tf_gpu_use.py, through the wait's host module), a busy GPU keeping a silent
job from being stalled, the stall's detail saying what the GPUs did, and a hanging
nvidia-smi never holding the wait. nvidia-smi is a fake script that prints what a test
gives it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_activity, tf_gpu_use, tf_worker_records

GPUS = "0, GPU-aaaa1111, 87\n1, GPU-bbbb2222, 0\n2, GPU-cccc3333, [N/A]\n"


def fake_smi(tmp_path: Path, gpus: str = GPUS, apps: str = "", delay: float = 0.0, status: int = 0) -> str:
    """An executable nvidia-smi that answers the GPU query with ``gpus`` and the compute
    apps query with ``apps``, after ``delay`` seconds, exiting ``status``; it appends each
    of its argv to calls.txt."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir(exist_ok=True)
    smi.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {tmp_path / "calls.txt"}\n'
        f"sleep {delay}\n"
        'case "$1" in\n'
        f"  --query-gpu=*) printf '%s' '{gpus}' ;;\n"
        f"  --query-compute-apps=*) printf '%s' '{apps}' ;;\n"
        "esac\n"
        f"exit {status}\n"
    )
    smi.chmod(0o755)
    return str(smi)


def test_nvidia_smi_is_found_on_path_then_among_the_candidates(tmp_path: Path) -> None:
    smi = fake_smi(tmp_path)
    assert tf_gpu_use.find_nvidia_smi(path=str(Path(smi).parent), candidates=()) == smi
    assert tf_gpu_use.find_nvidia_smi(path=str(tmp_path / "none"), candidates=("/nonexistent/nvidia-smi", smi)) == smi
    assert tf_gpu_use.find_nvidia_smi(path=str(tmp_path / "none"), candidates=("/nonexistent/nvidia-smi",)) is None
    plain = tmp_path / "plain"
    plain.write_text("")  # not executable
    assert tf_gpu_use.find_nvidia_smi(path="", candidates=(str(plain),)) is None


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        ({"pids": [300], "visible": None}, 87.0),  # its process computes on GPU 0
        ({"pids": [400], "visible": None}, None),  # a process on no GPU, pinned to none
        ({"pids": [], "visible": "1"}, 0.0),  # pinned by index (its pids hidden by a container)
        ({"pids": [], "visible": "GPU-bbbb"}, 0.0),  # pinned by a uuid's prefix
        ({"pids": [], "visible": "1,0"}, 87.0),  # the busiest of its GPUs
        ({"pids": [], "visible": "2"}, None),  # no utilisation reading ([N/A])
        ({"pids": [], "visible": "-1"}, None),
        ({"pids": [], "visible": ""}, None),
    ],
)
def test_each_job_gets_the_busiest_of_its_gpus(tmp_path: Path, job: dict[str, Any], expected: float | None) -> None:
    smi = fake_smi(tmp_path, apps="300, GPU-aaaa1111\n")
    assert tf_gpu_use.gpu_use({"w": job}, smi) == {"w": expected}


def test_a_host_without_nvidia_smi_or_with_a_broken_one_measures_nothing(tmp_path: Path) -> None:
    jobs = {0: {"pids": [1], "visible": "0"}}
    assert tf_gpu_use.gpu_use(jobs, str(tmp_path / "missing")) == {0: None}
    assert tf_gpu_use.gpu_use(jobs, fake_smi(tmp_path, status=9)) == {0: None}
    assert tf_gpu_use.gpu_use({}, fake_smi(tmp_path)) == {}


def test_a_hanging_nvidia_smi_is_killed_at_its_timeout(tmp_path: Path) -> None:
    smi = fake_smi(tmp_path, delay=60)
    started = time.monotonic()
    assert tf_gpu_use.gpu_use({0: {"pids": [], "visible": "0"}}, smi, timeout=0.5) == {0: None}
    assert time.monotonic() - started < 5
    # Asked once (the GPU query), not again for the apps after it timed out.
    assert (tmp_path / "calls.txt").read_text().count("--query") == 1


def test_the_host_module_reads_each_running_jobs_gpu(tmp_path: Path) -> None:
    """tf_worker_records.with_activity: a running job pinned to GPU 0 through its
    job_env.json gets GPU 0's utilisation; an exited worker gets none."""
    root = tmp_path / "proc"
    rest = " ".join(["0"] * 36)
    (root / "300").mkdir(parents=True)
    (root / "300" / "stat").write_text(f"300 (job) R 1 300 300 0 0 0 0 0 0 0 5 0 0 0 {rest}\n")
    workers = []
    for index, state in enumerate(("running", "exited")):
        wdir = tmp_path / f"worker-{index}"
        wdir.mkdir()
        (wdir / "state.json").write_text(json.dumps({"pid": 300, "pgid": 300}))
        (wdir / "job_env.json").write_text(json.dumps({"CUDA_VISIBLE_DEVICES": "0", "SECRET": "s"}))
        workers.append({"index": index, "dir": str(wdir), "state": state})
    current = tf_worker_records.with_activity(workers, str(root), fake_smi(tmp_path))
    assert [w["gpu_util"] for w in current] == [87.0, None]
    assert "SECRET" not in json.dumps(current)
    # Not asked at all when told so (smi="").
    assert tf_worker_records.with_activity(workers, str(root), "")[0]["gpu_util"] is None


def _worker(index: int, lines: int, gpu: float | None) -> dict[str, Any]:
    return {"index": index, "progress_lines": lines, "cpu_seconds": None, "cpu_at": None, "gpu_util": gpu}


def test_a_busy_gpu_is_progress_and_an_idle_one_is_told_in_the_stall() -> None:
    first = tf_activity.progress_record(None, "node1", [_worker(0, 1, 0.0)], 100.0)
    busy = tf_activity.progress_record(first, "node1", [_worker(0, 1, 60.0)], 200.0)
    assert busy["busy_at"] == 200.0 and busy["last_progress_at"] == 200.0 and busy["gpu_util"] == {"0": 60.0}
    idle = tf_activity.progress_record(busy, "node1", [_worker(0, 1, 2.0)], 300.0)
    assert idle["last_progress_at"] == 200.0
    detail = tf_activity.stall_detail([idle], 2000.0, 1800)
    assert detail == ("no worker printed a progress line for 1900 s and no CPU use was measured, nor over 5% of a GPU "
                      "(at most 2%, worker 0 on node1) (tf_stall_timeout 1800 s)")  # fmt: skip


def test_the_stall_detail_says_nothing_of_gpus_where_none_was_measured() -> None:
    record = tf_activity.progress_record(None, "node1", [_worker(0, 1, None)], 100.0)
    assert "GPU" not in tf_activity.stall_detail([record], 200.0, 60)
    assert os.path.basename(tf_gpu_use.NVIDIA_SMI_CANDIDATES[0]) == "nvidia-smi"
