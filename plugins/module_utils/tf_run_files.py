# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A run's files on a worker host: its private directories, the job, each worker's
TF_CONFIG and environment, written and read back (standard library only).

Shared by module tf_run_dir (the run's directories alone: the managed virtualenv's and a
resume's step before the launch) and module tf_worker_launch, which writes the attempt's
files and starts its workers in the same module run (issue 26)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tarfile
import tempfile
from typing import Any, Callable

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import (
    CHECKPOINT_OWNER_FILE,
    CHECKPOINTS_DIR,
    CONFIG_FILE,
    JOB_DIR,
    JOB_ENV_FILE,
    LAUNCH_RECORDS,
    RUN_ID_RULE,
    RUNS_DIR,
    attempt_dir_of,
    cluster_checksum,
    cluster_tasks,
    read_json,
    run_dir_of,
    run_id_is_safe,
    task_position,
    worker_dir_name,
    write_json_atomic,
)


def job_env_files(
    worker_dirs: dict[str, str], env: dict[str, object], devices: dict[str, object], job_dir: str, pythonpath: bool
) -> list[dict[str, object]]:
    """Each worker's ``job_env.json`` content: the host's environment, its own GPUs and the
    job directory on PYTHONPATH. Nothing when there is nothing to hand over."""
    if not env and not pythonpath and not any(v is not None for v in devices.values()):
        return []
    files = []
    for index in sorted(worker_dirs, key=int):
        values = {str(name): str(value) for name, value in env.items()}
        if devices.get(index) is not None:
            values["CUDA_VISIBLE_DEVICES"] = str(devices[index])
        if pythonpath:
            values["PYTHONPATH"] = os.pathsep.join(p for p in (job_dir, values.get("PYTHONPATH", "")) if p)
        files.append({"index": index, "content": json.dumps(values, sort_keys=True) + "\n"})
    return files


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root + os.sep)


# tarfile's own guard (Python 3.12+, backported to 3.11.4 and 3.10.12); None on an older
# host Python, where the real-path check below stands in for it.
DATA_FILTER: Callable[[tarfile.TarInfo, str], tarfile.TarInfo] | None = getattr(tarfile, "data_filter", None)


def archive_problem(member: tarfile.TarInfo, root: str, symlinks: set[str]) -> str:
    """Why ``member`` may not be unpacked into ``root`` ('' when it may), read from the names
    alone: an absolute or escaping name, a member below a symlink of the archive, a link
    whose target is absolute, leaves ``root`` or passes through a symlink of the archive,
    anything but a file, directory or symlink (devices, fifos, hard links)."""
    name = os.path.normpath(member.name)
    target = os.path.normpath(os.path.join(root, name))
    if os.path.isabs(member.name) or not _inside(root, target) or target == root:
        return f"archive member {member.name!r} is outside the job directory"
    parents = name.split(os.sep)[:-1]
    if any(os.sep.join(parents[: i + 1]) in symlinks for i in range(len(parents))):
        return f"archive member {member.name!r} lies below a symlink of the archive"
    if member.issym():
        pointed = os.path.normpath(os.path.join(os.path.dirname(target), member.linkname))
        if os.path.isabs(member.linkname) or not _inside(root, pointed):
            return f"archive symlink {member.name!r} points outside the job directory"
        steps = os.path.join(os.path.dirname(name), member.linkname).split(os.sep)
        if any(os.path.normpath(os.sep.join(steps[: i + 1])) in symlinks for i in range(len(steps))):
            return f"archive symlink {member.name!r} points through another symlink of the archive"
        return ""
    if not (member.isfile() or member.isdir()):
        return f"archive member {member.name!r} is not a file, directory or symlink"
    return ""


