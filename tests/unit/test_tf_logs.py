"""logs.yml's quiet mode (issue 39): TensorFlow's C++ log lines are left out of what it
shows (tf_logs.quiet_tail, the module's log_filter) and counted (the action's header)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_status_lines
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_logs import is_cpp_log, quiet_tail
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_worker_records import worker_state


@pytest.mark.parametrize(
    "line",
    [
        "I0000 00:00:1733512345.123456   12345 cuda_dnn.cc:8310] Unable to register cuDNN factory",
        "W0000 00:00:1733512345.123456   12345 gpu_device.cc:2344] Cannot dlopen some GPU libraries.",
        "E0000 00:00:1733512345.123456   12345 cuda_blas.cc:1418] Unable to register cuBLAS factory",
        "I1206 09:41:16.123456  4242 grpc_server_lib.cc:467] Started server with target: grpc://localhost:2222",
        "2025-01-14 10:02:11.123456: I tensorflow/core/util/port.cc:153] oneDNN custom operations are on.",
        "2025-01-14 10:02:11: W tensorflow/core/framework/dataset.cc:959] Input of GeneratorDatasetOp",
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
        "  I0000 00:00:1733512345.123456   12345 file.cc:12] indented by a pipe",
    ],
)
def test_tensorflow_cpp_log_lines_are_recognised(line: str) -> None:
    assert is_cpp_log(line)


@pytest.mark.parametrize(
    "line",
    [
        "worker=0 epoch=2/6 loss=0.5",
        "Epoch 2/6",
        "5/5 - 0s - loss: 0.6689 - accuracy: 0.5688",
        "WARNING:tensorflow:From job.py:3: the job's own Python warning",
        "INFO:tensorflow:Using MirroredStrategy",
        "Traceback (most recent call last):",
        "I said 09:41:16 hello",
    ],
)
def test_the_jobs_own_lines_are_kept(line: str) -> None:
    assert not is_cpp_log(line)


def test_quiet_tail_keeps_the_last_lines_of_the_job_and_counts_what_it_hid() -> None:
    cpp = "I0000 00:00:1733512345.1 1 a.cc:1] x"
    lines = ["old", cpp, "a", cpp, cpp, "b", cpp]
    assert quiet_tail(lines, 2) == (["a", "b"], 3)
    assert quiet_tail(lines, 10) == (["old", "a", "b"], 4)
    assert quiet_tail([], 3) == ([], 0)


def test_the_module_filters_the_tail_it_returns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "state.json").write_text(json.dumps({"pid": 4321, "pgid": 4321, "supervisor_pid": os.getpid()}))
    cpp = ["I0000 00:00:1733512345.123456   12345 cuda_dnn.cc:8310] noise"] * 30
    (tmp_path / "worker.log").write_text("\n".join(["first", "second", *cpp, "third"]) + "\n")
    entry = {"index": 0, "dir": str(tmp_path)}
    quiet = worker_state(entry, re.compile("epoch="), 3, log_filter=True)
    assert (quiet["log_tail"], quiet["log_hidden"]) == (["first", "second", "third"], 30)
    plain = worker_state(entry, re.compile("epoch="), 3)
    assert (plain["log_tail"], plain["log_hidden"]) == ([cpp[0], cpp[0], "third"], 0)


def test_the_header_says_how_many_lines_it_hid() -> None:
    result = {"workers": [{"index": 1, "state": "running", "log_tail": ["a"], "log_hidden": 12}]}
    assert tf_status_lines.log_lines("h", result, None) == [
        "[1 h] (running; 1 last line(s) of its log; 12 TensorFlow C++ log line(s) hidden (-e tf_logs_filter=false shows them))",
        "[1 h] a",
    ]
