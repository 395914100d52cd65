# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A collection's Jinja filters and tests, found once per controller process.

ansible-core 2.21 finds a collection's filter or test by its name (``tf_runbook.multiworker.
tf_config``) each time a Jinja environment first asks for it, and keeps nothing of the
search (its ``Jinja2Loader.get_with_context`` says so: "cache the collection results
properly here" is left for the future): it walks every plugin file of the collection's
filter package, loads each and reads its map (this collection: 13 files, 59 filters; a
search costs about 0.8 ms once they are imported). Every templar makes a new Jinja
environment, and each task on each host runs in a worker process of its own, which asks
again for every filter its templates name: measured on 16 namespace hosts (``getrusage``
around the loader, trivial job), 4 to 9 ms of a look's or a launch's worker (41 to 70 ms
in all).

``install`` keeps what a search found, by loader and name, in a table of this process,
so each name is searched for once per process (and never again after a new plugin
directory, which empties the table as it empties the loader's own caches). ``prefetch``,
which the tf_linear strategy calls in the main process with the names of the templates it
compiles for a task's workers (``tf_template_cache.warm``), finds those names before the
workers are forked: they inherit the table. A name that finds nothing is not kept (the
error is the search's each time); what is kept is what the search returned, the same
object for every environment, as Ansible shares its built-in filters. A version of Ansible
without the internals this relies on leaves everything as it was (``install`` returns
False).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

MAX_ENTRIES = 4096
# A name prefetch tries: a collection's filter or test by its full name (namespace,
# collection, name), not ansible.builtin's or ansible.legacy's, which Ansible keeps itself.
_FULL_NAME = re.compile(r"^(?!ansible\.(?:builtin|legacy)\.)[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$")
# The keyword arguments a Jinja2Loader ignores (it pops them); any other, or a positional
# one, makes a lookup that is never kept.
_IGNORED = frozenset({"class_only", "collection_list"})

_table: dict[tuple[str, str], Any] = {}
# Names prefetch tried and found nothing for, by loader type: tried once per process.
_not_found: set[tuple[str, str]] = set()
_stats = {"hits": 0, "searches": 0}
_installed: list[Any] = []


def install() -> bool:
    """Keep what a Jinja2Loader's search finds, in this process (idempotent). False when
    this Ansible lacks what the table relies on: nothing is changed then."""
    if _installed:
        return True
    try:
        from ansible.plugins.loader import Jinja2Loader
        search = Jinja2Loader.get_with_context
        clear = Jinja2Loader._clear_caches
    except (ImportError, AttributeError):
        return False

    def get_with_context(self: Any, name: Any, *args: Any, **kwargs: Any) -> Any:
        if args or not isinstance(name, str) or not _IGNORED.issuperset(kwargs):
            return search(self, name, *args, **kwargs)
        key = (self.type, name)
        found = _table.get(key)
        if found is not None:
            _stats["hits"] += 1
            return found
        _stats["searches"] += 1
        found = search(self, name, *args, **kwargs)
        if getattr(found, "object", None) is not None and len(_table) < MAX_ENTRIES:
            _table[key] = found
        return found

    def _clear_caches(self: Any) -> None:
        clear(self)
        for key in [key for key in _table if key[0] == self.type]:
            del _table[key]
        _not_found.difference_update([key for key in _not_found if key[0] == self.type])

    Jinja2Loader.get_with_context = get_with_context
    Jinja2Loader._clear_caches = _clear_caches
    _installed.append((Jinja2Loader, search, clear))
    return True


def uninstall() -> None:
    """Undo ``install`` and empty the table (for tests)."""
    if _installed:
        loader_class, search, clear = _installed.pop()
        loader_class.get_with_context = search
        loader_class._clear_caches = clear
    _table.clear()
    _not_found.clear()
    for key in _stats:
        _stats[key] = 0


def stats() -> dict[str, int]:
    return dict(_stats, entries=len(_table))


def prefetch(names: Iterable[str]) -> int:
    """Find, as filters and as tests, each of ``names`` that is a collection plugin's full
    name and is not in the table yet (a name that found nothing before is not tried
    again). The number of names found now. Never raises: a worker finds for itself what
    this did not."""
    if not _installed:
        return 0
    try:
        from ansible.plugins.loader import filter_loader, test_loader
    except ImportError:
        return 0
    found_now = 0
    for name in names:
        if not isinstance(name, str) or not _FULL_NAME.match(name):
            continue
        for loader in (filter_loader, test_loader):
            key = (loader.type, name)
            if key in _table or key in _not_found:
                continue
            try:
                found = loader.get_with_context(name)
            except Exception:  # noqa: BLE001 - not a plugin's name, or one that fails to load
                found = None
            if key in _table:
                found_now += 1
            elif getattr(found, "object", None) is None and len(_not_found) < MAX_ENTRIES:
                _not_found.add(key)
    return found_now