def real_path_problem(member: tarfile.TarInfo, root: str) -> str:
    """Why writing ``member`` now would leave ``root`` ('' when it would not), read from the
    disk as it is at this moment: the member's directory must be reached through no symlink
    at all, and a symlink must resolve inside ``root``. The stand-in for tarfile's ``data``
    filter, and stricter than it."""
    name = os.path.normpath(member.name)
    parent = os.path.normpath(os.path.join(root, os.path.dirname(name)))
    if os.path.realpath(parent) != parent:
        return f"archive member {member.name!r} would be written through a symlink on the host"
    if member.issym():
        pointed = os.path.realpath(os.path.join(parent, member.linkname))
        if not _inside(root, pointed):
            return f"archive symlink {member.name!r} points outside the job directory, to {pointed}"
    return ""


def guard_member(member: tarfile.TarInfo, root: str) -> None:
    """Raise ValueError when ``member``, written now, would land or point outside ``root``:
    tarfile's ``data`` filter where this Python has it, then the real-path check."""
    if DATA_FILTER is not None:
        try:
            DATA_FILTER(member, root)
        except tarfile.FilterError as exc:
            raise ValueError(f"archive member {member.name!r} refused: {exc}") from None
    problem = real_path_problem(member, root)
    if problem:
        raise ValueError(problem)


def unpack_job_archive(archive_path: str, job_dir: str, check: bool) -> list[str]:
    """Unpack the project archive into ``job_dir``, writing only what differs; refuse any
    member that would land (or point) outside it, checked by name for the whole archive
    first, then on the disk before each member is written."""
    root = os.path.realpath(job_dir) if os.path.isdir(job_dir) else os.path.abspath(job_dir)
    written = []
    with tarfile.open(archive_path, "r:gz") as archive:
        members = archive.getmembers()
        symlinks = {os.path.normpath(m.name) for m in members if m.issym()}
        for member in members:
            problem = archive_problem(member, root, symlinks)
            if problem:
                raise ValueError(problem)
        for member in members:
            target = os.path.join(root, os.path.normpath(member.name))
            guard_member(member, root)
            if member.isdir():
                if not os.path.isdir(target):
                    written.append(target)
                    if not check:
                        os.makedirs(target, mode=0o700, exist_ok=True)
            elif member.issym():
                if not (os.path.islink(target) and os.readlink(target) == member.linkname):
                    written.append(target)
                    if not check:
                        if os.path.lexists(target):
                            os.unlink(target)
                        os.symlink(member.linkname, target)
            else:
                source = archive.extractfile(member)
                content = source.read() if source is not None else b""
                if check and not os.path.isdir(os.path.dirname(target)):
                    written.append(target)
                elif write_bytes_if_changed(target, content, check, 0o700 if member.mode & 0o100 else 0o600):
                    written.append(target)
    return written


def write_bytes_if_changed(path: str, data: bytes, check: bool, mode: int) -> bool:
    """Write ``data`` atomically when the file is missing or differs; True if it did."""
    try:
        with open(path, "rb") as handle:
            if handle.read() == data and (os.stat(path).st_mode & 0o7777) == mode:
                return False
    except FileNotFoundError:
        pass
    if check:
        return True
    fd, pending = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(pending, mode)
        os.replace(pending, path)
    except BaseException:
        if os.path.exists(pending):
            os.unlink(pending)
        raise
    return True


def checkpoint_dir_of(run_dir: str, run_id: str, root: str) -> str:
    """The run's checkpoint directory: under the run, or ``<root>/<run_id>`` when the user
    set a root (``~`` already expanded for this user: the option's type is path). Raises
    ValueError for a relative root, which would otherwise land in each worker's working
    directory."""
    if not root:
        return os.path.join(run_dir, CHECKPOINTS_DIR)
    if not os.path.isabs(root):
        raise ValueError(f"tf_checkpoint_dir {root!r} is not an absolute path (nor starts with ~)")
    return os.path.join(os.path.normpath(root), run_id)


def configs_checksum(configs: list[dict[str, Any]]) -> str:
    """The checksum of the cluster every TF_CONFIG of this host names (they all name the
    same one); empty when there is none to read."""
    for entry in configs:
        content = entry.get("content")
        try:
            data = json.loads(content) if isinstance(content, str) else content
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("cluster"), dict):
            return cluster_checksum(data["cluster"])
    return ""


