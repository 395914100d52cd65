"""The strategy tf_linear: the linear strategy whose main loop sleeps until a result (or a
worker's request) arrives, instead of looking every millisecond; the project selects it."""

from __future__ import annotations

import configparser
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ansible.errors import AnsibleError
from ansible.plugins.strategy import StrategySentinel

from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils import tf_plugin_lookup_cache, tf_template_cache
from ansible_collections.tf_runbook.multiworker.plugins.strategy import tf_linear

REPO = Path(__file__).resolve().parents[2]


class FinalQueue:
    """The task queue manager's queue of worker messages: the result thread it feeds ends at once."""

    def get(self, *args: Any, **kwargs: Any) -> StrategySentinel:
        return StrategySentinel()


@pytest.fixture(autouse=True)
def _ansibles_own_compile(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A strategy keeps compiled templates and found filters process-wide: the other tests
    get Ansible's own back (and this user's store on disk is left alone)."""
    monkeypatch.setenv("TF_TEMPLATE_CACHE_DIR", str(tmp_path / "templates"))
    yield
    tf_template_cache.uninstall()
    tf_plugin_lookup_cache.uninstall()


def test_the_strategy_keeps_compiled_templates_and_filters_and_fills_them_before_it_queues_a_task(monkeypatch: pytest.MonkeyPatch) -> None:
    warmed: list[tuple[Any, Any]] = []
    queued: list[str] = []
    prefetched: list[set[str]] = []

    def warm(loader: Any, task: Any, task_vars: Any, names: set[str]) -> int:
        warmed.append((task, task_vars))
        names.add("tf_runbook.multiworker.tf_config")
        return 1

    monkeypatch.setattr(tf_template_cache, "warm", warm)
    monkeypatch.setattr(tf_plugin_lookup_cache, "prefetch", lambda names: prefetched.append(set(names)))
    monkeypatch.setattr(tf_linear.LinearStrategyModule, "_queue_task",
                        lambda self, host, task, task_vars, play_context: queued.append(host))
    module = strategy()
    assert module._tf_templates_kept and tf_template_cache.stats()["entries"] == 0
    assert module._tf_plugins_kept and tf_plugin_lookup_cache.stats()["entries"] == 0
    task, variables = object(), {"a": 1}
    module._queue_task("node1", task, variables, None)
    # The filters the warmed templates call are found before the worker is forked.
    assert warmed == [(task, variables)] and queued == ["node1"]
    assert prefetched == [{"tf_runbook.multiworker.tf_config"}]


def strategy(dead: list[bool] | None = None) -> tf_linear.StrategyModule:
    dead = dead if dead is not None else [False]
    tqm = SimpleNamespace(
        get_inventory=lambda: None, _workers=[], get_variable_manager=lambda: None, get_loader=lambda: None,
        _final_q=FinalQueue(), _terminated=False, has_dead_workers=lambda: dead[0],
    )  # fmt: skip
    return tf_linear.StrategyModule(tqm)


class Reader:
    """Stands for _process_pending_results: takes what the result thread appended, one
    pending result each, and counts its calls (each is one look of the main loop)."""

    def __init__(self, plugin: tf_linear.StrategyModule) -> None:
        self.plugin = plugin
        self.looks = 0
        self.taken_at: list[float] = []

    def __call__(self, iterator: Any) -> list:
        self.looks += 1
        taken = []
        while self.plugin._results:
            taken.append(self.plugin._results.popleft())
            self.plugin._pending_results -= 1
            self.taken_at.append(time.monotonic())
        return taken


def test_the_main_loop_sleeps_until_a_result_arrives_and_takes_it_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two results arrive 0.5 s apart: each is taken within a few milliseconds of its
    arrival, and the loop looked about once per DEAD_WORKER_CHECK_SECONDS meanwhile (the
    linear strategy looks every internal_poll_interval, 1 ms: about 1000 looks here)."""
    plugin = strategy()
    reader = Reader(plugin)
    monkeypatch.setattr(plugin, "_process_pending_results", reader)
    plugin._pending_results = 2
    arrived: list[float] = []

    def result_thread() -> None:
        for name in ("a", "b"):
            time.sleep(0.5)
            arrived.append(time.monotonic())
            plugin._results.append(name)

    sender = threading.Thread(target=result_thread)
    sender.start()
    results = plugin._wait_on_pending_results(iterator=None)
    sender.join()
    assert results == ["a", "b"] and plugin._pending_results == 0
    delays = [taken - at for taken, at in zip(reader.taken_at, arrived)]
    print(f"\nlooks: {reader.looks}, delays: {[f'{d * 1000:.1f} ms' for d in delays]}")
    assert all(delay < tf_linear.DEAD_WORKER_CHECK_SECONDS / 2 for delay in delays), delays
    assert reader.looks <= 1.0 / tf_linear.DEAD_WORKER_CHECK_SECONDS + 5, reader.looks


