"""Worker interpreters for the namespace hosts' unprivileged user."""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
from pathlib import Path

WORKER_PINS = ["tensorflow-cpu==2.21.0", "numpy==2.3.5"]
# Debian's interpreter is the one an unprivileged user can run on these hosts.
HOST_PYTHON = "/usr/bin/python3"
SHARED_VENV_ROOT = Path(os.environ.get("TF_RUNBOOK_TEST_CACHE", "/var/cache/tf-runbook-tests"))


def shared_venv(extra_pins: tuple[str, ...] = ()) -> Path:
    """A virtualenv with the worker pins (plus ``extra_pins``) for Debian's Python, outside
    the hosts' private dirs so that every host sees it; built once and reused (keyed by the
    pins)."""
    pins = [*WORKER_PINS, *extra_pins]
    key = hashlib.sha256("\n".join([HOST_PYTHON, *pins]).encode()).hexdigest()[:12]
    venv = SHARED_VENV_ROOT / f"venv-{key}"
    python = venv / "bin" / "python"
    if (venv / ".complete").exists():
        return python
    SHARED_VENV_ROOT.mkdir(parents=True, exist_ok=True)
    os.chmod(SHARED_VENV_ROOT, 0o755)
    # The two shards of `make test` run at once and may need the same virtualenv (the
    # docs project's and the example project's tf_keras one): the first builds it while
    # the other waits, where two builds at once cleared each other's files (pip: "No such
    # file or directory: .../INSTALLER...tmp", on a fresh machine).
    with open(SHARED_VENV_ROOT / f".venv-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / ".complete").exists():  # built by the other shard meanwhile
            return python
        subprocess.run([HOST_PYTHON, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *pins],
            check=True,
        )
        (venv / ".complete").write_text("\n".join(pins) + "\n")
    return python


