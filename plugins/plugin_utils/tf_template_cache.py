# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compiled Jinja templates shared by the controller's worker processes.

Ansible compiles a template or a conditional each time it renders one (ansible-core 2.21
keeps no compiled template), and every task runs on each host in a worker process forked
for that one task: whatever a worker compiles dies with it. Measured on 16 namespace
hosts (py-spy, trivial job), compiling was about 40 % of the workers' CPU, and the
workers about half of the controller's: the same strings, compiled again for each host.

``install`` keeps each compiled template and expression in a table of this process,
keyed by its text and the options that change compiling. ``warm``, called by the
tf_linear strategy in the main process just before it forks a task's worker for a host,
compiles what that worker will compile: the task's arguments, its conditionals, and,
followed by name, the template strings of the variables they refer to (transitively).
The workers forked after it find them in the table they inherited. A task's first host is
left to compile for itself, as without the table: a task that runs on one host
(``run_once``, a one-host play) so costs the main process nothing more, and a template
compiled for one task serves every later task's workers too.

Only what compiles the same everywhere is kept: a template that includes, imports or
extends another (whose lookup depends on the loader's base directory) is compiled each
time, and a compile error is never kept, so that each error names its own origin.
Nothing is rendered in the main process, and only strings trusted as templates are
compiled there. The table holds at most ``MAX_ENTRIES``; past it, new strings are
compiled each time as before. A version of Ansible without the internals this relies on
leaves everything as it was (``install`` returns False).
"""

from __future__ import annotations

import re
import types
from collections.abc import Mapping
from typing import Any

MAX_ENTRIES = 8192
# Variables followed from one task's roots (arguments, conditionals), at the most.
MAX_FOLLOWED = 2048
# Nested data walked for strings: depth and items at the most.
MAX_DEPTH = 6
MAX_ITEMS = 4096
_LOADS_OTHER_TEMPLATE = re.compile(r"{%-?\s*(include|import|extends|from)\b")

_table: dict[tuple, Any] = {}
_stats = {"hits": 0, "misses": 0, "warmed": 0}
_followed_by_task: dict[str, tuple[str, ...]] = {}
_queued_once: set[str] = set()
_installed: list[Any] = []


def _shareable(text: str) -> bool:
    return ("{%" not in text or not _LOADS_OTHER_TEMPLATE.search(text)) and len(text) < 65536


def install() -> bool:
    """Keep compiled templates in this process's table (idempotent). False when this
    Ansible lacks what the table relies on: nothing is changed then."""
    if _installed:
        return True
    try:
        from ansible._internal._templating._engine import TemplateEngine
        from ansible._internal._templating._jinja_bits import AnsibleTemplate, AnsibleTemplateExpression
        compile_template = TemplateEngine._compile_template
        compile_expression = TemplateEngine._compile_expression
    except (ImportError, AttributeError):
        return False

    def _kept(compile_: Any, compiled_type: type, self: Any, text: Any, options: Any, key: tuple | None) -> Any:
        """``compile_(self, text, options)``, from the table under ``key`` when it is
        there, and kept there when it compiled (None: never kept)."""
        try:
            kept = _table.get(key) if key is not None else None
        except TypeError:  # options that do not hash
            key = kept = None
        if kept is not None:
            _stats["hits"] += 1
            return kept
        _stats["misses"] += 1
        compiled = compile_(self, text, options)
        if key is not None and isinstance(compiled, compiled_type) and len(_table) < MAX_ENTRIES:
            _table[key] = compiled
        return compiled

    def _compile_template_kept(self: Any, template: str, options: Any) -> Any:
        text = str(template)
        key = ("t", text, options.escape_backslashes, options.overrides) if _shareable(text) else None
        return _kept(compile_template, AnsibleTemplate, self, template, options, key)

    def _compile_expression_kept(self: Any, expression: str, options: Any) -> Any:
        text = str(expression)
        key = ("e", text, options.escape_backslashes) if _shareable(text) else None
        return _kept(compile_expression, AnsibleTemplateExpression, self, expression, options, key)

    TemplateEngine._compile_template = _compile_template_kept
    TemplateEngine._compile_expression = _compile_expression_kept
    _installed.append((TemplateEngine, compile_template, compile_expression))
    return True


def uninstall() -> None:
    """Undo ``install`` and empty the table (for tests)."""
    if _installed:
        engine, compile_template, compile_expression = _installed.pop()
        engine._compile_template = compile_template
        engine._compile_expression = compile_expression
    _table.clear()
    _followed_by_task.clear()
    _queued_once.clear()
    for key in _stats:
        _stats[key] = 0


def stats() -> dict[str, int]:
    return dict(_stats, entries=len(_table))


def _template_strings(value: Any, out: list[str], trusted: Any, depth: int = 0) -> None:
    """The strings of ``value`` (nested data) that are trusted templates, into ``out``."""
    if len(out) >= MAX_ITEMS or depth > MAX_DEPTH:
        return
    if isinstance(value, str):
        if ("{{" in value or "{%" in value) and trusted(value):
            out.append(value)
    elif isinstance(value, dict):  # plain data only: never hostvars and the like, which template
        for item in list(value.values())[:MAX_ITEMS]:
            _template_strings(item, out, trusted, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value[:MAX_ITEMS]:
            _template_strings(item, out, trusted, depth + 1)


def _names(compiled: Any) -> set[str]:
    """The names a compiled template or expression may look up: the string constants of
    its code (a superset: attribute names and literals come along)."""
    template = getattr(getattr(compiled, "_template_expression", None), "_template", compiled)
    codes = [getattr(getattr(template, "root_render_func", None), "__code__", None)]
    codes += [getattr(block, "__code__", None) for block in (getattr(template, "blocks", None) or {}).values()]
    names: set[str] = set()
    while codes:
        code = codes.pop()
        if code is None:
            continue
        for const in code.co_consts:
            if isinstance(const, str):
                names.add(const)
            elif isinstance(const, types.CodeType):
                codes.append(const)
    return names


def warm(loader: Any, task: Any, task_vars: Mapping[str, Any]) -> int:
    """Compile, in this process, what a worker running ``task`` with ``task_vars`` will
    compile: its arguments, its conditionals, and the variables they name, followed.
    The number of strings compiled now (0 when all were in the table). Never raises."""
    if not _installed:
        return 0
    try:
        return _warm(loader, task, task_vars)
    except Exception:  # noqa: BLE001 - the worker compiles what this did not
        return 0


def _warm(loader: Any, task: Any, task_vars: Mapping[str, Any]) -> int:
    from ansible._internal._datatag._tags import TrustedAsTemplate
    from ansible._internal._templating._engine import TemplateEngine, TemplateOptions
    from ansible._internal._templating._jinja_bits import is_possibly_all_template

    trusted = TrustedAsTemplate.is_tagged_on
    engine = TemplateEngine(loader=loader, variables={})
    expression_options = TemplateOptions(escape_backslashes=False, preserve_trailing_newlines=False)
    compiled_now = 0
    pending: list[tuple[str, bool]] = []  # (text, as an expression)

    uuid = getattr(task, "_uuid", None)
    if uuid is None or getattr(task, "run_once", False):
        return 0
    if uuid not in _queued_once:
        # The task's first host: its worker compiles for itself, as without the table (a
        # task queued once, run_once or on one host, so costs nothing more); from the
        # second host on, the main process compiles for every later worker.
        _queued_once.add(uuid)
        return 0
    followed = _followed_by_task.get(uuid)
    if followed is None:
        roots: list[str] = []
        for field in ("args", "vars", "environment", "loop", "name", "delegate_to"):
            _template_strings(getattr(task, field, None), roots, trusted)
        pending += [(text, False) for text in roots]
        conditionals: list[Any] = []
        for field in ("when", "changed_when", "failed_when", "until"):
            value = getattr(task, field, None)
            conditionals += value if isinstance(value, list) else [value]
        for cond in conditionals:
            if isinstance(cond, str) and cond.strip() and trusted(cond):
                pending.append((cond, not is_possibly_all_template(cond)))
        followed = ()
    names_seen: set[str] = set(followed)
    for name in followed:
        strings: list[str] = []
        _template_strings(task_vars.get(name), strings, trusted)
        pending += [(text, False) for text in strings]

    while pending and len(names_seen) < MAX_FOLLOWED:
        text, as_expression = pending.pop()
        if not _shareable(str(text)):
            continue
        key = ("e", str(text), False) if as_expression else ("t", str(text), True, TemplateOptions.DEFAULT.overrides)
        compiled = _table.get(key)
        if compiled is None:
            if as_expression:
                compiled = engine._compile_expression(text, expression_options)
            else:
                compiled = engine._compile_template(text, TemplateOptions.DEFAULT)
            compiled_now += 1
            _stats["warmed"] += 1
        for name in _names(compiled):
            if name in names_seen or name not in task_vars:
                continue
            names_seen.add(name)
            strings = []
            _template_strings(task_vars[name], strings, trusted)
            pending += [(s, False) for s in strings]
    if uuid:
        _followed_by_task[uuid] = tuple(sorted(names_seen))
    return compiled_now
