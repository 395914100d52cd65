"""The sidecar evaluator's checkpoints (issue 41): the chief's supervisor pushes each
complete checkpoint of its checkpoint directory to the evaluator's supervisor, over TCP on
the evaluator's port, on hosts that share no filesystem and may not SSH to each other.

Shipped next to tf_supervisor.py (standard library only, like it). One connection is one
message:

- a header line: ``TFCKPT1 <mac> <json>``, the JSON holding the run id, a sequence number
  (the receiver takes only a newer one: an old message replayed changes nothing), the kind
  (``push``, or ``end`` once the chief's job ended, with its exit status), the data files
  and pointer files it carries (relative name, size) and every name of the sender's tree
  (what the receiver keeps); ``mac`` is HMAC-SHA256 of the JSON under the run's
  announcement key, checked before anything is written;
- the files' bytes, data files first, pointers last;
- a trailer: HMAC-SHA256 of the header's JSON and every byte after it, checked before
  anything is renamed into place.

The receiver answers ``OK`` or ``NO <why>``. It stages the files in a directory inside
its checkpoint directory (the same filesystem), then renames the data files into place
and the pointer files (tf_run.POINTER_FILES) last, as tf_checkpoint_copy's unpack does: a
pointer never names a checkpoint whose files are not all there, and a transfer cut short
or refused leaves nothing but its staging directory, removed at once.

A checkpoint directory both hosts share (tf_checkpoint_dir on one NFS export) needs no
push: the sender leaves a marker file of its own in its directory and names it in every
header; a receiver that finds that marker in its own directory swaps nothing in (the
files are already there) and says so (``shared``).

The sender reads each pointer before the tree: a checkpoint's files are complete before
its pointer names it, so the files it then reads are those of a whole checkpoint; a file
that vanished or shrank meanwhile (the job pruned an old one) ends that push unsent, and
the next look sends the newer state.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

from tf_checkpoint_wire import MAGIC, MessageRefused as Refused, header_line, is_pointer, read_header, read_line, safe_name, sign  # noqa: E402,F401
from tf_run import CHECKPOINT_OWN_PREFIX, CHECKPOINT_STAGING_PREFIX  # noqa: E402

CHUNK = 1 << 20
# A sender's look at its checkpoint directory, and its connection's timeout.
LOOK_SECONDS = 1.0
IO_SECONDS = 30.0
# A connect that gets no answer in this time finds the evaluator's host gone (cut off, or
# crashed): the chief's supervisor must not outlive its job by IO_SECONDS per try for it.
CONNECT_SECONDS = 5.0
# How long the chief's supervisor tries to tell the evaluator the training ended.
END_SECONDS = 15.0


# --- Both sides --------------------------------------------------------------------------


def tree_files(directory: Path) -> dict[str, os.stat_result]:
    """Every regular file of a checkpoint tree by relative name, the runbook's own files
    (CHECKPOINT_OWN_PREFIX at the top) left out; symbolic links are not followed."""
    found: dict[str, os.stat_result] = {}
    for root, dirs, files in os.walk(directory):
        rel = os.path.relpath(root, directory)
        if rel == ".":
            dirs[:] = [d for d in dirs if not d.startswith(CHECKPOINT_OWN_PREFIX)]
            files = [f for f in files if not f.startswith(CHECKPOINT_OWN_PREFIX)]
        for name in files:
            path = os.path.join(root, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if os.path.isfile(path) and not os.path.islink(path):
                found[name if rel == "." else f"{rel}/{name}"] = info
    return found


# --- The sender (the chief's supervisor) ----------------------------------------------


def send_file(conn: socket.socket, path: Path, size: int, mac: Any) -> None:
    """Exactly ``size`` bytes of ``path``; raises OSError when it is gone or shorter."""
    left = size
    with open(path, "rb") as handle:
        while left:
            data = handle.read(min(CHUNK, left))
            if not data:
                raise OSError(f"{path} shrank while it was sent")
            mac.update(data)
            conn.sendall(data)
            left -= len(data)


def send_message(
    address: tuple[str, int], key: bytes, header: dict[str, Any], directory: Path, pointers: dict[str, bytes]
) -> str:
    """One message to the receiver at ``address``: the header, the data files read from
    ``directory``, the pointers' bytes as read before (``pointers``), the trailer. Returns
    the receiver's answer (``OK`` or ``NO ...``); raises OSError when it could not be sent."""
    line, body = header_line(key, header)
    mac = hmac.new(key, body, "sha256")
    with socket.create_connection(address, timeout=CONNECT_SECONDS) as conn:
        conn.settimeout(IO_SECONDS)
        try:
            conn.sendall(line)
            for name, size in header["files"]:
                send_file(conn, directory / name, size, mac)
            for name, _size in header["pointers"]:
                mac.update(pointers[name])
                conn.sendall(pointers[name])
            conn.sendall(mac.hexdigest().encode("ascii") + b"\n")
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            # The receiver may have refused the header and closed: its answer says why.
            answer = refusal(conn)
            if answer:
                return answer
            raise
        return read_line(conn, 512).decode("utf-8", "replace").strip() or "NO answer"