def own_directory_problem(path: str) -> str | None:
    """Why ``path`` (``<tf_checkpoint_dir>/<run_id>``, on a root other users may write to)
    may not be this run's directory: a symbolic link (another user's, planted to lead the
    run's files elsewhere) or a directory of another user. None when it is this user's
    own directory or does not exist yet."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return f"checkpoint directory {path} is a symbolic link: remove it, or pick another tf_checkpoint_dir"
    if not stat.S_ISDIR(info.st_mode):
        return f"checkpoint directory {path} is not a directory"
    if info.st_uid != os.geteuid():
        return (f"checkpoint directory {path} belongs to uid {info.st_uid}, not to this user (uid {os.geteuid()}): "
                "pick another tf_run_id or tf_checkpoint_dir")
    return None


def make_own_directory(path: str, check: bool) -> bool:
    """Make ``path`` (0700) with mkdir, its parents as needed; judge it (again) after;
    True when it was made."""
    problem = own_directory_problem(path)
    if problem:
        raise RunFilesError(problem)
    if os.path.lexists(path):
        return False
    if check:
        return True
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise RunFilesError(f"cannot create {path}: {exc}") from None
    problem = own_directory_problem(path)
    if problem:
        raise RunFilesError(problem)
    return True


def checkpoint_owner_problem(checkpoint_dir: str, run_id: str, checksum: str) -> str | None:
    """On a shared ``tf_checkpoint_dir``, ``<root>/<run_id>`` records the run and cluster
    that own it: a run id reused by another cluster (another controller, another
    inventory) would resume from, and overwrite, backups not its own."""
    owner = read_json(os.path.join(checkpoint_dir, CHECKPOINT_OWNER_FILE))
    if owner is None or not checksum:
        return None
    if owner.get("run_id") != run_id or owner.get("cluster_checksum") != checksum:
        return (
            f"checkpoint directory {checkpoint_dir} belongs to run {owner.get('run_id')!r} of cluster "
            f"{str(owner.get('cluster_checksum'))[:12]}, not to run {run_id!r} of this cluster ({checksum[:12]}); "
            "its backups are not this run's: pick another tf_run_id or tf_checkpoint_dir"
        )
    return None


def write_if_changed(path: str, content: str, check: bool, mode: int = 0o600) -> bool:
    """Write ``content`` atomically when the file is missing or differs; True if it did."""
    return write_bytes_if_changed(path, content.encode("utf-8"), check, mode)


def write_files(
    job_dir: str, worker_dirs: dict[str, str], job_files: list[dict[str, Any]], configs: list[dict[str, Any]], check: bool
) -> tuple[list[str], list[dict[str, Any]]]:
    """Write the job files and TF_CONFIGs; read the TF_CONFIGs back from disk."""
    targets = []
    for entry in job_files:
        name = str(entry.get("name", ""))
        if not name or "/" in name or name in {".", ".."}:
            raise ValueError(f"job file name {name!r} is not one path component")
        targets.append((os.path.join(job_dir, name), str(entry.get("content", "")), None))
    for entry in configs:
        index = str(int(entry["index"]))
        if index not in worker_dirs:
            raise ValueError(f"TF_CONFIG for worker {index}, which does not run on this host")
        targets.append((os.path.join(worker_dirs[index], CONFIG_FILE), str(entry["content"]), int(index)))
    written = []
    for path, content, _index in targets:
        if not os.path.isdir(os.path.dirname(path)):
            # Only in check mode on a fresh host: the directory would have been made.
            written.append(path)
        elif write_if_changed(path, content, check):
            written.append(path)
    read_back = []
    for path, _content, index in targets:
        if index is not None and os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                read_back.append({"index": index, "content": handle.read()})
    return written, read_back


def sha256_text(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def describe_layout(
    interpreter: str, dirs: list[str], files: list[tuple[str, str]], configs: list[tuple[str, str]]
) -> str:
    """One line per item of a run on a host: the interpreter, the cluster list once, each
    directory, each job file ``(path, sha256)`` and each TF_CONFIG ``(path, content)``
    with the worker's index and port. Used for both sides of the diff."""
    lines = [f"interpreter: {interpreter}"] if interpreter else []
    parsed = []
    for path, content in configs:
        try:
            data = json.loads(content)
            workers = [str(w) for w in data["cluster"]["worker"]]
            index = int(data["task"]["index"])
        except (ValueError, KeyError, TypeError):
            parsed.append((path, None, -1, "unreadable TF_CONFIG"))
            continue
        endpoint = workers[index] if 0 <= index < len(workers) else "?"
        parsed.append((path, workers, index, f"index {index}, port {endpoint.rpartition(':')[2]}"))
    clusters = [workers for _path, workers, _index, _what in parsed if workers is not None]
    shared = clusters[0] if clusters and all(c == clusters[0] for c in clusters) else None
    if shared is not None:
        lines.append(f"TF_CONFIG cluster ({len(shared)} workers): {', '.join(shared)}")
    lines += [f"directory {path}/ (mode 0700)" for path in dirs]
    lines += [f"file {path} sha256 {digest}" for path, digest in files]
    for path, workers, _index, what in parsed:
        own = "" if shared is not None or workers is None else f", cluster {', '.join(workers)}"
        lines.append(f"TF_CONFIG {path}: {what}{own}")
    return "\n".join(lines) + "\n" if lines else ""


