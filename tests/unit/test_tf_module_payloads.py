"""The payload packer (plugins/callback/tf_module_payloads.py, issue 26): as the playbook
starts, a forked process packs the run's modules into the payload cache that Ansible's
workers read, so that the preflight's probe and the launch do not wait for it.

Each test runs in a Python of its own: it sets up Ansible's plugin loader for the clone's
collection and points the run's temporary directory at the test's, which must not leak
into this pytest process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SETUP = textwrap.dedent("""
    import json, os, sys, time
    from ansible import constants as C
    from ansible.plugins.loader import init_plugin_loader
    init_plugin_loader([{collections!r}])
    C.DEFAULT_LOCAL_TMP = {tmp!r}
    sys.path.insert(0, {plugins!r})
    import tf_module_payloads as payloads
    cache = os.path.join({tmp!r}, "ansiballz_cache")
    def packed():
        return sorted(name for name in os.listdir(cache) if not name.endswith((".lock", "-part"))) \\
            if os.path.isdir(cache) else []
""")


def run(tmp_path: Path, body: str) -> dict:
    code = SETUP.format(collections=str(REPO / "collections"), tmp=str(tmp_path),
                        plugins=str(REPO / "plugins" / "callback")) + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def cache_name(module: str) -> str:
    return f"ansible_collections.tf_runbook.multiworker.plugins.modules.{module}-ZIP_DEFLATED-none"


def test_pack_fills_the_cache_the_workers_read_and_skips_what_it_cannot_pack(tmp_path: Path) -> None:
    out = run(tmp_path, """
        names = payloads.pack(["tf_runbook.multiworker.tf_worker_go", "tf_runbook.multiworker.no_such_module",
                               "tf_runbook.multiworker.tf_preflight_host"])
        print(json.dumps({"names": names, "packed": packed()}))
    """)
    assert out["names"] == ["tf_runbook.multiworker.tf_worker_go", "tf_runbook.multiworker.tf_preflight_host"]
    assert out["packed"] == sorted([cache_name("tf_worker_go"), cache_name("tf_preflight_host")])


def test_a_packed_module_is_what_the_worker_would_build(tmp_path: Path) -> None:
    """The worker's own call (modify_module) finds the packed payload and builds the same one."""
    out = run(tmp_path, """
        from ansible.executor import module_common
        from ansible.plugins.loader import module_loader
        from ansible.template import Templar
        payloads.pack(["tf_runbook.multiworker.tf_worker_go"])
        path = os.path.join(cache, "{name}")
        before = os.stat(path).st_mtime_ns
        found = module_loader.find_plugin_with_context("tf_runbook.multiworker.tf_worker_go", mod_type=".py")
        calls = []
        real = module_common.recursive_finder
        module_common.recursive_finder = lambda *a, **k: calls.append(1) or real(*a, **k)
        built = module_common.modify_module(
            module_name="tf_runbook.multiworker.tf_worker_go", module_path=found.plugin_resolved_path,
            module_args={{}}, templar=Templar(loader=None, variables={{}}),
            task_vars={{"ansible_python_interpreter": "/usr/bin/python3"}}, module_compression="ZIP_DEFLATED")
        print(json.dumps({{"scanned": len(calls), "unchanged": os.stat(path).st_mtime_ns == before,
                          "size": len(built.b_module_data)}}))
    """.format(name=cache_name("tf_worker_go")))
    # The worker did not scan the module's imports again: it read the packed payload.
    assert out == {"scanned": 0, "unchanged": True, "size": out["size"]} and out["size"] > 10_000


def test_the_callback_packs_in_a_child_and_reaps_it(tmp_path: Path) -> None:
    out = run(tmp_path, """
        from ansible.plugins.loader import callback_loader
        callback = callback_loader.get("tf_runbook.multiworker.tf_module_payloads")
        callback.set_options(direct={"modules": ["tf_runbook.multiworker.tf_worker_go"]})
        callback.v2_playbook_on_start(None)
        child = callback._packer
        deadline = time.monotonic() + 60
        while not packed() and time.monotonic() < deadline:
            time.sleep(0.05)
        callback._end_packer()
        try:
            os.waitpid(child, os.WNOHANG)
            reaped = False
        except ChildProcessError:
            reaped = True
        print(json.dumps({"child": child != os.getpid(), "packed": packed(), "reaped": reaped}))
    """)
    assert out == {"child": True, "packed": [cache_name("tf_worker_go")], "reaped": True}


def test_a_playbook_that_ends_at_once_stops_the_packer(tmp_path: Path) -> None:
    """Ended before the packer is done (a refusal in the first second): it is killed and
    reaped before Ansible removes the run's temporary directory, and writes nothing after."""
    out = run(tmp_path, """
        from ansible.plugins.loader import callback_loader
        callback = callback_loader.get("tf_runbook.multiworker.tf_module_payloads")
        names = ["tf_runbook.multiworker." + name for name in
                 ("tf_preflight_host", "tf_worker_launch", "tf_worker_go", "tf_worker_wait")] * 5
        callback.set_options(direct={"modules": names})
        callback.v2_playbook_on_start(None)
        child = callback._packer
        callback._end_packer()
        try:
            os.kill(child, 0)
            alive = True
        except ProcessLookupError:
            alive = False
        print(json.dumps({"alive": alive, "packed": len(packed())}))
    """)
    assert out["alive"] is False and out["packed"] < 4


def test_the_project_enables_it_and_its_modules_are_the_ones_the_run_sends() -> None:
    config = (REPO / "ansible.cfg").read_text()
    assert "callbacks_enabled = tf_runbook.multiworker.tf_module_payloads" in config
    source = (REPO / "plugins" / "callback" / "tf_module_payloads.py").read_text()
    roles = "\n".join(path.read_text() for path in (REPO / "roles").glob("*/tasks/*.yml"))
    for module in ("tf_preflight_host", "tf_worker_launch", "tf_worker_go", "tf_worker_wait"):
        assert f"- tf_runbook.multiworker.{module}" in source
        assert f"tf_runbook.multiworker.{module}:" in roles, module