def test_a_workers_request_to_the_controller_wakes_the_main_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's add_host waits for the main loop to serve it: the request wakes it."""
    plugin = strategy()
    served: list[float] = []

    def reader(iterator: Any) -> list:
        try:
            plugin._rpc_queue.get(block=False)
        except Exception:  # noqa: BLE001 - queue.Empty: nothing asked yet
            return []
        served.append(time.monotonic())
        plugin._pending_results = 0
        return ["served"]

    monkeypatch.setattr(plugin, "_process_pending_results", reader)
    plugin._pending_results = 1
    threading.Timer(0.3, lambda: (asked.append(time.monotonic()), plugin._rpc_queue.put("add_host"))).start()
    asked: list[float] = []
    assert plugin._wait_on_pending_results(iterator=None) == ["served"]
    assert served[0] - asked[0] < tf_linear.DEAD_WORKER_CHECK_SECONDS / 2, served[0] - asked[0]


def test_a_dead_worker_still_ends_the_wait_with_the_linear_strategys_error(monkeypatch: pytest.MonkeyPatch) -> None:
    dead = [False]
    plugin = strategy(dead)
    monkeypatch.setattr(plugin, "_process_pending_results", lambda iterator: [])
    plugin._pending_results = 1
    threading.Timer(0.2, lambda: dead.__setitem__(0, True)).start()
    started = time.monotonic()
    with pytest.raises(AnsibleError, match="A worker was found in a dead state"):
        plugin._wait_on_pending_results(iterator=None)
    assert time.monotonic() - started < 0.2 + 4 * tf_linear.DEAD_WORKER_CHECK_SECONDS


def test_the_project_selects_it_and_a_playbook_runs_with_it(tmp_path: Path) -> None:
    """ansible.cfg names the strategy; a play on localhost runs a task through it."""
    config = configparser.ConfigParser(interpolation=None)
    config.read(REPO / "ansible.cfg")
    assert config["defaults"]["strategy"] == "tf_runbook.multiworker.tf_linear"
    play = tmp_path / "play.yml"
    play.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n"
                    "    - name: Say which strategy runs the play\n      ansible.builtin.debug:\n"
                    "        msg: ran {{ ansible_play_name | default('') }}\n")  # fmt: skip
    env = {"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "PATH": "/usr/bin:/bin", "HOME": str(Path.home()),
           "ANSIBLE_STDOUT_CALLBACK": "default", "ANSIBLE_DEBUG": "1"}  # fmt: skip
    result = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                             str(play)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout + result.stderr
    assert re.search(r"Loading StrategyModule '[\w.]*\.plugins\.strategy\.tf_linear'", out), out[-3000:]


def meta_task(action: str = "meta", meta: str = "end_role", any_errors_fatal: Any = None) -> SimpleNamespace:
    """What reads_no_variables reads of a task."""
    return SimpleNamespace(action=action, any_errors_fatal=any_errors_fatal,
                           _get_meta=lambda: meta if action in ("meta", "ansible.builtin.meta") else None)


