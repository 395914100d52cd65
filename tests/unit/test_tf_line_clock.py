"""The supervisor times the metrics contract's lines for the run report's timeline."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tf_supervisor import LineClock


def test_line_clock_times_contract_lines_once_and_waits_for_a_line_end(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    log.write_bytes(b"2025 I tensorflow noise\nworker=0 cluster_workers=2 replicas=2\nworker=0 epo")
    clock = LineClock(log)
    clock.poll(now=10.0)
    assert clock.lines == [[10.0, "worker=0 cluster_workers=2 replicas=2"]]
    with open(log, "ab") as handle:
        handle.write(b"ch=1 loss=0.5\nEpoch 2/3\n  worker=0 epoch=2 loss=0.4\n")
    clock.poll(now=12.5)
    clock.poll(now=13.0)  # nothing new: nothing timed twice
    assert clock.lines[1:] == [
        [12.5, "worker=0 epoch=1 loss=0.5"], [12.5, "Epoch 2/3"], [12.5, "worker=0 epoch=2 loss=0.4"],
    ]
    with open(log, "ab") as handle:
        handle.write(b"worker=0 training_complete")  # no newline: timed at the final read
    clock.poll(now=14.0)
    assert len(clock.lines) == 4
    clock.poll(now=15.0, final=True)
    assert clock.lines[-1] == [15.0, "worker=0 training_complete"]


def test_line_clock_keeps_at_most_its_limit_and_survives_a_missing_log(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    clock = LineClock(log, limit=2)
    clock.poll(now=1.0)
    assert clock.lines == []
    log.write_text("".join(f"worker=1 epoch={e} loss=1\n" for e in range(1, 6)))
    clock.poll(now=2.0)
    assert [line for _, line in clock.lines] == ["worker=1 epoch=1 loss=1", "worker=1 epoch=2 loss=1"]


def test_exit_json_holds_the_timed_contract_lines(supervisor_path: Path, tmp_path: Path) -> None:
    wdir = tmp_path / "worker-0"
    wdir.mkdir()
    (wdir / "tf_config.json").write_text(json.dumps({"cluster": {"worker": ["127.0.0.1:2222"]},
                                                      "task": {"type": "worker", "index": 0}}))
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import time
        print("worker=0 cluster_workers=1 replicas=1 global_batch=16", flush=True)
        time.sleep(0.8)
        print("noise", flush=True)
        print("worker=0 epoch=1 loss=0.5", flush=True)
        print("worker=0 training_complete", flush=True)
    """))
    proc = subprocess.run([sys.executable, str(supervisor_path), "--worker-dir", str(wdir), "--python",
                           sys.executable, "--script", str(script)], timeout=60, check=False)
    assert proc.returncode == 0
    record = json.loads((wdir / "exit.json").read_text())
    lines = [line for _, line in record["timed_lines"]]
    assert lines == ["worker=0 cluster_workers=1 replicas=1 global_batch=16", "worker=0 epoch=1 loss=0.5",
                     "worker=0 training_complete"]
    times = [t for t, _ in record["timed_lines"]]
    assert record["started_at"] <= times[0] <= times[1] <= record["finished_at"]
    assert times[1] - times[0] >= 0.5, times  # the job slept between its header and epoch 1


def test_line_clock_times_keras_headers_and_the_last_state_of_a_progress_bar(tmp_path: Path) -> None:
    """Keras' verbose=1 redraws its bar with carriage returns: the line's last state is what
    is timed; a plain TensorFlow log line is not."""
    log = tmp_path / "worker.log"
    log.write_bytes(b"Epoch 1/2\n1/4 [==>...] - ETA: 3s\r4/4 [=====] - 1s 5ms/step - loss: 0.5\nI0000 tf noise\n")
    clock = LineClock(log)
    clock.poll(now=3.0)
    assert clock.lines == [[3.0, "Epoch 1/2"], [3.0, "4/4 [=====] - 1s 5ms/step - loss: 0.5"]]


def test_the_log_is_read_in_bounded_chunks(tmp_path: Path) -> None:
    """Issue 38, point 12: a job that writes faster than a poll is read a chunk at a time,
    never whole into memory."""
    from tf_supervisor import read_from

    log = tmp_path / "worker.log"
    log.write_bytes(b"x" * 10 + b"\n" + b"y" * 5)
    seen: list[bytes] = []
    assert read_from(log, 3, seen.append, chunk=4) == 16
    assert [len(c) for c in seen] == [4, 4, 4, 1] and b"".join(seen) == b"x" * 7 + b"\n" + b"y" * 5


def test_the_startup_pattern_is_found_in_a_huge_increment(tmp_path: Path) -> None:
    from tf_supervisor import READ_CHUNK_BYTES, LogWatcher

    log = tmp_path / "worker.log"
    # The pattern straddles a chunk's end, after more than two chunks of noise.
    noise = b"n" * (2 * READ_CHUNK_BYTES + READ_CHUNK_BYTES - 5)
    log.write_bytes(noise + b"cluster_workers=2\n")
    watcher = LogWatcher(log, "cluster_workers=")
    assert watcher.poll() is True
    assert watcher.offset == log.stat().st_size and len(watcher.tail) <= 4096