def gone_error(exc: OSError) -> bool:
    """Whether a send's error says the receiver is gone: nothing listens on its port, or
    its host did not answer the connect (or a read) in time."""
    return isinstance(exc, (ConnectionRefusedError, TimeoutError))


def refusal(conn: socket.socket) -> str:
    """The receiver's ``NO ...`` answer, if it sent one before it closed; else ""."""
    try:
        conn.settimeout(2.0)
        answer = read_line(conn, 512).decode("utf-8", "replace").strip()
    except (OSError, Refused):
        return ""
    return answer if answer.startswith("NO ") else ""


def read_pointers(directory: Path) -> dict[str, bytes]:
    """Every pointer file of the tree and its bytes, read first."""
    found = {}
    for name in tree_files(directory):
        if is_pointer(name):
            try:
                found[name] = (directory / name).read_bytes()
            except OSError:
                continue
    return found


class Pusher:
    """The chief's side: looks at its checkpoint directory every LOOK_SECONDS (a thread)
    and pushes it to the evaluator whenever a pointer changed, the data files the receiver
    does not hold yet, pointers last. The evaluator's failure is never the chief's: every
    error is kept (``last_error``) and the next look tries again."""

    def __init__(self, directory: Path, address: tuple[str, int], key: bytes, run_id: str) -> None:
        self.directory, self.address, self.key, self.run_id = directory, address, key, run_id
        self.sent: dict[str, tuple[int, int]] = {}
        self.pushed_pointers: dict[str, bytes] = {}
        self.seq = time.time_ns()
        self.marker = f"{CHECKPOINT_OWN_PREFIX}push-{os.getpid()}-{self.seq}"
        self.pushes = 0
        self.last_error = ""
        # The last try found no receiver (connection refused, or no answer in time: its
        # host cut off): the evaluator is gone.
        self.gone = False
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def header(self, kind: str, files: list[tuple[str, int]], pointers: dict[str, bytes], keep: list[str]) -> dict[str, Any]:
        self.seq += 1
        return {"run_id": self.run_id, "seq": self.seq, "kind": kind, "files": files, "marker": self.marker,
                "pointers": [[n, len(b)] for n, b in sorted(pointers.items())], "keep": keep}  # fmt: skip

    def push(self, kind: str = "push", extra: dict[str, Any] | None = None) -> bool:
        """One push when a pointer changed (always for ``end``); True when the receiver
        took it or there was nothing new."""
        pointers = read_pointers(self.directory)
        if kind == "push" and (not pointers or pointers == self.pushed_pointers):
            return True
        tree = tree_files(self.directory)
        files = [[n, s.st_size] for n, s in sorted(tree.items())
                 if not is_pointer(n) and self.sent.get(n) != (s.st_size, s.st_mtime_ns)]  # fmt: skip
        header = {**self.header(kind, files, pointers, sorted(tree)), **(extra or {})}
        try:
            answer = send_message(self.address, self.key, header, self.directory, pointers)
        except OSError as exc:
            self.last_error, self.gone = f"{type(exc).__name__}: {exc}", gone_error(exc)
            return False
        self.gone = False
        if answer != "OK":
            self.last_error = answer
            return False
        self.sent = {n: (s.st_size, s.st_mtime_ns) for n, s in tree.items() if not is_pointer(n)}
        self.pushed_pointers, self.last_error = pointers, ""
        self.pushes += 1
        return True

    def loop(self) -> None:
        while not self.stop.wait(LOOK_SECONDS):
            try:
                self.push()
            except Exception as exc:  # noqa: BLE001 - the evaluator's trouble never ends the chief
                self.last_error = f"{type(exc).__name__}: {exc}"

    def start(self) -> None:
        try:
            (self.directory / self.marker).touch()
        except OSError as exc:
            self.last_error = f"cannot mark the checkpoint directory: {exc}"
        self.thread = threading.Thread(target=self.loop, name="checkpoint-push", daemon=True)
        self.thread.start()

    def finish(self, returncode: int, seconds: float = END_SECONDS) -> bool:
        """The chief's job ended: stop looking, push what is left and tell the evaluator
        the training ended (with the job's exit status), tried for ``seconds``, or once
        when nothing listens on the evaluator's port or its host does not answer (it
        ended, or its host is cut off: nobody to tell, and the chief's supervisor must not
        outlive its job for it)."""
        self.stop.set()
        if self.thread is not None:
            self.thread.join(CONNECT_SECONDS + LOOK_SECONDS)
        end = time.monotonic() + seconds
        try:
            while True:
                done = self.push("end", {"returncode": returncode}) if self.directory.is_dir() else self.end_only(returncode)
                if done or self.gone or time.monotonic() >= end:
                    return done
                time.sleep(LOOK_SECONDS)
        finally:
            (self.directory / self.marker).unlink(missing_ok=True)

    def end_only(self, returncode: int) -> bool:
        """The end with no checkpoint directory: a message without files."""
        header = {**self.header("end", [], {}, []), "returncode": returncode, "keep": None}
        try:
            return send_message(self.address, self.key, header, self.directory, {}) == "OK"
        except OSError as exc:
            self.last_error, self.gone = f"{type(exc).__name__}: {exc}", gone_error(exc)
            return False


