"""Collecting a run in one archive per host, and writing a run's files in one module run."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest

import tf_collect_bundle as module
import tf_run_dir
from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_bundle as bundle
from helpers import run_module

PATTERNS = ["worker.log", "exit.json", "state.json", "tf_config.json", "multiworker-complete.txt"]


def make_run(root: Path) -> Path:
    run = root / "runs" / "r1"
    for rel, text in {
        "worker-0/worker.log": "worker=0 training_complete\n",
        "worker-0/exit.json": "{}",
        "worker-0/multiworker-complete.txt": "done\n",
        "worker-0/checkpoint.h5": "not collected",
        "retry-1/worker-0/worker.log": "retry\n",
        "job/multiworker_train.py": "print()\n",
        "checkpoints/worker-0/latest": "2\n",
        "worker.log": "not in a worker directory",
    }.items():
        (run / rel).parent.mkdir(parents=True, exist_ok=True)
        (run / rel).write_text(text)
    return run


def test_only_matching_files_of_worker_directories_are_packed(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    assert bundle.run_files(str(run), PATTERNS) == [
        "retry-1/worker-0/worker.log",
        "worker-0/exit.json",
        "worker-0/multiworker-complete.txt",
        "worker-0/worker.log",
    ]


def test_pack_then_unpack_keeps_paths_and_content_and_reports_changes(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    files = bundle.run_files(str(run), PATTERNS)
    archive = bundle.bundle(str(run), files)
    assert archive == str(run / ".collect.tar.gz") and oct(os.stat(archive).st_mode & 0o777) == "0o600"
    dest = tmp_path / "controller" / "node0"
    assert sorted(bundle.unpack(archive, str(dest), files)) == files
    for rel in files:
        assert (dest / rel).read_bytes() == (run / rel).read_bytes()
    # Unpacking the same archive again changes nothing.
    assert bundle.unpack(archive, str(dest), files) == []


def test_unpack_ignores_members_it_was_not_told_about_and_unsafe_paths(tmp_path: Path) -> None:
    archive = tmp_path / "evil.tar.gz"
    payload = tmp_path / "payload"
    payload.write_text("x")
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(payload, arcname="../escape.txt")
        tar.add(payload, arcname="/abs.txt")
        tar.add(payload, arcname="worker-0/worker.log")
        tar.add(payload, arcname="worker-0/extra.txt")
    dest = tmp_path / "dest"
    written = bundle.unpack(str(archive), str(dest), ["worker-0/worker.log", "../escape.txt", "/abs.txt"])
    assert written == ["worker-0/worker.log"]
    assert not (tmp_path / "escape.txt").exists() and not (dest / "worker-0" / "extra.txt").exists()


def test_the_bundle_module_runs_as_ansible_runs_it(tmp_path: Path) -> None:
    make_run(tmp_path)
    # dest is the action's (the controller directory); the module accepts it and ignores it.
    dest = str(tmp_path / "controller")
    result = run_module(module.__file__, {"base_dir": str(tmp_path), "run_id": "r1", "patterns": PATTERNS, "dest": dest, "max_mb": 500})
    assert result["bundle"].endswith("runs/r1/.collect.tar.gz") and len(result["files"]) == 4
    assert not os.path.exists(dest)
    missing = run_module(module.__file__, {"base_dir": str(tmp_path), "run_id": "nope", "patterns": PATTERNS, "dest": dest, "max_mb": 500})
    assert missing["files"] == [] and missing["bundle"] == ""


def run_dir_args(base: Path, **more: object) -> dict[str, object]:
    return {"base_dir": str(base), "run_id": "r1", "indices": [0], **more}


def test_run_dir_writes_job_and_configs_once_reads_back_and_is_idempotent(tmp_path: Path) -> None:
    args = run_dir_args(
        tmp_path,
        job_files=[{"name": "train.py", "content": "print('{{ not a template }}')\n"}],
        configs=[{"index": 0, "content": '{"task": {"index": 0}}\n'}],
    )
    first = run_module(tf_run_dir.__file__, args)
    job = tmp_path / "runs" / "r1" / "job" / "train.py"
    assert first["changed"] is True and len(first["written"]) == 2
    assert first["read_back"] == [{"index": 0, "content": '{"task": {"index": 0}}\n'}]
    assert job.read_text() == "print('{{ not a template }}')\n"
    assert oct(job.stat().st_mode & 0o777) == "0o600"
    again = run_module(tf_run_dir.__file__, args)
    assert again["changed"] is False and again["written"] == []
    # A file changed on the host is put back, and check mode only reports it.
    job.write_text("tampered")
    checked = run_module(tf_run_dir.__file__, args, check_mode=True)
    assert checked["changed"] is True and job.read_text() == "tampered"
    fixed = run_module(tf_run_dir.__file__, args)
    assert fixed["written"] == [str(job)]


def test_run_dir_refuses_unsafe_job_names_and_configs_of_other_hosts_workers(tmp_path: Path) -> None:
    unsafe = run_module(tf_run_dir.__file__, run_dir_args(tmp_path, job_files=[{"name": "../x.py", "content": ""}]))
    assert unsafe["failed"] and "'../x.py' is not one path component" in unsafe["msg"]
    other = run_module(tf_run_dir.__file__, run_dir_args(tmp_path, configs=[{"index": 3, "content": "{}"}]))
    assert other["failed"] and "worker 3, which does not run on this host" in other["msg"]


def test_run_dir_in_check_mode_on_a_fresh_host_reports_without_writing(tmp_path: Path) -> None:
    args = run_dir_args(tmp_path / "fresh", job_files=[{"name": "train.py", "content": "x"}])
    result = run_module(tf_run_dir.__file__, args, check_mode=True)
    assert result["changed"] is True and result["written"][0].endswith("runs/r1/job/train.py")
    assert not (tmp_path / "fresh").exists()


def test_run_dir_makes_an_existing_base_and_runs_directory_private(tmp_path: Path) -> None:
    """Issue 11, point 4: an existing base directory or runs/ with a wider mode is 0700 after."""
    base = tmp_path / "base"
    (base / "runs").mkdir(parents=True)
    base.chmod(0o755)
    (base / "runs").chmod(0o777)
    result = run_module(tf_run_dir.__file__, run_dir_args(base))
    assert not result.get("failed"), result
    assert oct(base.stat().st_mode & 0o777) == "0o700"
    assert oct((base / "runs").stat().st_mode & 0o777) == "0o700"


def test_run_dir_checkpoints_are_per_run_and_under_the_run_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point 2: no checkpoint directory is shared by two runs, and ``~`` is the user's home."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    default = run_module(tf_run_dir.__file__, run_dir_args(tmp_path / "b"))
    assert default["checkpoint_dir"] == str(tmp_path / "b" / "runs" / "r1" / "checkpoints")
    shared = tmp_path / "shared"
    first = run_module(tf_run_dir.__file__, run_dir_args(tmp_path / "b", checkpoint_root=str(shared)))
    second = run_module(tf_run_dir.__file__, {**run_dir_args(tmp_path / "b", checkpoint_root=str(shared) + "/"),
                                              "run_id": "r2"})
    assert first["checkpoint_dir"] == str(shared / "r1") and second["checkpoint_dir"] == str(shared / "r2")
    assert (shared / "r1").is_dir() and oct((shared / "r1").stat().st_mode & 0o777) == "0o700"
    home = run_module(tf_run_dir.__file__, run_dir_args(tmp_path / "b", checkpoint_root="~/ckpt"))
    assert home["checkpoint_dir"] == str(tmp_path / "home" / "ckpt" / "r1")
    assert os.path.isabs(home["checkpoint_dir"])


def test_run_dir_refuses_a_relative_checkpoint_root(tmp_path: Path) -> None:
    result = run_module(tf_run_dir.__file__, run_dir_args(tmp_path, checkpoint_root="ckpt"))
    assert result["failed"] and "tf_checkpoint_dir 'ckpt' is not an absolute path" in result["msg"]
    assert not (tmp_path / "runs").exists()


def test_unpacked_results_are_private_whatever_the_umask(tmp_path: Path) -> None:
    """Point 4: logs and records on the controller are 0600 in 0700 directories."""
    run = make_run(tmp_path)
    files = bundle.run_files(str(run), PATTERNS)
    archive = bundle.bundle(str(run), files)
    dest = tmp_path / "controller" / "node0"
    old = os.umask(0o022)
    try:
        bundle.unpack(archive, str(dest), files)
    finally:
        os.umask(old)
    for rel in files:
        assert oct((dest / rel).stat().st_mode & 0o777) == "0o600", rel
        for parent in (dest / rel).relative_to(tmp_path / "controller").parents:
            if parent != Path("."):
                directory = tmp_path / "controller" / parent
                assert oct(directory.stat().st_mode & 0o777) == "0o700", directory


def test_run_dir_masks_job_env_without_a_task_no_log(tmp_path: Path) -> None:
    """Issue 24, point 19: ``job_env`` is no_log itself; a direct call of the module shows the
    secret neither in its invocation nor in a failure's message, and still writes it."""
    secret = "s3cr3t-token-value"
    # As Ansible calls a module: it returns its invocation (the arguments) with the result.
    args = run_dir_args(tmp_path, job_env={"API_TOKEN": secret}, _ansible_inject_invocation=True)
    result = run_module(tf_run_dir.__file__, args)
    assert not result.get("failed"), result
    assert secret not in json.dumps(result)
    assert result["invocation"]["module_args"]["job_env"] == {"API_TOKEN": "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"}
    env_file = tmp_path / "runs" / "r1" / "worker-0" / "job_env.json"
    assert json.loads(env_file.read_text()) == {"API_TOKEN": secret}
    failed = run_module(tf_run_dir.__file__, {**args, "run_id": "r2", "job_files": [{"name": f"{secret}/x"}]})
    assert failed["failed"] and "is not one path component" in failed["msg"] and secret not in json.dumps(failed)


