"""The callback tf_gc_freeze: the parsed playbook is frozen (gc.freeze) once it is loaded,
before the first play forks a worker, and the project enables it."""

from __future__ import annotations

import configparser
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_objects_tracked_when_the_playbook_starts_are_frozen_and_a_fork_inherits_them() -> None:
    # In a process of its own: a frozen heap stays frozen for the rest of the process.
    script = textwrap.dedent("""
        import gc, os, sys
        sys.path.insert(0, sys.argv[1])
        from ansible_collections.tf_runbook.multiworker.plugins.callback.tf_gc_freeze import CallbackModule
        parsed = [{"task": i} for i in range(5000)]   # stands for the parsed playbook

        def walked():  # what a collection of any generation walks
            return any(o is parsed for o in gc.get_objects())

        assert walked()
        before = gc.get_freeze_count()  # the interpreter's own, if any
        CallbackModule().v2_playbook_on_start(None)
        assert gc.get_freeze_count() - before >= len(parsed) and not walked()
        gc.collect()
        assert not walked()
        pid = os.fork()
        if pid == 0:  # a worker starts with the same frozen heap
            os._exit(1 if walked() else 0)
        assert os.waitpid(pid, 0)[1] == 0
        later = [{"task": i} for i in range(10)]  # what the run creates later is collected as ever
        assert any(o is later for o in gc.get_objects())
        print("frozen", gc.get_freeze_count() - before)
    """)
    result = subprocess.run([sys.executable, "-c", script, str(REPO / "collections")],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("frozen ")


def test_the_project_enables_it() -> None:
    config = configparser.ConfigParser()
    config.read(REPO / "ansible.cfg")
    enabled = [name.strip() for name in config.get("defaults", "callbacks_enabled").split(",")]
    assert "tf_runbook.multiworker.tf_gc_freeze" in enabled
