# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Other hosts' variables, as a check of every host's inputs reads them.

A check run once for the play (``tf_role_inputs``) reads, on each other host, the values
that host sets itself (``hostvars[host]``: inventory, extra vars, facts) and compares them
with the task's host's. A fact set once for every host (a ``set_fact`` with ``run_once``:
the cluster spec, the run id) is one object that every host's variables hold, and reading
it through ``hostvars`` templates it whole, on each host: with the cluster spec of 128
workers, 4 ms a host and read, about 3 s of the controller's CPU for the two checks of a
run at 128 hosts (issue 42, measured with ``getrusage`` around ``HostVarsVars``), the
square of the hosts.

``host_views`` gives each other host's variables without the values it holds as the very
same object as the task's host, where that object holds no template: the same value, read
and checked once, on the task's host. What is left out is what the check would have read,
found equal and skipped. A value that is a template (a group variable
``"{{ ... }}"`` that every host inherits) is still read on each host: it may come out
differently on each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

_MISSING = object()


class HostVariables(Mapping[str, Any]):
    """One host's variables (``view``, which templates a value as it is read), less the
    names ``shared`` says it holds as the task's host does (given each raw value)."""

    def __init__(self, raw: Mapping[str, Any], view: Mapping[str, Any], shared: Callable[[str, Any], bool]) -> None:
        self._raw = raw
        self._view = view
        self._shared = shared

    def _own(self, name: str) -> bool:
        value = self._raw.get(name, _MISSING)
        return value is not _MISSING and not self._shared(name, value)

    def __getitem__(self, name: str) -> Any:
        if not self._own(name):
            raise KeyError(name)
        return self._view[name]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._own(name)

    def __iter__(self) -> Iterator[str]:
        return (name for name in self._raw if self._own(name))

    def __len__(self) -> int:
        return sum(1 for _name in self)


class SharedWith:
    """Whether another host holds a value as the task's host does: the very same object
    as ``own`` (the task's raw variables) holds under that name, and no template
    (``is_template``, asked once per name)."""

    def __init__(self, own: Mapping[str, Any], is_template: Callable[[Any], bool]) -> None:
        self._own = own
        self._is_template = is_template
        self._plain: dict[str, bool] = {}

    def __call__(self, name: str, value: Any) -> bool:
        mine = self._own.get(name, _MISSING)
        if mine is _MISSING or mine is not value:
            return False
        if name not in self._plain:
            self._plain[name] = not self._is_template(mine)
        return self._plain[name]


def host_views(hostvars: Mapping[str, Any], hosts: Iterable[str], own: Mapping[str, Any],
               is_template: Callable[[Any], bool],
               view_of: Callable[[Mapping[str, Any], str], Mapping[str, Any]] | None = None) -> dict[str, HostVariables]:
    """Each of ``hosts`` (those ``hostvars`` has) as ``HostVariables``, its variables
    computed once. ``hostvars`` is Ansible's (``raw_get`` gives a host's untemplated
    variables, ``view_of`` makes the templating view of them, as ``hostvars[host]``
    would) or a plain mapping of hosts to variables, which are then their own raw values."""
    shared = SharedWith(own, is_template)
    raw_get = getattr(hostvars, "raw_get", None)
    views: dict[str, HostVariables] = {}
    for host in hosts:
        if host not in hostvars:
            continue
        if raw_get is not None and view_of is not None:
            raw = raw_get(host)
            views[host] = HostVariables(raw, view_of(raw, host), shared)
        else:
            variables = hostvars[host]
            views[host] = HostVariables(variables, variables, shared)
    return views