def layout_diff(
    interpreter: str, run_dir: str, dirs: list[str], job_dir: str, worker_dirs: dict[str, str],
    job_files: list[dict[str, Any]], configs: list[dict[str, Any]],
) -> dict[str, str]:
    """The diff of this host's run: what exists on disk now against what is wanted."""
    wanted_files = [(os.path.join(job_dir, str(f.get("name", ""))), str(f.get("content", ""))) for f in job_files]
    wanted_configs = [
        (os.path.join(worker_dirs[str(int(c["index"]))], CONFIG_FILE), str(c["content"]))
        for c in configs
        if str(int(c["index"])) in worker_dirs
    ]

    def on_disk(path: str) -> str | None:
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read()
        except (OSError, UnicodeDecodeError):
            return None

    before_files = [(p, sha256_text(c)) for p, c in ((p, on_disk(p)) for p, _content in wanted_files) if c is not None]
    before_configs = [(p, c) for p, c in ((p, on_disk(p)) for p, _content in wanted_configs) if c is not None]
    return {
        "before_header": run_dir,
        "after_header": run_dir,
        "before": describe_layout(interpreter, [d for d in dirs if os.path.isdir(d)], before_files, before_configs),
        "after": describe_layout(interpreter, dirs, [(p, sha256_text(c)) for p, c in wanted_files], wanted_configs),
    }


class RunFilesError(Exception):
    """Why the run's files could not be made, with the fields the module returns beside
    the message (``run_dir`` where it is known)."""

    def __init__(self, msg: str, **fields: Any) -> None:
        super().__init__(msg)
        self.fields = fields


# The options of module tf_run_dir, which tf_worker_launch takes too (its ``deploy``).
RUN_FILES_SPEC: dict[str, dict[str, Any]] = {
    "base_dir": {"type": "path", "required": True},
    "run_id": {"type": "str", "required": True},
    "indices": {"type": "list", "elements": "int", "required": True},
    "attempt": {"type": "int", "default": 0},
    "checkpoint_root": {"type": "path", "default": ""},
    "job_files": {"type": "list", "elements": "dict", "default": []},
    "configs": {"type": "list", "elements": "dict", "default": []},
    "job_archive": {"type": "path", "default": ""},
    # Secrets, often: masked in every result and log, also without a task-level no_log.
    "job_env": {"type": "dict", "default": {}, "no_log": True},
    "visible_devices": {"type": "dict", "default": {}},
    "pythonpath": {"type": "bool", "default": False},
    "interpreter": {"type": "path", "default": ""},
}