def test_run_dir_under_a_task_no_log_returns_its_readbacks_whole(tmp_path: Path) -> None:
    """Under the role's task-level no_log the result is hidden as a whole; a short env value
    ("2") must not be masked inside it, where it would corrupt the TF_CONFIGs read back."""
    config = '{"cluster": {"worker": ["h0:2222", "h1:2222"]}, "task": {"index": 0}}\n'
    args = run_dir_args(tmp_path, job_env={"TF_CPP_MIN_LOG_LEVEL": "2", "API_TOKEN": "s3cr3t"},
                        configs=[{"index": 0, "content": config}], _ansible_no_log=True)
    result = run_module(tf_run_dir.__file__, args)
    assert not result.get("failed"), result
    assert result["read_back"] == [{"index": 0, "content": config}]
    assert "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER" not in json.dumps(result)
    assert "********" not in json.dumps(result)


# -- issue 24, point 6: logs obey tf_collect_max_mb; the controller streams --------------

def numbered_log(path: Path, lines: int) -> list[bytes]:
    """A log of ``lines`` numbered lines of about 100 bytes each; its lines."""
    content = [f"{i:08d} epoch=1/1 loss=0.5 {'x' * 70}\n".encode() for i in range(lines)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(content))
    return content


def test_a_log_over_the_cap_is_sent_as_its_head_and_tail_with_a_marker(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r1"
    original = numbered_log(run / "worker-0" / "worker.log", 40_000)  # about 3.8 MB
    (run / "worker-0" / "exit.json").write_text('{"returncode": 0}')
    size = (run / "worker-0" / "worker.log").stat().st_size
    result = run_module(module.__file__, {"base_dir": str(tmp_path), "run_id": "r1", "patterns": PATTERNS,
                                          "max_mb": 1, "dest": str(tmp_path / "c")})
    assert result["files"] == ["worker-0/exit.json", "worker-0/worker.log"] and result["left_out"] == []
    [cut] = result["truncated"]
    assert cut["path"] == "worker-0/worker.log" and cut["bytes"] == size
    assert cut["head_bytes"] + cut["tail_bytes"] + cut["cut_bytes"] == size
    # Everything this host sends stays within the cap, the record whole.
    with tarfile.open(result["bundle"]) as archive:
        sizes = {m.name: m.size for m in archive.getmembers()}
    assert sizes["worker-0/exit.json"] == len('{"returncode": 0}') and sizes["worker-0/worker.log"] == cut["sent"]
    assert sum(sizes.values()) <= 1024 * 1024
    dest = tmp_path / "controller"
    bundle.unpack(result["bundle"], str(dest), result["files"])
    sent = (dest / "worker-0" / "worker.log").read_bytes().splitlines(keepends=True)
    marker = [i for i, line in enumerate(sent) if line.startswith(b"[tf-runbook collect:")]
    assert len(marker) == 1, "exactly one marker line"
    head, tail = sent[: marker[0]], sent[marker[0] + 1:]
    assert head[-1] == b"\n"  # the marker stands on a line of its own
    head = head[:-1]
    # Cut at line ends: the head is the log's first whole lines, the tail its last ones.
    assert head == original[: len(head)] and tail == original[-len(tail):]
    assert len(head) > 4000 and len(tail) > 4000
    assert f"{cut['cut_bytes']} bytes of this log cut here".encode() in sent[marker[0]]
    assert b"tf_collect_max_mb=1" in sent[marker[0]]


def test_logs_share_the_cap_fairly_and_a_record_larger_than_the_cap_is_left_out(tmp_path: Path) -> None:
    run = tmp_path / "run"
    numbered_log(run / "worker-0" / "worker.log", 300)  # 30 KB: whole
    numbered_log(run / "worker-1" / "worker.log", 20_000)  # 1.9 MB: cut
    (run / "worker-1" / "exit.json").write_bytes(b" " * 2 * 1024 * 1024)  # a record larger than the cap
    first = bundle.run_files(str(run), ["worker.log", "exit.json"])
    kept, left_out, cuts = bundle.within_cap(str(run), first, [], 1)
    assert kept == ["worker-0/worker.log", "worker-1/worker.log"]
    assert left_out == [{"path": "worker-1/exit.json", "bytes": 2 * 1024 * 1024}]
    assert list(cuts) == ["worker-1/worker.log"]
    whole = (run / "worker-0" / "worker.log").stat().st_size
    assert whole + cuts["worker-1/worker.log"].sent <= 1024 * 1024
    # The cut log got what the small one left (the record left out takes nothing).
    assert cuts["worker-1/worker.log"].sent > 1024 * 1024 - whole - 64 * 1024


def test_a_log_under_the_cap_is_sent_whole(tmp_path: Path) -> None:
    run = tmp_path / "run"
    numbered_log(run / "worker-0" / "worker.log", 5000)
    kept, left_out, cuts = bundle.within_cap(str(run), ["worker-0/worker.log"], [], 1)
    assert kept == ["worker-0/worker.log"] and left_out == [] and cuts == {}


def test_packing_and_unpacking_a_large_log_hold_little_of_it_in_memory(tmp_path: Path) -> None:
    """A 48 MB log (compressible, so that the test is quick): the host packs it cut to 4 MB,
    and the controller unpacks a 48 MB member, each with far less than the log in memory."""
    import tracemalloc

    run = tmp_path / "runs" / "r1"
    log = run / "worker-0" / "worker.log"
    log.parent.mkdir(parents=True)
    line = b"epoch=1/1 loss=0.5 " + b"y" * 80 + b"\n"
    with log.open("wb") as handle:
        for _ in range(48):
            handle.write(line * (1024 * 1024 // len(line) + 1))
    files = ["worker-0/worker.log"]
    tracemalloc.start()
    try:
        kept, _left_out, cuts = bundle.within_cap(str(run), files, [], 4)
        archive = bundle.bundle(str(run), kept, cuts)
        _size, packing_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        whole = bundle.bundle(str(run), kept)  # uncut: a 48 MB member for the controller
        tracemalloc.reset_peak()
        changed = bundle.unpack(whole, str(tmp_path / "controller"), files)
        _size, unpacking_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert archive == whole  # the same path, packed again
    assert changed == files and (tmp_path / "controller" / "worker-0" / "worker.log").stat().st_size == log.stat().st_size
    assert packing_peak < 8 * 1024 * 1024, packing_peak
    assert unpacking_peak < 8 * 1024 * 1024, unpacking_peak
    # Unpacking again compares in chunks too, and changes nothing.
    assert bundle.unpack(whole, str(tmp_path / "controller"), files) == []


def test_check_mode_says_which_logs_would_be_cut_and_packs_nothing(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r1"
    numbered_log(run / "worker-0" / "worker.log", 20_000)  # 1.9 MB
    result = run_module(module.__file__, {"base_dir": str(tmp_path), "run_id": "r1", "patterns": PATTERNS,
                                          "max_mb": 1, "dest": str(tmp_path / "c")}, check_mode=True)
    assert result["bundle"] == "" and not (run / ".collect.tar.gz").exists()
    assert [cut["path"] for cut in result["truncated"]] == ["worker-0/worker.log"]
    assert result["truncated"][0]["sent"] <= 1024 * 1024


def test_with_no_room_the_records_and_short_logs_still_come_and_long_logs_keep_their_ends(tmp_path: Path) -> None:
    """``tf_collect_max_mb: 0``: the supervisor's records and short logs come whole (the
    verdict needs them), a long log comes as 64 KiB of head and tail, artifacts stay."""
    run = tmp_path / "run"
    numbered_log(run / "worker-0" / "worker.log", 100)
    numbered_log(run / "worker-1" / "worker.log", 20_000)
    (run / "worker-0" / "exit.json").write_text('{"returncode": 0}')
    (run / "worker-0" / "model.keras").write_bytes(b"m" * 10)
    first = bundle.run_files(str(run), ["worker.log", "exit.json"])
    kept, left_out, cuts = bundle.within_cap(str(run), first, ["worker-0/model.keras"], 0)
    assert kept == ["worker-0/exit.json", "worker-0/worker.log", "worker-1/worker.log"]
    assert left_out == [{"path": "worker-0/model.keras", "bytes": 10}]
    assert list(cuts) == ["worker-1/worker.log"] and 60 * 1024 < cuts["worker-1/worker.log"].sent <= 64 * 1024


def test_the_collect_and_the_wait_pack_the_same_bundle_and_receive_unpacks_it(tmp_path: Path) -> None:
    """One implementation (module_utils/tf_bundle.py): tf_collect_bundle and the wait's last
    status run of a healthy host report the same files, cuts and left-out artifacts."""
    run = make_run(tmp_path)
    (run / "worker-0" / "exit.json").write_text('{"returncode": 0}')
    (run / "retry-1" / "worker-0" / "exit.json").write_text('{"returncode": 0}')
    (run / "worker-0" / "model.bin").write_bytes(b"m" * (2 * 1024 * 1024))
    options = {"patterns": PATTERNS, "artifacts": ["model.bin"], "max_mb": 1}
    collected = run_module(module.__file__, {"base_dir": str(tmp_path), "run_id": "r1", "dest": "/unused", **options})
    waited = run_module(
        Path(module.__file__).with_name("tf_worker_wait.py"),
        {"workers": [{"index": 0, "dir": str(run / "worker-0")}], "run_dir": str(run), "collect": options},
    )["bundle"]
    assert waited == {name: collected[name] for name in ("run_dir", "files", "left_out", "truncated", "bundle")}
    assert waited["left_out"] == [{"path": "worker-0/model.bin", "bytes": 2 * 1024 * 1024}]
    fetched: list[str] = []

    def fetch(remote: str, local: str) -> None:
        fetched.append(remote)
        Path(local).write_bytes(Path(remote).read_bytes())

    dest = tmp_path / "controller" / "host"
    assert sorted(bundle.receive(fetch, waited, str(dest))) == waited["files"]
    assert fetched == [waited["bundle"]]
    assert bundle.receive(fetch, waited, str(dest)) == []
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()) == waited["files"]


def test_run_dir_names_a_runs_directory_it_cannot_make_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One of another user (root's, say): a clear refusal that names it, not a traceback."""
    from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_run_files

    base = tmp_path / "base"
    (base / "runs").mkdir(parents=True)
    (base / "runs").chmod(0o755)
    real_chmod = os.chmod

    def chmod(path: str, mode: int) -> None:
        if str(path) == str(base / "runs"):
            raise PermissionError(1, "Operation not permitted")
        real_chmod(path, mode)

    monkeypatch.setattr(tf_run_files.os, "chmod", chmod)
    params = {**run_dir_args(base), "attempt": 0, "checkpoint_root": "", "job_files": [], "job_archive": "",
              "job_env": {}, "visible_devices": {}, "pythonpath": False, "configs": [], "interpreter": ""}
    with pytest.raises(tf_run_files.RunFilesError, match=f"cannot make {base / 'runs'} private \\(mode 700\\): "):
        tf_run_files.prepare_run(params, check=False, want_diff=False)
    assert not (base / "runs" / "r1").exists()


def exit_record(path: Path, timed_lines: int) -> None:
    """An exit.json as the supervisor writes it, with ``timed_lines`` timed contract lines
    (it keeps up to 20000): a record, sent whole or not at all, of about 60 bytes a line."""
    timed = [[1_796_000_000.0 + i, f"worker=0 epoch={i} loss=0.{i:06d}"] for i in range(timed_lines)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"returncode": 143, "stopped_by": "runbook", "timed_lines": timed}))


def busy_host(run: Path, logs_per_worker: int) -> list[str]:
    """Two workers over three attempts, each with ``logs_per_worker`` logs of different
    sizes (worker.log, stacks.txt, job.err: 0.1 to 2 MB) and its records: an exit.json of
    600 to 3000 timed lines, a state.json, a tf_config.json. The patterns that collect them."""
    names = ["worker.log", "stacks.txt", "job.err"][:logs_per_worker]
    for attempt, prefix in enumerate(("", "retry-1/", "retry-2/")):
        for index in (0, 1):
            wdir = run / f"{prefix}worker-{index}"
            for position, name in enumerate(names):
                numbered_log(wdir / name, 1000 + 6000 * ((attempt + index + position) % 4))
            exit_record(wdir / "exit.json", 600 * (1 + (attempt + 2 * index) % 5))
            (wdir / "state.json").write_text(json.dumps({"supervisor_pid": 1, "launch": {"attempt": attempt}}))
            (wdir / "tf_config.json").write_text(json.dumps({"cluster": {"worker": ["a:1", "b:1"]}}))
    return [*names, "exit.json", "state.json", "tf_config.json"]


@pytest.mark.parametrize("logs_per_worker", [1, 2, 3])
@pytest.mark.parametrize("max_mb", [1, 2])
def test_what_a_host_sends_stays_within_the_cap_records_included(
    tmp_path: Path, logs_per_worker: int, max_mb: int
) -> None:
    """The reviewer's report: with 2 or 3 logs per host, 1.18 MB and 1.45 MB were sent at a
    1 MB cap. Everything sent (records whole, logs whole or cut) sums to the cap at most;
    the logs share what the records leave, the cut ones equally."""
    run = tmp_path / "runs" / "r1"
    patterns = busy_host(run, logs_per_worker)
    packed = bundle.pack_run(str(run), patterns, [], max_mb)
    cap = max_mb * 1024 * 1024
    cut = {entry["path"]: entry for entry in packed["truncated"]}
    sizes = {rel: (run / rel).stat().st_size for rel in packed["files"]}
    sent = {rel: cut[rel]["sent"] if rel in cut else size for rel, size in sizes.items()}
    with tarfile.open(packed["bundle"]) as archive:
        assert {m.name: m.size for m in archive.getmembers()} == sent  # what the bundle holds
    assert sum(sent.values()) <= cap, (sum(sent.values()) / 1024 / 1024, packed["left_out"])
    # Nothing matched was dropped silently: each file is sent (whole or cut) or listed.
    left_out = {entry["path"] for entry in packed["left_out"]}
    assert sorted([*sent, *left_out]) == bundle.run_files(str(run), patterns)
    records = {rel: n for rel, n in sent.items() if not bundle.cuttable(rel)}
    logs = {rel: n for rel, n in sent.items() if bundle.cuttable(rel)}
    # Each cut log had an equal share of what the records and the whole logs left, less at
    # most a line at each end of the cut; a whole log fitted in that share.
    room = cap - sum(records.values()) - sum(n for rel, n in logs.items() if rel not in cut)
    if cut:
        share = room // len(cut)
        assert all(abs(c["sent"] - share) <= 512 for c in cut.values()), (share, cut)
        assert all(n <= share for rel, n in logs.items() if rel not in cut), share
    # A record left out is one that did not fit in what the smaller ones left.
    for entry in packed["left_out"]:
        if not bundle.cuttable(entry["path"]):
            smaller = sum(n for n in records.values() if n <= entry["bytes"])
            assert smaller + entry["bytes"] > cap, entry


def test_records_that_do_not_fit_together_are_left_out_largest_first_and_the_logs_share_the_rest(
    tmp_path: Path,
) -> None:
    """Three exit.json of 0.40, 0.45 and 0.50 MB at a 1 MB cap: the two smaller fit (0.85 MB),
    the largest is left out, listed; the two logs share the 0.15 MB left, each cut to half."""
    run = tmp_path / "run"
    mb = 1024 * 1024
    for index, tenths in enumerate((40, 45, 50)):
        (run / f"worker-{index}").mkdir(parents=True)
        (run / f"worker-{index}" / "exit.json").write_bytes(b" " * (tenths * mb // 100))
    numbered_log(run / "worker-0" / "worker.log", 5000)  # 0.5 MB
    numbered_log(run / "worker-1" / "worker.log", 6000)
    first = bundle.run_files(str(run), ["worker.log", "exit.json"])
    kept, left_out, cuts = bundle.within_cap(str(run), first, [], 1)
    assert left_out == [{"path": "worker-2/exit.json", "bytes": 50 * mb // 100}]
    assert kept == ["worker-0/exit.json", "worker-0/worker.log", "worker-1/exit.json", "worker-1/worker.log"]
    room = mb - (40 + 45) * mb // 100
    assert list(cuts) == ["worker-0/worker.log", "worker-1/worker.log"]
    assert all(room // 2 - 256 <= cut.sent <= room // 2 + 256 for cut in cuts.values()), (room, cuts)
    assert sum(cut.sent for cut in cuts.values()) + (40 + 45) * mb // 100 <= mb


def test_a_log_whose_share_is_too_small_to_cut_is_left_out(tmp_path: Path) -> None:
    """The records leave less than MIN_SHARE for each log: a cut would be little more than
    its marker line, so the log is left out (listed) and the records come."""
    run = tmp_path / "run"
    (run / "worker-0").mkdir(parents=True)
    (run / "worker-0" / "exit.json").write_bytes(b" " * (1024 * 1024 - 3 * 1024))
    numbered_log(run / "worker-0" / "worker.log", 100)  # 9.7 KB, over the 3 KiB left
    kept, left_out, cuts = bundle.within_cap(str(run), ["worker-0/exit.json", "worker-0/worker.log"], [], 1)
    assert kept == ["worker-0/exit.json"] and cuts == {}
    assert left_out == [{"path": "worker-0/worker.log", "bytes": (run / "worker-0" / "worker.log").stat().st_size}]
