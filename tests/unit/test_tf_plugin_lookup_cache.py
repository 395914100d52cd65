"""A collection's filters and tests found once per controller process
(plugin_utils/tf_plugin_lookup_cache), which the tf_linear strategy finds before it forks
a task's workers from its second host on."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

# Each scenario runs in a process of its own: Ansible's plugin loaders (and this table)
# live for the process. ``searches`` counts Ansible's own search, by name.
PRELUDE = textwrap.dedent("""
    import json, os, sys
    from collections import Counter
    from ansible.plugins.loader import Jinja2Loader, filter_loader, init_plugin_loader
    init_plugin_loader([sys.argv[1]])
    from ansible._internal._datatag._tags import TrustedAsTemplate
    from ansible.errors import AnsibleError
    from ansible.template import Templar
    from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils import tf_plugin_lookup_cache as cache

    searches = Counter()
    _search = Jinja2Loader.get_with_context

    def counted(self, name, *args, **kwargs):
        searches[name] += 1
        return _search(self, name, *args, **kwargs)

    Jinja2Loader.get_with_context = counted

    def render(text, **variables):
        # A new templar, so a new Jinja environment: Ansible asks for the filter again.
        return Templar(loader=None, variables=variables).template(TrustedAsTemplate().tag(text))
""")


def run(body: str) -> Any:
    result = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body), str(REPO / "collections")],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_collection_filter_is_searched_for_once_however_many_environments_ask() -> None:
    out = run("""
        name = "tf_runbook.multiworker.tf_run_id_check"
        before = [render("{{ r | tf_runbook.multiworker.tf_run_id_check }}", r=f"run{i}") for i in range(3)]
        searched_before = searches[name]
        assert cache.install()
        after = [render("{{ r | tf_runbook.multiworker.tf_run_id_check }}", r=f"run{i}") for i in range(3)]
        print(json.dumps({"before": before, "after": after, "searched_before": searched_before,
                          "searched_after": searches[name] - searched_before, "stats": cache.stats()}))
    """)
    # Without the table, each new environment searches again; with it, once.
    assert out["before"] == out["after"] == ["run0", "run1", "run2"]
    assert out["searched_before"] == 3
    assert out["searched_after"] == 1
    assert out["stats"]["hits"] >= 2 and out["stats"]["entries"] >= 1


def test_a_name_that_finds_nothing_is_searched_for_each_time_and_fails_each_time() -> None:
    out = run("""
        assert cache.install()
        errors = []
        for _ in range(2):
            try:
                render("{{ 1 | tf_runbook.multiworker.tf_no_such_filter }}")
            except AnsibleError as exc:
                errors.append("tf_no_such_filter" in str(exc))
        print(json.dumps({"errors": errors, "searched": searches["tf_runbook.multiworker.tf_no_such_filter"],
                          "entries": cache.stats()["entries"]}))
    """)
    assert out["errors"] == [True, True]
    assert out["searched"] == 2
    assert out["entries"] == 0


def test_prefetch_finds_collection_names_only_and_tries_a_missing_one_once() -> None:
    out = run("""
        assert cache.install()
        names = ["tf_runbook.multiworker.tf_run_id_check", "tf_runbook.multiworker.tf_nothing_here",
                 "ansible.builtin.to_json", "tf_dir", "a.b", "not a name", 3]
        first = cache.prefetch(names)
        second = cache.prefetch(names)
        print(json.dumps({"first": first, "second": second, "searched": dict(searches),
                          "entries": cache.stats()["entries"]}))
    """)
    assert out["first"] == 1 and out["second"] == 0
    # As a filter and as a test, each once; the rest never.
    assert out["searched"] == {"tf_runbook.multiworker.tf_run_id_check": 2, "tf_runbook.multiworker.tf_nothing_here": 2}
    assert out["entries"] == 1


def test_a_worker_forked_after_prefetch_searches_for_nothing() -> None:
    out = run("""
        assert cache.install()
        cache.prefetch(["tf_runbook.multiworker.tf_run_id_check"])
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker: render as a task's worker would, and report
            try:
                before = sum(searches.values())
                value = render("{{ r | tf_runbook.multiworker.tf_run_id_check }}", r="r1")
                os.write(write, json.dumps([value, sum(searches.values()) - before]).encode())
            finally:
                os._exit(0)
        os.close(write)
        data = os.read(read, 4096)
        os.waitpid(pid, 0)
        print(json.dumps(json.loads(data)))
    """)
    assert out == ["r1", 0]


def test_a_new_plugin_directory_empties_the_table_and_uninstall_puts_ansibles_search_back() -> None:
    out = run("""
        import tempfile
        assert cache.install() and cache.install()
        render("{{ r | tf_runbook.multiworker.tf_run_id_check }}", r="r1")
        kept = cache.stats()["entries"]
        filter_loader.add_directory(tempfile.mkdtemp())
        emptied = cache.stats()["entries"]
        render("{{ r | tf_runbook.multiworker.tf_run_id_check }}", r="r1")
        searched = searches["tf_runbook.multiworker.tf_run_id_check"]
        cache.uninstall()
        print(json.dumps({"kept": kept, "emptied": emptied, "searched": searched,
                          "restored": Jinja2Loader.get_with_context is counted, "stats": cache.stats()}))
    """)
    assert out["kept"] == 1 and out["emptied"] == 0 and out["searched"] == 2
    assert out["restored"] is True
    assert out["stats"] == {"hits": 0, "searches": 0, "entries": 0}