# --- The receiver (the evaluator's supervisor) ------------------------------------------


def receive_file(conn: socket.socket, target: BinaryIO, size: int, mac: Any) -> None:
    left = size
    while left:
        data = conn.recv(min(CHUNK, left))
        if not data:
            raise Refused("the transfer was cut short")
        mac.update(data)
        target.write(data)
        left -= len(data)


def stage(conn: socket.socket, header: dict[str, Any], body: bytes, key: bytes, staging: Path) -> list[tuple[str, Path]]:
    """Every file of the message into ``staging`` (numbered, fsynced), then the trailer
    checked: (relative name, staged path), data files first, pointers last."""
    mac = hmac.new(key, body, "sha256")
    staged = []
    for number, (name, size) in enumerate(header["files"] + header["pointers"]):
        path = staging / str(number)
        with open(path, "wb") as target:
            receive_file(conn, target, size, mac)
            target.flush()
            os.fsync(target.fileno())
        staged.append((name, path))
    trailer = read_line(conn, 128)
    if not hmac.compare_digest(trailer, mac.hexdigest().encode("ascii")):
        raise Refused("bad trailer: the files are not the signed ones")
    return staged


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def swap_in(directory: Path, staged: list[tuple[str, Path]]) -> None:
    """Rename the staged files into place, in order (pointers last), each directory
    fsynced once its files are there."""
    touched: set[Path] = set()
    for name, path in staged:
        if is_pointer(name) and touched:
            for parent in sorted(touched):
                fsync_dir(parent)
            touched = set()
        dest = directory / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, dest)
        touched.add(dest.parent)
    for parent in sorted(touched):
        fsync_dir(parent)


