"""Choices made for the controller's own machine (the smoke inventory's localhost)."""

from __future__ import annotations

import os
import re
from functools import lru_cache
from typing import Any

# The oldest Python that ansible-core 2.21's modules run on.
MODULE_PYTHON_MIN = (3, 9)
SYSTEM_PYTHON = "/usr/bin/python3"
_VERSIONED_NAME = re.compile(r"^python(\d+)\.(\d+)$")


@lru_cache(maxsize=8)
def _system_python(path: str) -> str | None:
    """`path` when it resolves to an executable named pythonX.Y with X.Y supported."""
    real = os.path.realpath(path)
    match = _VERSIONED_NAME.match(os.path.basename(real))
    if not match or not os.access(real, os.X_OK):
        return None
    if (int(match.group(1)), int(match.group(2))) < MODULE_PYTHON_MIN:
        return None
    return path


def tf_module_python(fallback: Any, system: str = SYSTEM_PYTHON) -> str:
    """The interpreter for Ansible's modules on this machine.

    The system's Python 3 when it is a supported version: distributions build theirs
    optimised, and a module run (mostly the interpreter importing Ansible's module code
    from its zip, never cached as bytecode) took about half the CPU under Debian's 3.11
    as under a self-built 3.12. Otherwise ``fallback`` (the controller's own interpreter,
    which runs modules too). The version is read from the name the path resolves to
    (``python3.11``), without starting it; a name without one counts as unsupported.
    """
    if not isinstance(fallback, str) or not fallback:
        raise ValueError(f"tf_module_python needs the fallback interpreter's path, got {fallback!r}")
    return _system_python(str(system)) or fallback


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {"tf_module_python": tf_module_python}