def _make_private_dirs(wanted: list[str], private: set[str], check: bool) -> bool:
    """Make every wanted directory, 0700 where private (also an existing one of another
    mode); True when something changed (or would have, in check mode)."""
    changed = False
    for path in dict.fromkeys(wanted):
        mode = 0o700 if path in private else None
        if not os.path.isdir(path):
            changed = True
            if not check:
                try:
                    os.makedirs(path, mode=0o700, exist_ok=True)
                except OSError as exc:
                    raise RunFilesError(f"cannot create {path}: {exc}") from None
        elif mode is not None and (os.stat(path).st_mode & 0o777) != mode:
            changed = True
            if not check:
                _make_private(path, mode)
        if mode is not None and not check and os.path.isdir(path):
            # makedirs honours the umask; the run's directories must be private anyway.
            if (os.stat(path).st_mode & 0o777) != mode:
                _make_private(path, mode)
    return changed


def _make_private(path: str, mode: int) -> None:
    """chmod, or RunFilesError naming the directory (one of another user, say)."""
    try:
        os.chmod(path, mode)
    except OSError as exc:
        raise RunFilesError(f"cannot make {path} private (mode {mode:o}): {exc}") from None


def prepare_run(params: dict[str, Any], check: bool, want_diff: bool) -> dict[str, Any]:
    """Make the run's directories and write its files on this host, as module tf_run_dir
    documents (``params`` are its options, ``~`` already expanded); return its result
    (``changed``, ``written``, ``read_back``, the paths, ``diff`` when wanted). Raises
    RunFilesError, before anything is written, for an unsafe run id, a checkpoint
    directory of another run, or a worker directory that was already launched."""
    run_id = params["run_id"]
    if not run_id_is_safe(run_id):
        raise RunFilesError(f"run id {run_id!r} is not safe as a directory name: {RUN_ID_RULE}")
    base_dir = os.path.abspath(params["base_dir"])
    run_dir = run_dir_of(base_dir, run_id)
    job_dir = os.path.join(run_dir, JOB_DIR)
    try:
        checkpoint_dir = checkpoint_dir_of(run_dir, run_id, params["checkpoint_root"])
    except ValueError as exc:
        raise RunFilesError(str(exc)) from None
    checksum = configs_checksum(params["configs"])
    if params["checkpoint_root"]:
        problem = own_directory_problem(checkpoint_dir) or checkpoint_owner_problem(checkpoint_dir, run_id, checksum)
        if problem:
            raise RunFilesError(problem, run_dir=run_dir)
    attempt = params["attempt"]
    if attempt < 0:
        raise RunFilesError(f"attempt {attempt} is negative")
    attempt_dir = attempt_dir_of(run_dir, attempt)
    worker_dirs = {str(i): os.path.join(attempt_dir, worker_dir_name(i)) for i in params["indices"]}

    for path in worker_dirs.values():
        for record in LAUNCH_RECORDS:
            if os.path.exists(os.path.join(path, record)):
                raise RunFilesError(
                    f"run id {run_id!r} was already launched here ({path}/{record} "
                    "exists); pick a new tf_run_id, earlier runs are never overwritten",
                    run_dir=run_dir,
                )

    wanted = [base_dir, os.path.join(base_dir, RUNS_DIR), run_dir, job_dir, attempt_dir, *worker_dirs.values(),
              checkpoint_dir]  # fmt: skip
    # The base directory and runs/ too: an existing one keeps no wider mode.
    private = {base_dir, os.path.join(base_dir, RUNS_DIR), run_dir, job_dir, checkpoint_dir, attempt_dir,
               *worker_dirs.values()}  # fmt: skip
    diff = None
    if want_diff:
        diff = layout_diff(
            params["interpreter"], run_dir, [p for p in dict.fromkeys(wanted) if p in private],
            job_dir, worker_dirs, params["job_files"], params["configs"],
        )  # fmt: skip
    # <tf_checkpoint_dir>/<run_id> may sit on a root every user writes to: made with mkdir
    # and judged with lstat, never followed (issue 38 point 8).
    made_checkpoint_dir = bool(params["checkpoint_root"]) and make_own_directory(checkpoint_dir, check)
    changed = _make_private_dirs(wanted, private, check) or made_checkpoint_dir
    owner_file = os.path.join(checkpoint_dir, CHECKPOINT_OWNER_FILE)
    written_owner = bool(params["checkpoint_root"] and checksum and not os.path.exists(owner_file))
    if written_owner and not check:
        try:
            write_json_atomic(owner_file, {"run_id": run_id, "cluster_checksum": checksum})
            os.chmod(owner_file, 0o600)
        except OSError as exc:
            raise RunFilesError(f"cannot record the owner of {checkpoint_dir}: {exc}") from None
    try:
        written, read_back = write_files(job_dir, worker_dirs, params["job_files"], params["configs"], check)
    except (OSError, ValueError) as exc:
        raise RunFilesError(f"cannot write the run's files: {exc}") from None
    try:
        archive = params["job_archive"]
        if archive and check and not os.path.isfile(archive):
            written.append(job_dir)  # check mode: the archive would have been sent first
        elif archive:
            written += unpack_job_archive(archive, job_dir, check)
        for entry in job_env_files(worker_dirs, params["job_env"], params["visible_devices"], job_dir,
                                   params["pythonpath"]):  # fmt: skip
            path = os.path.join(worker_dirs[str(entry["index"])], JOB_ENV_FILE)
            if not os.path.isdir(os.path.dirname(path)) or write_if_changed(path, str(entry["content"]), check):
                written.append(path)
    except (OSError, ValueError, tarfile.TarError) as exc:
        raise RunFilesError(f"cannot write the job directory or the workers' environment: {exc}") from None
    return {
        "changed": changed or written_owner or bool(written),
        "written": written,
        "read_back": read_back,
        "base_dir": base_dir,
        "run_dir": run_dir,
        "job_dir": job_dir,
        "checkpoint_dir": checkpoint_dir,
        "worker_dirs": worker_dirs,
        **({"diff": diff} if diff is not None else {}),
    }


