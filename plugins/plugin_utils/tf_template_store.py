# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compiled Jinja templates kept on the controller's disk, from one playbook run to the next.

The table of ``tf_template_cache`` lives as long as one ``ansible-playbook``: every run
compiles its templates and conditionals again, in its main process and in the first
host's worker of each task (measured on the smoke, one host: a fifth of the main
process's CPU was Jinja's lexer, parser and code generator). What compiling produces is
a Python code object, which ``marshal`` writes and reads back in microseconds (Jinja's
own ``BytecodeCache``, which ``tf_report`` uses, serves only templates a loader finds by
name, not the strings Ansible compiles with ``from_string`` and ``compile_expression``). This store
keeps one file per compiled string, named by a hash of the string and of everything else
the code depends on (``fingerprint``: the versions of Python, Jinja and ansible-core, the
environment's classes and settings, Ansible's embedded-template setting), so that a
change to any of them reads nothing written before it.

The files are code the controller runs: the store is used only when its directory is
this user's own and no one else may write to it (a directory that is not is left alone,
and nothing is kept), and every file read must be this user's too. A file that does not
load (cut short, another format) is compiled again and written over.

``TF_TEMPLATE_CACHE_DIR`` names the directory (default
``$XDG_CACHE_HOME/tf_runbook/templates``, else ``~/.cache/tf_runbook/templates``); ``off``
turns the store off. It holds at most ``MAX_FILES`` files; past that, the oldest half is
removed when a run starts (``prune``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import os
import stat
import sys
import tempfile
import types
from typing import Any

ENV_DIR = "TF_TEMPLATE_CACHE_DIR"
# Bumped when what a file holds changes.
FORMAT = 1
MAX_FILES = 20000
# A compiled template larger than this is not written (a template of a large file).
MAX_FILE_BYTES = 1 << 20


class Store:
    """One directory of compiled templates, for one ``fingerprint``."""

    def __init__(self, directory: str, fingerprint: str) -> None:
        self.directory = directory
        self.fingerprint = fingerprint
        self._uid = os.geteuid()

    def path(self, kind: str, text: str, escape_backslashes: bool) -> str:
        digest = hashlib.sha256()
        for part in (self.fingerprint, kind, "1" if escape_backslashes else "0"):
            digest.update(part.encode())
            digest.update(b"\0")
        digest.update(text.encode("utf-8", "surrogatepass"))
        return os.path.join(self.directory, digest.hexdigest() + ".code")

    def read(self, kind: str, text: str, escape_backslashes: bool) -> types.CodeType | None:
        """The code kept for ``text``, or None: never kept, or not to be trusted."""
        path = self.path(kind, text, escape_backslashes)
        try:
            with open(path, "rb") as handle:
                info = os.fstat(handle.fileno())
                if info.st_uid != self._uid or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                    return None
                code = marshal.load(handle)
        except (OSError, EOFError, ValueError, TypeError):  # absent, or not to be read
            return None
        return code if isinstance(code, types.CodeType) else None

    def write(self, kind: str, text: str, escape_backslashes: bool, code: types.CodeType) -> bool:
        """Keep ``code`` for ``text``: written whole under another name, then renamed, so
        that a reader never sees half a file. False when it was not kept."""
        try:
            data = marshal.dumps(code)
        except ValueError:  # a constant marshal cannot write
            return False
        if len(data) > MAX_FILE_BYTES:
            return False
        path = self.path(kind, text, escape_backslashes)
        try:
            handle, part = tempfile.mkstemp(dir=self.directory, prefix=".part-")
            try:
                with os.fdopen(handle, "wb") as out:
                    out.write(data)
                os.replace(part, path)
            except BaseException:
                try:
                    os.unlink(part)
                except OSError:
                    pass
                raise
        except OSError:
            return False
        return True

    def prune(self, max_files: int = MAX_FILES) -> int:
        """Past ``max_files`` files, remove the oldest half (by modification time), and
        any ``.part-`` file left by a process that died writing. The number removed."""
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            return 0
        removed = 0
        kept = []
        for entry in entries:
            if entry.name.startswith(".part-"):
                removed += _unlink(entry.path)
            elif entry.name.endswith(".code"):
                kept.append(entry)
        if len(kept) > max_files:
            def _mtime(entry: os.DirEntry) -> float:
                try:
                    return entry.stat().st_mtime
                except OSError:
                    return 0.0
            kept.sort(key=_mtime)
            for entry in kept[:len(kept) - max_files // 2]:
                removed += _unlink(entry.path)
        return removed


def _unlink(path: str) -> int:
    try:
        os.unlink(path)
    except OSError:
        return 0
    return 1


def default_directory(environ: Any = None) -> str | None:
    """Where the store lives, from ``TF_TEMPLATE_CACHE_DIR`` and the XDG cache home;
    None when it is turned off."""
    environ = os.environ if environ is None else environ
    chosen = environ.get(ENV_DIR)
    if chosen is not None:
        chosen = chosen.strip()
        if not chosen or chosen.lower() in ("off", "0", "false", "no", "none"):
            return None
        return os.path.abspath(os.path.expanduser(chosen))
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tf_runbook", "templates")


def own_directory(directory: str) -> bool:
    """Make ``directory`` (mode 0700) when it is missing; True when it is this user's own,
    a real directory, and no one else may write to it, or to the directory above it."""
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        info = os.lstat(directory)
        parent = os.stat(os.path.dirname(directory))
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        return False
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return False
    # Another user who may write to the directory above could swap this one for theirs,
    # unless the sticky bit (as on /tmp) keeps them from renaming what is not theirs.
    if parent.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not parent.st_mode & stat.S_ISVTX:
        return False
    return True


_SETTINGS = ("block_start_string", "block_end_string", "variable_start_string", "variable_end_string",
             "comment_start_string", "comment_end_string", "line_statement_prefix", "line_comment_prefix",
             "trim_blocks", "lstrip_blocks", "newline_sequence", "keep_trailing_newline", "optimized",
             "autoescape", "is_async")


def settings_key(environment: Any, extra: tuple = ()) -> tuple:
    """What of ``environment`` (and ``extra``) the code compiled by it depends on, besides
    the template's text: its classes, extensions and settings."""
    cls = type(environment)
    generator = getattr(environment, "code_generator_class", None)
    return (
        f"{cls.__module__}.{cls.__qualname__}",
        f"{getattr(generator, '__module__', '')}.{getattr(generator, '__qualname__', '')}",
        ",".join(sorted(getattr(environment, "extensions", {}) or {})),
        *(repr(getattr(environment, name, None)) for name in _SETTINGS),
        *map(repr, extra),
    )


def fingerprint(key: tuple) -> str:
    """``settings_key`` with the versions of Python, Jinja and ansible-core, hashed."""
    import jinja2

    try:
        from ansible.release import __version__ as ansible_version
    except ImportError:  # pragma: no cover - ansible-core always has it
        ansible_version = "?"
    parts = (f"format={FORMAT}", sys.version, importlib.util.MAGIC_NUMBER.hex(),
             f"jinja2={jinja2.__version__}", f"ansible={ansible_version}", *key)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def open_store(key: tuple, environ: Any = None) -> Store | None:
    """The store for templates compiled with ``settings_key`` ``key``, in a directory of
    its own (one per fingerprint), or None: turned off, or no directory that this user
    alone may write to."""
    top = default_directory(environ)
    if top is None:
        return None
    try:
        print_ = fingerprint(key)
    except Exception:  # noqa: BLE001 - no version to tell: no store
        return None
    if not own_directory(top):
        return None
    directory = os.path.join(top, print_[:32])
    if not own_directory(directory):
        return None
    return Store(directory, print_)
