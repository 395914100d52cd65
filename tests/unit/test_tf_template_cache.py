"""Compiled templates kept in the controller's main process (plugin_utils/tf_template_cache),
which the tf_linear strategy fills before it forks a task's workers."""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator, Mapping
from types import SimpleNamespace
from typing import Any

import pytest
from ansible._internal._datatag._tags import TrustedAsTemplate
from ansible.errors import AnsibleError
from ansible.template import Templar

from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils import tf_template_cache as cache


@pytest.fixture(autouse=True)
def no_store_on_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table alone: this user's store on disk (tests/unit/test_tf_template_store.py)
    would answer compiles counted here from an earlier run."""
    monkeypatch.setenv("TF_TEMPLATE_CACHE_DIR", "off")


def trusted(value: str) -> str:
    return TrustedAsTemplate().tag(value)


@pytest.fixture
def compiles(jinja_compiles: list[str]) -> Iterator[list[str]]:
    """Every template and expression Jinja compiles, by source, with the table installed."""
    assert cache.install()
    try:
        yield jinja_compiles
    finally:
        cache.uninstall()


def render(template: str, **variables: Any) -> Any:
    return Templar(loader=None, variables=variables).template(trusted(template))


def test_a_template_is_compiled_once_and_renders_each_engines_own_variables(compiles: list[str]) -> None:
    assert render("{{ a }}-{{ b | default('none') }}", a=1) == "1-none"
    assert render("{{ a }}-{{ b | default('none') }}", a=2, b="x") == "2-x"
    assert render("{{ a }}-{{ b | default('none') }}", a=3) == "3-none"
    assert compiles.count("{{ a }}-{{ b | default('none') }}") == 1
    assert cache.stats()["hits"] == 2


def test_a_conditional_is_compiled_once_and_evaluated_with_each_hosts_variables(compiles: list[str]) -> None:
    results = [Templar(loader=None, variables={"n": n}).evaluate_conditional(trusted("n | int > 2")) for n in (1, 5, 2)]
    assert results == [False, True, False]
    assert len(compiles) == 1


def test_a_compile_error_is_never_kept_and_names_its_own_origin_each_time(compiles: list[str]) -> None:
    for _ in range(2):
        with pytest.raises(AnsibleError, match="unexpected"):
            render("{{ a ) }}", a=1)
    assert cache.stats()["entries"] == 0


def test_a_template_that_loads_another_one_is_compiled_each_time(compiles: list[str], tmp_path: Any) -> None:
    text = "{% include 'part.j2' %}"
    for _ in range(2):
        with pytest.raises(AnsibleError):
            render(text)
    assert compiles.count(text) == 2
    assert cache.stats()["entries"] == 0


@pytest.mark.parametrize("text", [
    "{%+ include 'part.j2' %}",
    "{% from 'macros.j2' import m %}{{ m() }}",
    "{% extends 'base.j2' %}",
    "#jinja2:variable_start_string:'[[', variable_end_string:']]'\n[[ a ]]",
])
def test_a_template_that_loads_another_or_sets_its_own_jinja_settings_is_never_kept(compiles: list[str], text: str) -> None:
    for _ in range(2):
        try:
            render(text, a=1)
        except AnsibleError:
            pass  # no such template to load: compiled all the same
    assert compiles.count(text.split("\n", 1)[-1] if text.startswith("#jinja2:") else text) == 2
    assert cache.stats()["entries"] == 0


@pytest.mark.parametrize("text", [
    "--preimport {{ a }}",
    "{{ ['--preimport', a | string] | join(' ') }}",
    "{% if a %}extends {{ a }}{% endif %}",
    "{% raw %}{% include 'part.j2' %}{% endraw %}{{ a }}",
])
def test_a_template_that_only_names_a_loading_word_is_compiled_once(compiles: list[str], text: str) -> None:
    rendered = [render(text, a=a) for a in (1, 2, 3)]
    assert len(set(rendered)) == 3
    assert compiles.count(text) == 1
    assert cache.stats()["entries"] == 1


def test_a_conditional_that_names_a_loading_word_is_compiled_once(compiles: list[str]) -> None:
    results = [Templar(loader=None, variables={"flags": flags}).evaluate_conditional(trusted("'--preimport' in flags"))
               for flags in (["--preimport"], [], ["--preimport", "x"])]
    assert results == [True, False, True]
    assert len(compiles) == 1


def test_a_template_compiled_with_other_delimiters_is_never_kept(compiles: list[str]) -> None:
    from ansible._internal._templating._engine import TemplateOptions, TemplateOverrides

    options = TemplateOptions(overrides=TemplateOverrides(variable_start_string="[[", variable_end_string="]]"))
    for a in (1, 2):
        assert Templar(loader=None, variables={"a": a})._engine.template(trusted("[[ a ]]"), options=options) == a
    assert cache.stats()["entries"] == 0


class Task(SimpleNamespace):
    """What warm reads of a task."""

    def __init__(self, uuid: str = "t1", **fields: Any) -> None:
        defaults = {"args": {}, "vars": {}, "environment": None, "loop": None, "name": "a task", "delegate_to": None,
                    "when": [], "changed_when": [], "failed_when": [], "until": [], "run_once": False}
        super().__init__(_uuid=uuid, **{**defaults, **fields})


class Exploding(Mapping):
    """hostvars and the like: reading any value templates a whole host, so warm never walks one."""

    def __getitem__(self, key: str) -> Any:
        raise AssertionError(f"warm read {key} of a mapping that is not plain data")

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("warm walked a mapping that is not plain data")

    def __len__(self) -> int:
        return 1


def task_vars() -> dict[str, Any]:
    return {
        "tf_dir": trusted("{{ tf_base }}/runs/{{ tf_run_id }}"),
        "tf_base": trusted("{{ '/srv' if tf_fast | bool else '/data' }}"),
        "tf_run_id": "r1",
        "tf_fast": True,
        "tf_items": [trusted("{{ tf_other }}"), 3],
        "tf_other": trusted("{{ 2 * 2 }}"),
        "tf_unused": trusted("{{ never_compiled }}"),
        "hostvars": Exploding(),
        "untrusted": "{{ lookup('pipe', 'id') }}",
    }


def test_warm_compiles_a_tasks_arguments_conditionals_and_the_variables_they_name_from_its_second_host(compiles: list[str]) -> None:
    task = Task(args={"path": trusted("{{ tf_dir }}/x"), "items": trusted("{{ tf_items }}"), "keep": "plain",
                      "what": trusted("{{ untrusted }}")},
                when=[trusted("tf_fast | bool"), trusted("hostvars | length > 0")])
    assert cache.warm(None, task, task_vars()) == 0  # the first host compiles for itself
    assert compiles == []
    compiled = cache.warm(None, task, task_vars())
    kept = {key[1] for key in cache._table}
    assert kept == {"{{ tf_dir }}/x", "{{ tf_items }}", "{{ untrusted }}", "tf_fast | bool", "hostvars | length > 0",
                    "{{ tf_base }}/runs/{{ tf_run_id }}", "{{ '/srv' if tf_fast | bool else '/data' }}",
                    "{{ tf_other }}", "{{ 2 * 2 }}"}
    assert compiled == len(kept)
    # A third host compiles nothing more, and rendering finds everything compiled.
    assert cache.warm(None, task, task_vars()) == 0
    before = len(compiles)
    variables = task_vars()
    variables.pop("hostvars")
    assert Templar(loader=None, variables=variables).template(task.args["path"]) == "/srv/runs/r1/x"
    assert len(compiles) == before


def test_warm_gives_the_names_its_strings_may_look_up_the_filters_among_them(compiles: list[str]) -> None:
    task = Task(uuid="names", args={"v": trusted("{{ tf_items | map('string') | list }}")})
    names: set[str] = set()
    cache.warm(None, task, task_vars(), names)
    assert names == set()  # the first host's worker compiles for itself
    cache.warm(None, task, task_vars(), names)
    # The variables followed (tf_items holds a template naming tf_other), and the filters.
    assert {"tf_items", "tf_other", "map", "list"} <= names


def test_warm_walks_neither_lazy_containers_nor_the_variables_that_hold_every_variable_or_host(compiles: list[str]) -> None:
    from ansible._internal._templating._engine import TemplateContext, TemplateEngine, TemplateOptions
    from ansible._internal._templating._lazy_containers import _AnsibleLazyTemplateMixin

    engine = TemplateEngine(variables={"x": 1})
    with TemplateContext(template_value="", templar=engine, options=TemplateOptions.DEFAULT):
        lazy = _AnsibleLazyTemplateMixin._try_create({"a": trusted("{{ in_lazy }}")})
    assert isinstance(lazy, dict)
    variables = {**task_vars(), "tf_lazy": lazy, "vars": {"v": trusted("{{ in_vars }}")},
                 "groups": {"all": [trusted("{{ in_groups }}")]}}
    task = Task(uuid="walk", args={"a": trusted("{{ tf_lazy }} {{ vars['v'] }} {{ groups }}")})
    cache.warm(None, task, variables)
    assert cache.warm(None, task, variables) == 1
    assert {key[1] for key in cache._table} == {"{{ tf_lazy }} {{ vars['v'] }} {{ groups }}"}


def test_warm_looks_at_a_bounded_number_of_values_per_call(compiles: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "MAX_ITEMS", 10)
    variables = {**task_vars(), "tf_big": [trusted(f"{{{{ {n} }}}}") for n in range(100)]}
    task = Task(uuid="big", args={"a": trusted("{{ tf_big }}")})
    cache.warm(None, task, variables)
    assert 0 < cache.warm(None, task, variables) < 10


def test_warm_leaves_run_once_tasks_and_uninstalled_tables_alone(compiles: list[str]) -> None:
    once = Task(uuid="once", run_once=True, args={"a": trusted("{{ tf_dir }}")})
    for _ in range(3):
        assert cache.warm(None, once, task_vars()) == 0
    assert compiles == []
    cache.uninstall()
    task = Task(uuid="t2", args={"a": trusted("{{ tf_dir }}")})
    for _ in range(2):
        assert cache.warm(None, task, task_vars()) == 0
    assert compiles == []


def test_warm_never_raises_and_leaves_the_rest_to_the_worker(compiles: list[str]) -> None:
    class Broken(Task):
        @property
        def args(self) -> Any:
            raise RuntimeError("unreadable")

    broken = Broken(uuid="b")
    del broken.__dict__["args"]
    assert cache.warm(None, broken, task_vars()) == 0
    assert cache.warm(None, broken, task_vars()) == 0


def test_a_worker_forked_after_warm_compiles_nothing_of_its_task(compiles: list[str]) -> None:
    task = Task(uuid="fork", args={"path": trusted("{{ tf_dir }}/x")}, when=[trusted("tf_fast | bool")])
    cache.warm(None, task, task_vars())
    cache.warm(None, task, task_vars())
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker: render the task as TaskExecutor would, and report
        try:
            before = len(compiles)
            templar = Templar(loader=None, variables={k: v for k, v in task_vars().items() if k != "hostvars"})
            out = (templar.evaluate_conditional(task.when[0]), templar.template(task.args["path"]), len(compiles) - before)
            os.write(write, pickle.dumps(out))
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    assert pickle.loads(data) == (True, "/srv/runs/r1/x", 0)


def test_install_is_idempotent_and_uninstall_puts_ansibles_compile_back() -> None:
    from ansible._internal._templating._engine import TemplateEngine

    original = TemplateEngine._compile_template
    assert cache.install() and cache.install()
    assert TemplateEngine._compile_template is not original
    cache.uninstall()
    assert TemplateEngine._compile_template is original
    assert cache.stats() == {"hits": 0, "misses": 0, "warmed": 0, "read": 0, "entries": 0}