def read_back_problems(read_back: list[dict[str, Any]], cluster: list[str]) -> list[str]:
    """Why the TF_CONFIGs read back on this host would not make the cluster ``cluster``
    (every worker's address, in index order): a file that is not valid, names another
    cluster list, or gives its worker another index."""
    problems = []
    for item in read_back:
        where = worker_dir_name(int(item["index"]))
        try:
            data = json.loads(item["content"])
            # Every task's endpoint in the runbook's order (chief, worker, ps): a cluster
            # of workers alone is its worker list, and the task's place its index.
            workers = [endpoint for _kind, _n, endpoint in cluster_tasks(data["cluster"])]
            index = task_position(data)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            problems.append(f"{where}: TF_CONFIG is not valid ({exc})")
            continue
        if workers != [str(w) for w in cluster]:
            problems.append(f"{where}: cluster list {workers} differs from the spec {list(cluster)}")
        if index != int(item["index"]):
            problems.append(f"{where}: task.index is {index}, expected {int(item['index'])}")
    return problems


def deploy_attempt(params: dict[str, Any], cluster: list[str], check: bool, want_diff: bool) -> dict[str, Any]:
    """The deploy of a launch (tf_worker_launch's ``deploy``): ``prepare_run``, then, where
    ``cluster`` is given and something was written, every TF_CONFIG read back must name that
    cluster and its own worker's index. Raises RunFilesError (with the deploy's result but
    its diff as ``deploy``) when it does not: nothing may start then."""
    deployed = prepare_run(params, check, want_diff)
    problems = [] if check or not cluster else read_back_problems(deployed["read_back"], cluster)
    if problems:
        raise RunFilesError("TF_CONFIG check failed: " + "; ".join(problems),
                            deploy={k: v for k, v in deployed.items() if k != "diff"})
    return deployed


