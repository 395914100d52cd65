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

Only what compiles the same everywhere is kept. A compiled template keeps the Jinja
environment that compiled it, whose loader (the base directory) finds the templates it
includes: a template that says ``include``, ``import`` or ``extends`` anywhere is
compiled each time, and so is one with Jinja settings of its own (a ``#jinja2:`` header,
the template module's delimiters). A compile error is never kept, so that each error
names its own origin. Nothing is rendered in the main process, only strings trusted as
templates are compiled there, and ``warm`` walks plain data only (never a lazy
container, ``hostvars``, or ``vars`` and ``groups``, which hold every variable and every
host), at most ``MAX_ITEMS`` values a call. One thing differs from compiling in the
worker: Jinja looks a template's filters up when it compiles it, so a filter that is
deprecated warns once, in the main process, instead of in each host's result. The table
holds at most ``MAX_ENTRIES``; past it, new strings are compiled each time as before. A
version of Ansible without the internals this relies on leaves everything as it was
(``install`` returns False).

What the table keeps is also written to the controller's disk, and read back by the next
run in place of compiling (``tf_template_store``: the code object Jinja compiled the text
to, seen as ``AnsibleEnvironment._compile`` returns it, and made into a template again
as Jinja's ``from_string`` and ``compile_expression`` make it).
"""

from __future__ import annotations

import os
import types
from collections.abc import Mapping
from typing import Any

from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils import tf_template_store

MAX_ENTRIES = 8192
# Variables followed from one task's roots (arguments, conditionals), at the most.
MAX_FOLLOWED = 2048
# Nested data walked for strings, per call of warm: depth and values at the most.
MAX_DEPTH = 6
MAX_ITEMS = 4096
# Tasks remembered (their first host seen, the names they follow); past it, forgotten.
MAX_TASKS = 16384
# Words of the statements that load another template, which the loader's base directory
# or search path finds (include, import, from ... import, extends): such a template is
# compiled each time. A template that names none of the words holds none of the statements
# whatever its spelling (``{%+``, other delimiters, line statements); one that names one is
# parsed, as its environment parses it, to tell a statement from a word in its text (an
# argument ``--preimport``, in the launch's command line, is not one).
_LOADS_OTHER_TEMPLATE = ("include", "import", "extends")
# Magic variables that hold every variable (vars), every host (groups, hostvars) or a
# host's whole facts: never walked for templates.
_NOT_WALKED = frozenset({"vars", "hostvars", "groups", "group_names", "ansible_facts", "play_hosts",
                         "ansible_play_hosts", "ansible_play_hosts_all", "ansible_play_batch"})

_table: dict[tuple, Any] = {}
_stats = {"hits": 0, "misses": 0, "warmed": 0, "read": 0}
# The disk's stores by settings key (None: no store for it), whether this process pruned
# one, and the code objects Jinja compiled during each compile now under way.
_stores: dict[tuple, Any] = {}
_pruned: list[int] = []
_captured: list[list[types.CodeType]] = []
_followed_by_task: dict[str, tuple[str, ...]] = {}
_queued_once: set[str] = set()
_installed: list[Any] = []
# Whether a template that names a word of _LOADS_OTHER_TEMPLATE loads another, by text.
_loading: dict[str, bool] = {}


def _shareable(text: str, overrides: Any = None, default_overrides: Any = None, environment: Any = None,
               expression: bool = False) -> bool:
    """Whether a compiled ``text`` renders the same whoever compiled it: no other template
    loaded by it, and no Jinja settings of its own (a ``#jinja2:`` header, the template
    module's delimiters). An expression (a conditional) holds no statement; a template
    that names a word of one is parsed by ``environment`` to see whether it is a statement
    (without an environment it counts as one)."""
    if len(text) >= 65536 or text.startswith("#jinja2:") or overrides is not default_overrides:
        return False
    if expression or not any(word in text for word in _LOADS_OTHER_TEMPLATE):
        return True
    return environment is not None and not _loads_other_template(environment, text)


def _loads_other_template(environment: Any, text: str) -> bool:
    """Whether ``text``, parsed as ``environment`` parses it (its delimiters, its line
    statements), includes, imports or extends another template; True where it does not
    parse (its compile fails, and is never kept). Kept by text: a template's words are
    looked at once per process."""
    verdict = _loading.get(text)
    if verdict is None:
        from jinja2 import nodes
        try:
            tree = environment.parse(text)
            verdict = next(tree.find_all((nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)), None) is not None
        except Exception:  # noqa: BLE001 - a syntax error: compiled each time, and its error named each time
            verdict = True
        if len(_loading) < MAX_ENTRIES:
            _loading[text] = verdict
    return verdict


def _key(kind: str, text: str, escape_backslashes: bool) -> tuple[str, str, bool]:
    """A compiled string's key in the table and on disk: ``kind`` "t" for a template, "e"
    for an expression."""
    return (kind, text, escape_backslashes)


def install() -> bool:
    """Keep compiled templates in this process's table (idempotent), and on disk for the
    next run (``tf_template_store``; ``TF_TEMPLATE_CACHE_DIR=off`` keeps none there).
    False when this Ansible lacks what the table relies on: nothing is changed then."""
    if _installed:
        return True
    try:
        from jinja2.environment import TemplateExpression
        from ansible._internal._templating._engine import TemplateEngine, TemplateOptions
        from ansible._internal._templating._jinja_bits import (AnsibleEnvironment, AnsibleTemplate,
                                                               AnsibleTemplateExpression)
        from ansible._internal._templating._jinja_common import _TemplateConfig
        default_overrides = TemplateOptions.DEFAULT.overrides
        compile_template = TemplateEngine._compile_template
        compile_expression = TemplateEngine._compile_expression
        python_compile = AnsibleEnvironment._compile
    except (ImportError, AttributeError):
        return False

    installed_by = os.getpid()

    def _from_code(env: Any, code: types.CodeType, as_expression: bool) -> Any:
        """What compiling gives, made from ``code`` as Jinja's ``from_string`` and
        ``compile_expression`` make it."""
        template = env.template_class.from_code(env, code, env.make_globals(None), None)
        if as_expression:
            return AnsibleTemplateExpression(TemplateExpression(template, False))
        return template

    def _store_of(env: Any) -> Any:
        if getattr(env, "_debuggable_template_source", False):
            return None
        key = tf_template_store.settings_key(env, (_TemplateConfig.allow_embedded_templates,))
        if key not in _stores:
            opened = _stores[key] = tf_template_store.open_store(key)
            # Pruned once, by the process that installed the table (the playbook's main
            # process), never by each worker forked from it.
            if opened is not None and not _pruned and os.getpid() == installed_by:
                _pruned.append(opened.prune())
        return _stores[key]

    def _kept(compile_: Any, compiled_type: type, self: Any, text: Any, options: Any, key: tuple | None) -> Any:
        """``compile_(self, text, options)``, from the table under ``key`` when it is
        there, else from the disk's store, and kept in both when it compiled (None: never
        kept)."""
        try:
            kept = _table.get(key) if key is not None else None
        except TypeError:  # options that do not hash
            key = kept = None
        if kept is not None:
            _stats["hits"] += 1
            return kept
        _stats["misses"] += 1
        on_disk = _store_of(self.environment) if key is not None else None
        if on_disk is not None:
            code = on_disk.read(*key)
            if code is not None:
                try:
                    compiled = _from_code(self.environment, code, key[0] == "e")
                except Exception:  # noqa: BLE001 - compiled again below
                    compiled = None
                if compiled is not None:
                    _stats["read"] += 1
                    if len(_table) < MAX_ENTRIES:
                        _table[key] = compiled
                    return compiled
        _captured.append([])
        try:
            compiled = compile_(self, text, options)
        finally:
            codes = _captured.pop()
        if key is not None and isinstance(compiled, compiled_type):
            if len(_table) < MAX_ENTRIES:
                _table[key] = compiled
            # One code object is what Jinja compiled this text to; anything else (none:
            # an error deferred; more: a compile inside a compile) is not written.
            if on_disk is not None and len(codes) == 1:
                on_disk.write(*key, codes[0])
        return compiled

    def _compile_template_kept(self: Any, template: str, options: Any) -> Any:
        text = str(template)
        shareable = _shareable(text, options.overrides, default_overrides, self.environment)
        key = _key("t", text, options.escape_backslashes) if shareable else None
        return _kept(compile_template, AnsibleTemplate, self, template, options, key)

    def _compile_expression_kept(self: Any, expression: str, options: Any) -> Any:
        text = str(expression)
        key = _key("e", text, options.escape_backslashes) if _shareable(text, expression=True) else None
        return _kept(compile_expression, AnsibleTemplateExpression, self, expression, options, key)

    def _python_compile_seen(self: Any, source: str, filename: str) -> types.CodeType:
        code = python_compile(self, source, filename)
        if _captured:
            _captured[-1].append(code)
        return code

    TemplateEngine._compile_template = _compile_template_kept
    TemplateEngine._compile_expression = _compile_expression_kept
    AnsibleEnvironment._compile = _python_compile_seen
    _installed.append((TemplateEngine, compile_template, compile_expression, AnsibleEnvironment, python_compile))
    return True


def uninstall() -> None:
    """Undo ``install`` and empty the table (for tests)."""
    if _installed:
        engine, compile_template, compile_expression, environment, python_compile = _installed.pop()
        engine._compile_template = compile_template
        engine._compile_expression = compile_expression
        environment._compile = python_compile
    _table.clear()
    _stores.clear()
    _pruned.clear()
    _captured.clear()
    _followed_by_task.clear()
    _queued_once.clear()
    _loading.clear()
    for key in _stats:
        _stats[key] = 0


def stats() -> dict[str, int]:
    return dict(_stats, entries=len(_table))


def _template_strings(value: Any, out: list[str], trusted: Any, budget: list[int], lazy: type, depth: int = 0) -> None:
    """The strings of ``value`` (nested plain data) that are trusted templates, into
    ``out``; ``budget`` is what is left of the values this call of warm may look at.
    Dicts and lists only (tagged ones too), never a ``lazy`` container (whose values render
    when read), hostvars or another mapping."""
    if budget[0] <= 0 or depth > MAX_DEPTH:
        return
    budget[0] -= 1
    if isinstance(value, str):
        if ("{{" in value or "{%" in value) and trusted(value):
            out.append(value)
    elif isinstance(value, (dict, list, tuple)) and not isinstance(value, lazy):
        for item in value.values() if isinstance(value, dict) else value:
            if budget[0] <= 0:
                return
            _template_strings(item, out, trusted, budget, lazy, depth + 1)


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


def warm(loader: Any, task: Any, task_vars: Mapping[str, Any], names: set[str] | None = None) -> int:
    """Compile, in this process, what a worker running ``task`` with ``task_vars`` will
    compile: its arguments, its conditionals, and the variables they name, followed.
    The number of strings compiled now (0 when all were in the table). ``names``, if
    given, gets the names the strings compiled or looked at now may look up (the filters
    and tests they call among them: tf_plugin_lookup_cache finds those). Never raises."""
    if not _installed:
        return 0
    try:
        return _warm(loader, task, task_vars, names if names is not None else set())
    except Exception:  # noqa: BLE001 - the worker compiles what this did not
        return 0


def _warm(loader: Any, task: Any, task_vars: Mapping[str, Any], names: set[str]) -> int:
    from ansible._internal._datatag._tags import TrustedAsTemplate
    from ansible._internal._templating._engine import TemplateEngine, TemplateOptions
    from ansible._internal._templating._jinja_bits import is_possibly_all_template
    from ansible._internal._templating._lazy_containers import _AnsibleLazyTemplateMixin as lazy

    uuid = getattr(task, "_uuid", None)
    if uuid is None or getattr(task, "run_once", False):
        return 0
    if len(_queued_once) > MAX_TASKS:  # a very long run's includes: start again
        _queued_once.clear()
        _followed_by_task.clear()
    if uuid not in _queued_once:
        # The task's first host: its worker compiles for itself, as without the table (a
        # task queued once, run_once or on one host, so costs nothing more); from the
        # second host on, the main process compiles for every later worker.
        _queued_once.add(uuid)
        return 0

    trusted = TrustedAsTemplate.is_tagged_on
    engine = TemplateEngine(loader=loader, variables={})
    expression_options = TemplateOptions(escape_backslashes=False, preserve_trailing_newlines=False)
    compiled_now = 0
    pending: list[tuple[str, bool]] = []  # (text, as an expression)
    budget = [MAX_ITEMS]
    followed = _followed_by_task.get(uuid)
    if followed is None:
        roots: list[str] = []
        for field in ("args", "vars", "environment", "loop", "name", "delegate_to"):
            _template_strings(getattr(task, field, None), roots, trusted, budget, lazy)
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
        _template_strings(task_vars.get(name), strings, trusted, budget, lazy)
        pending += [(text, False) for text in strings]

    while pending and len(names_seen) < MAX_FOLLOWED:
        text, as_expression = pending.pop()
        if not _shareable(str(text), environment=engine.environment, expression=as_expression):
            continue
        options = expression_options if as_expression else TemplateOptions.DEFAULT
        compiled = _table.get(_key("e" if as_expression else "t", str(text), options.escape_backslashes))
        if compiled is None:
            if as_expression:
                compiled = engine._compile_expression(text, options)
            else:
                compiled = engine._compile_template(text, options)
            compiled_now += 1
            _stats["warmed"] += 1
        found = _names(compiled)
        names |= found
        for name in found:
            if name in names_seen or name in _NOT_WALKED or name not in task_vars:
                continue
            names_seen.add(name)
            strings = []
            _template_strings(task_vars[name], strings, trusted, budget, lazy)
            pending += [(s, False) for s in strings]
    if uuid:
        _followed_by_task[uuid] = tuple(sorted(names_seen))
    return compiled_now