@pytest.mark.parametrize(("task", "expected"), [
    (meta_task(), True),
    (meta_task(meta="flush_handlers"), True),
    (meta_task(meta="role_complete"), True),
    (meta_task("ansible.builtin.meta", "end_host", True), True),
    # reset_connection makes the host's variables for its connection.
    (meta_task(meta="reset_connection"), False),
    (meta_task(meta="refresh_inventory"), False),
    # An action or any_errors_fatal the loop templates needs the variables.
    (meta_task("{{ my_action }}"), False),
    (meta_task(any_errors_fatal="{{ strict }}"), False),
    (SimpleNamespace(action="ansible.builtin.debug", any_errors_fatal=None, _get_meta=lambda: None), False),
    (object(), False),
])  # fmt: skip
def test_only_meta_tasks_that_read_no_variables_skip_them(task: Any, expected: bool) -> None:
    assert tf_linear.reads_no_variables(task) is expected


def test_the_main_loop_gets_no_variables_for_such_a_meta_task_and_its_run_gets_the_hosts_own() -> None:
    made: list[Any] = []
    manager = SimpleNamespace(get_vars=lambda **kwargs: made.append(kwargs.get("task")) or {"made": True}, extra=1)
    plugin = strategy()
    plugin._tf_in_meta = 0
    loop_vars = tf_linear._LoopVariables(manager, plugin)
    gate, debug = meta_task(meta="end_host"), SimpleNamespace(action="ansible.builtin.debug", any_errors_fatal=None,
                                                             _get_meta=lambda: None)
    assert loop_vars.get_vars(play=None, host="h", task=gate) == {}
    assert loop_vars.get_vars(play=None, host="h", task=debug) == {"made": True}
    assert loop_vars.get_vars(play=None, host="h") == {"made": True}
    plugin._tf_in_meta = 1  # inside _execute_meta: its conditional's variables are the host's
    assert loop_vars.get_vars(play=None, host="h", task=gate) == {"made": True}
    # The gate's variables were made once: inside its run, not in the loop.
    assert made == [debug, None, gate]
    # Every other attribute is the manager's, read and written.
    assert loop_vars.extra == 1
    loop_vars.extra = 2
    assert manager.extra == 2


def test_meta_tasks_still_see_each_hosts_variables_in_a_playbook(tmp_path: Path) -> None:
    """end_host, end_role and flush_handlers with conditionals on host variables, over three
    hosts: each host ends, or not, by its own variables."""
    role = tmp_path / "roles" / "gated" / "tasks"
    role.mkdir(parents=True)
    (role / "main.yml").write_text(
        "- name: End the role where the host says so\n  ansible.builtin.meta: end_role\n  when: stop_role | default(false) | bool\n"
        "- name: Say the role went on\n  ansible.builtin.debug:\n    msg: role-went-on-{{ inventory_hostname }}\n")
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: all\n  gather_facts: false\n  roles: [gated]\n  tasks:\n"
        "    - name: Notify a handler\n      ansible.builtin.debug:\n        msg: notify\n"
        "      changed_when: true\n      notify: Say the handler ran\n"
        "    - name: Flush handlers where the host says so\n      ansible.builtin.meta: flush_handlers\n"
        "      when: flush | default(false) | bool\n"
        "    - name: End the host where it says so\n      ansible.builtin.meta: end_host\n      when: stop_host | default(false) | bool\n"
        "    - name: Say the host went on\n      ansible.builtin.debug:\n        msg: host-went-on-{{ inventory_hostname }}\n"
        "  handlers:\n    - name: Say the handler ran\n      ansible.builtin.debug:\n        msg: handler-{{ inventory_hostname }}\n")
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("h1 stop_role=true\nh2 stop_host=true flush=true\nh3\n"
                         "[all:vars]\nansible_connection=local\nansible_python_interpreter=" + sys.executable + "\n")
    env = {"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "PATH": "/usr/bin:/bin", "HOME": str(Path.home()),
           "ANSIBLE_STDOUT_CALLBACK": "default", "ANSIBLE_ROLES_PATH": str(tmp_path / "roles")}  # fmt: skip
    result = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(play)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    said = set(re.findall(r'"msg": "((?:role-went-on|host-went-on|handler)-h\d)"', out))
    assert said == {"role-went-on-h2", "role-went-on-h3", "host-went-on-h1", "host-went-on-h3",
                    "handler-h1", "handler-h2", "handler-h3"}, out[-3000:]
    # h2 flushed its handler before it ended: the handler ran there before the end_host.
    assert out.index('"msg": "handler-h2"') < out.index('"msg": "host-went-on-h1"'), out[-3000:]