def prune(directory: Path, keep: list[str] | None) -> None:
    """Remove the files the sender no longer has (its pruned checkpoints), then empty
    directories; the runbook's own files stay."""
    if keep is None:
        return
    wanted = set(keep)
    for name in tree_files(directory):
        if name not in wanted:
            (directory / name).unlink(missing_ok=True)
    for root, dirs, _files in os.walk(directory, topdown=False):
        for name in dirs:
            path = Path(root) / name
            if not (Path(root) == directory and name.startswith(CHECKPOINT_OWN_PREFIX)):
                try:
                    path.rmdir()
                except OSError:
                    pass


def drain(conn: socket.socket, limit: int = 1 << 26, seconds: float = 2.0) -> None:
    """After a refusal: read (and drop) what the sender is still sending, for a while, so
    that closing does not reset the connection before the sender read the answer."""
    conn.shutdown(socket.SHUT_WR)
    conn.settimeout(0.5)
    end = time.monotonic() + seconds
    taken = 0
    while taken < limit and time.monotonic() < end:
        data = conn.recv(CHUNK)
        if not data:
            return
        taken += len(data)


class Receiver:
    """The evaluator's side: serves its port (a thread), takes each signed message into
    ``directory`` and remembers when the training ended (``ended``: the chief's exit
    status and the monotonic time the end was heard) and what it refused."""

    def __init__(self, server: socket.socket, directory: Path, key: bytes, run_id: str) -> None:
        self.server, self.directory, self.key, self.run_id = server, directory, key, run_id
        self.last_seq = 0
        self.received = 0
        self.shared = False
        self.refused: list[str] = []
        self.ended: tuple[int, float] | None = None
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def take(self, conn: socket.socket) -> None:
        """One connection: a message taken whole, or refused with nothing renamed."""
        conn.settimeout(IO_SECONDS)
        staging = None
        try:
            header, body = read_header(conn, self.key, self.run_id, self.last_seq)
            self.directory.mkdir(parents=True, exist_ok=True)
            staging = self.directory / f"{CHECKPOINT_STAGING_PREFIX}push-{header['seq']}"
            staging.mkdir()
            staged = stage(conn, header, body, self.key, staging)
            if self.same_directory(header.get("marker")):
                self.shared = True
            else:
                swap_in(self.directory, staged)
                prune(self.directory, header.get("keep"))
            self.last_seq = header["seq"]
            self.received += 1
            if header.get("kind") == "end":
                self.ended = (int(header.get("returncode", -1)), time.monotonic())
            answer = b"OK\n"
        except (Refused, OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            self.refused.append(f"{type(exc).__name__}: {exc}"[:300])
            answer = f"NO {exc}".encode("utf-8", "replace")[:400] + b"\n"
        finally:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
        try:
            conn.sendall(answer)
            if answer != b"OK\n":
                drain(conn)
        except OSError:
            pass

    def same_directory(self, marker: Any) -> bool:
        """Whether the sender's directory is this one (its marker is here)."""
        if not isinstance(marker, str) or "/" in marker or not marker.startswith(f"{CHECKPOINT_OWN_PREFIX}push-"):
            return False
        return (self.directory / marker).exists()

    def loop(self) -> None:
        self.server.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except (socket.timeout, OSError):
                continue
            with conn:
                self.take(conn)

    def start(self) -> None:
        self.thread = threading.Thread(target=self.loop, name="checkpoint-receive", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(IO_SECONDS)
        self.server.close()