def run_facts(
    run_dir: str, job_dir: str, checkpoint_dir: str, worker_dirs: dict[str, str], interpreter: str,
    jobs: list[dict[str, Any]],
) -> dict[str, Any]:
    """The facts a launched run publishes on its host, read by the wait, the stop, the
    restarts and the checkpoints' copy: returned by the launch (tf_worker_launch, its
    ``facts``) and made from the reattach's finder (reattach_facts), so that the launch
    role publishes the same names from one place (published_facts)."""
    return {
        "tf_worker_run_dir": run_dir,
        "tf_worker_job_dir": job_dir,
        "tf_worker_checkpoint_dir": checkpoint_dir,
        "tf_worker_dirs": {str(k): str(v) for k, v in worker_dirs.items()},
        "tf_worker_interpreter": interpreter,
        "tf_launch_jobs": jobs,
    }


def launched_workers(result: dict[str, Any] | None, went: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One entry per worker the launch tried to start, in index order: its index,
    directory, supervisor pid and launch error (None when it started). None of a dry run
    (check mode), a skipped task or a host without a result.

    ``went`` is the result of an armed launch's go (tf_worker_go, for every worker of the
    run): a worker of this host that the go did not start gets the go's error as its
    launch error, so that the wait reports it failed at once instead of waiting for its
    armed supervisor to give up."""
    not_started = {
        int(entry["index"]): entry.get("error") or "no answer"
        for entry in (went or {}).get("workers") or []
        if not entry.get("started")
    }
    launched = []
    for worker in (result or {}).get("workers") or []:
        pid, error = worker.get("supervisor_pid"), worker.get("error")
        if pid is None and not error:
            continue
        if not error and int(worker["index"]) in not_started:
            error = f"the launch's go did not start it: {not_started[int(worker['index'])]}"
        launched.append(
            {
                "index": int(worker["index"]),
                "dir": worker["dir"],
                "supervisor_pid": None if pid is None else int(pid),
                "launch_error": error or None,
            }
        )
    return sorted(launched, key=lambda entry: entry["index"])


def reattach_facts(found: dict[str, Any], first: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run's facts on a host from what the reattach's finder (tf_worker_status with
    ``run_dir``) read there: the same names as the launch's (run_facts), plus the run's
    attempt and deadline (``tf_run_attempt``, ``tf_launch_deadline``, on the controller's
    clock) taken from ``first``, one host's ``launch`` record, so that every host gets one
    value for the run. Raises ValueError when the finder found no launch record."""
    launch = found.get("launch") or {}
    if "python" not in launch:
        raise ValueError(f"run directory {found.get('run_dir')} holds no launch record")
    workers = sorted(found.get("workers_found") or [], key=lambda w: int(w["index"]))
    run = first if first and "attempt" in first else launch
    return {
        **run_facts(
            str(found["run_dir"]),
            os.path.dirname(str(launch["script"])),
            str(launch["checkpoint_dir"]),
            {str(int(w["index"])): str(w["dir"]) for w in workers},
            str(launch["python"]),
            workers,
        ),
        "tf_run_attempt": int(run["attempt"]),
        "tf_launch_deadline": int(run.get("deadline_at_controller") or 0),
    }


def published_facts(
    source: dict[str, Any], run: dict[str, Any] | None = None, went: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The run's facts on a host from either source the launch role publishes: a launch's
    result (tf_worker_launch with deploy: its ``facts``, its workers updated with what an
    armed launch's go ``went`` started) or the reattach's finder result (reattach_facts,
    with ``run`` for the run's attempt and deadline). Raises ValueError for anything else."""
    if "facts" in source:
        facts = dict(source["facts"])
        if went:
            facts["tf_launch_jobs"] = launched_workers(source, went)
        return facts
    if "workers_found" in source:
        return reattach_facts(source, run)
    raise ValueError("neither a launch's result (facts) nor a reattach's (workers_found)")
