"""Compiled templates kept on the controller's disk from one run to the next
(plugin_utils/tf_template_store, used by plugin_utils/tf_template_cache)."""

from __future__ import annotations

import marshal
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible._internal._datatag._tags import TrustedAsTemplate
from ansible._internal._templating._jinja_bits import AnsibleEnvironment
from ansible.errors import AnsibleError
from ansible.template import Templar

from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils import tf_template_cache as cache
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils import tf_template_store as store


def trusted(value: str) -> str:
    return TrustedAsTemplate().tag(value)


@pytest.fixture
def top(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "cache" / "templates"
    monkeypatch.setenv(store.ENV_DIR, str(directory))
    return directory


@pytest.fixture
def compiles(jinja_compiles: list[str]) -> list[str]:
    return jinja_compiles


@pytest.fixture
def run() -> Iterator[Any]:
    """``run()`` starts what a new ansible-playbook would have: an empty table, installed."""
    def start() -> None:
        cache.uninstall()
        assert cache.install()

    yield start
    cache.uninstall()


def code_files(top: Path) -> list[Path]:
    return sorted(top.glob("*/*.code"))


def render(template: str, **variables: Any) -> Any:
    return Templar(loader=None, variables=variables).template(trusted(template))


def render_in_two_runs(run: Any, text: str) -> list[Any]:
    """``text`` rendered with a = 1 in one run, then with a = 2 in the next."""
    rendered = []
    for value in (1, 2):
        run()
        rendered.append(render(text, a=value))
    return rendered


def test_a_template_compiled_by_one_run_is_read_by_the_next_and_renders_its_own_variables(
        top: Path, compiles: list[str], run: Any) -> None:
    text = "{{ a }}-{{ b | default('none') }}"
    run()
    assert render(text, a=1) == "1-none"
    assert compiles == [text]
    assert len(code_files(top)) == 1
    run()
    assert render(text, a=2, b="x") == "2-x"
    assert render(text, a=3) == "3-none"
    assert compiles == [text]  # not compiled again
    assert cache.stats()["read"] == 1 and cache.stats()["hits"] == 1


def test_a_conditional_compiled_by_one_run_is_read_by_the_next(top: Path, compiles: list[str], run: Any) -> None:
    run()
    assert Templar(loader=None, variables={"n": 1}).evaluate_conditional(trusted("n | int > 2")) is False
    run()
    assert Templar(loader=None, variables={"n": 5}).evaluate_conditional(trusted("n | int > 2")) is True
    assert compiles == ["<expression>"]
    assert cache.stats()["read"] == 1


def test_a_template_that_does_not_compile_is_never_written_and_fails_the_same_each_run(
        top: Path, run: Any) -> None:
    for _ in range(2):
        run()
        with pytest.raises(AnsibleError, match="unexpected"):
            render("{{ a + }}", a=1)
    assert code_files(top) == []


def test_a_template_that_loads_another_is_never_written(top: Path, run: Any) -> None:
    run()
    with pytest.raises(AnsibleError):
        render("{% if a %}{% include 'part.j2' %}{% endif %}", a=1)
    assert code_files(top) == []
    # One that only names the word is written.
    assert render("{% if a %}{{ a }}{% endif %} imports", a=1) == "1 imports"
    assert len(code_files(top)) == 1


def test_a_file_that_does_not_load_is_compiled_again_and_written_over(top: Path, compiles: list[str], run: Any) -> None:
    run()
    render("{{ a }}!", a=1)
    (kept,) = code_files(top)
    kept.write_bytes(b"\x00not marshal")
    run()
    assert render("{{ a }}!", a=2) == "2!"
    assert compiles == ["{{ a }}!", "{{ a }}!"]
    assert cache.stats()["read"] == 0
    assert isinstance(marshal.loads(kept.read_bytes()), type(compile("1", "x", "eval")))
    run()
    assert render("{{ a }}!", a=3) == "3!"
    assert cache.stats()["read"] == 1


def test_a_file_that_another_may_write_to_is_not_run(top: Path, compiles: list[str], run: Any) -> None:
    run()
    render("{{ a }}?", a=1)
    (kept,) = code_files(top)
    kept.chmod(0o664)
    run()
    assert render("{{ a }}?", a=2) == "2?"
    assert compiles == ["{{ a }}?", "{{ a }}?"]
    assert cache.stats()["read"] == 0


@pytest.mark.parametrize("mode", [0o770, 0o757])
def test_a_directory_that_another_may_write_to_is_left_alone_and_nothing_is_kept(
        top: Path, compiles: list[str], run: Any, mode: int) -> None:
    top.mkdir(parents=True)
    top.chmod(mode)
    assert render_in_two_runs(run, "{{ a }}.") == ["1.", "2."]
    assert compiles == ["{{ a }}.", "{{ a }}."]
    assert list(top.iterdir()) == []
    assert stat.S_IMODE(top.stat().st_mode) == mode


def test_off_keeps_nothing_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiles: list[str],
                                   run: Any) -> None:
    monkeypatch.setenv(store.ENV_DIR, "off")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert render_in_two_runs(run, "{{ a }};") == ["1;", "2;"]
    assert compiles == ["{{ a }};", "{{ a }};"]
    assert list(tmp_path.iterdir()) == []


