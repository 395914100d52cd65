"""The callback tf_filter_preload: every filter file of the collection is loaded in the main
process when the playbook starts, so that a worker forked later finds them loaded; the
project enables it before tf_gc_freeze."""

from __future__ import annotations

import configparser
import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_filter_file_is_loaded_when_the_playbook_starts_and_a_fork_inherits_them() -> None:
    # In a process of its own: the plugin loader's cache lives for the process.
    script = textwrap.dedent("""
        import json, os, sys
        from ansible.plugins.loader import MODULE_CACHE, init_plugin_loader
        init_plugin_loader([sys.argv[1]])
        from ansible_collections.tf_runbook.multiworker.plugins.callback.tf_filter_preload import CallbackModule

        def loaded():
            return sorted(os.path.basename(path) for path in MODULE_CACHE.get("FilterModule", {})
                          if "/tf_runbook/multiworker/plugins/filter/" in path)

        before = loaded()
        CallbackModule().v2_playbook_on_start(None)
        after = loaded()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # a worker starts with them loaded
            os.write(write, json.dumps(loaded()).encode())
            os._exit(0)
        os.waitpid(pid, 0)
        print(json.dumps({"before": before, "after": after, "worker": json.loads(os.read(read, 65536))}))
    """)
    result = subprocess.run([sys.executable, "-c", script, str(REPO / "collections")],
                            capture_output=True, text=True, check=False, cwd=REPO)  # fmt: skip
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    every_file = sorted(path.name for path in (REPO / "plugins" / "filter").glob("*.py"))
    assert seen["before"] == []
    assert seen["after"] == every_file
    assert seen["worker"] == every_file


def test_the_project_enables_it_before_the_freeze() -> None:
    config = configparser.ConfigParser()
    config.read(REPO / "ansible.cfg")
    enabled = [name.strip() for name in config.get("defaults", "callbacks_enabled").split(",")]
    assert enabled.index("tf_runbook.multiworker.tf_filter_preload") < enabled.index("tf_runbook.multiworker.tf_gc_freeze")
