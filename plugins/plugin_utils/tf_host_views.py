# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Other hosts' variables, read by a task that runs once for the play.

``task_variables`` gives each host's variables as this task would see them on that
host: what one controller task that describes every host reads instead of a task on every
host (a worker process each, about 40 ms of the controller's CPU per host at 16 hosts).

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


class HostVariablesError(Exception):
    """This Ansible does not give a task another host's variables the way this module reads them."""


def task_variables(task: Any, task_vars: Mapping[str, Any], hosts: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Each of ``hosts`` to its variables as ``task`` sees them there, untemplated: role
    defaults, play and role variables, inventory, facts, extra vars, in Ansible's order of
    precedence (what the strategy gives the task on that host). ``task_vars`` are the task's
    own, whose lists of the play's hosts are given again (as the strategy gives them)."""
    manager = task.get_variable_manager() if hasattr(task, "get_variable_manager") else None
    inventory = getattr(manager, "_inventory", None)
    if manager is None or inventory is None or not hasattr(task, "get_play"):
        raise HostVariablesError(
            "this ansible-core gives an action no variable manager with an inventory (the runbook needs 2.21)")
    play = task.get_play()
    batch = list(task_vars.get("ansible_play_batch") or [])
    every = list(task_vars.get("ansible_play_hosts_all") or [])
    variables: dict[str, dict[str, Any]] = {}
    for name in hosts:
        host = inventory.get_host(name)
        if host is None:
            raise HostVariablesError(f"host {name}: not in the inventory")
        variables[name] = manager.get_vars(play=play, host=host, task=task, _hosts=batch or None,
                                           _hosts_all=every or None)
    return variables


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