def test_the_directory_comes_from_the_variable_else_the_xdg_cache_home_else_home() -> None:
    assert store.default_directory({store.ENV_DIR: "/srv/c"}) == "/srv/c"
    assert store.default_directory({store.ENV_DIR: " OFF "}) is None
    assert store.default_directory({store.ENV_DIR: ""}) is None
    assert store.default_directory({"XDG_CACHE_HOME": "/x"}) == "/x/tf_runbook/templates"
    assert store.default_directory({}) == os.path.join(os.path.expanduser("~"), ".cache", "tf_runbook", "templates")


def test_another_environment_setting_or_version_reads_nothing_written_before() -> None:
    env = AnsibleEnvironment()
    other = env.overlay(variable_start_string="<<", variable_end_string=">>")
    key = store.settings_key(env, (False,))
    assert store.fingerprint(key) == store.fingerprint(store.settings_key(AnsibleEnvironment(), (False,)))
    assert store.fingerprint(key) != store.fingerprint(store.settings_key(other, (False,)))
    assert store.fingerprint(key) != store.fingerprint(store.settings_key(env, (True,)))


def test_a_kept_file_is_named_by_the_text_its_kind_and_the_backslash_setting(tmp_path: Path) -> None:
    kept = store.Store(str(tmp_path), "f" * 64)
    names = {kept.path(kind, text, escape) for kind in "te" for text in ("a", "b") for escape in (True, False)}
    assert len(names) == 8
    assert store.Store(str(tmp_path), "0" * 64).path("t", "a", True) not in names


def test_prune_removes_the_oldest_half_past_the_limit_and_files_left_half_written(tmp_path: Path) -> None:
    kept = store.Store(str(tmp_path), "f" * 64)
    for number in range(10):
        path = tmp_path / f"{number:02d}.code"
        path.write_bytes(b"x")
        os.utime(path, (1000 + number, 1000 + number))
    (tmp_path / ".part-abc").write_bytes(b"x")
    assert kept.prune(max_files=20) == 1
    assert len(list(tmp_path.iterdir())) == 10
    assert kept.prune(max_files=8) == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["06.code", "07.code", "08.code", "09.code"]


def test_a_worker_forked_after_a_run_wrote_reads_the_same_code(top: Path, run: Any) -> None:
    """What one process writes, a process started later reads: the store is on disk."""
    run()
    render("{{ a * 2 }}", a=2)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            cache.uninstall()
            cache.install()
            ok = render("{{ a * 2 }}", a=21) == 42 and cache.stats()["read"] == 1
        except BaseException:
            ok = False
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_only_the_process_that_installed_the_table_prunes(top: Path, run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker forked from the playbook's main process opens the store too: it must not
    list the directory each time (up to MAX_FILES entries)."""
    pruned: list[int] = []
    monkeypatch.setattr(store.Store, "prune", lambda self, max_files=store.MAX_FILES: pruned.append(os.getpid()) or 0)
    run()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child, as a worker: it opens the store first
        render("{{ a }}#", a=1)
        os._exit(0 if not pruned else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    render("{{ a }}#", a=2)
    assert pruned == [os.getpid()]
