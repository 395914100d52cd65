#!/usr/bin/env python3
"""Generate the variable tables of docs/variables.md from the roles (``make docs``).

Each role's ``defaults/main.yml`` gives the values and its ``meta/argument_specs.yml``
the types, choices and descriptions. docs/variables.md holds one block per role between

    <!-- BEGIN generated: role <name> (make docs) -->
    <!-- END generated: role <name> -->

and only those blocks are rewritten; the prose around them is written by hand.

A block holds:
- a table ``| variable | default | meaning |`` of the role's public variables (every
  default of the role except ``INTERNAL``), in the order of its ``defaults/main.yml``;
- a table ``| input | type | meaning |`` of the options the role's argument spec requires
  without a default: facts an earlier phase or a playbook sets;
- a table ``| set by the runbook | default | what |`` of the role's ``INTERNAL`` defaults.

``python tests/docs/docs_variables.py`` rewrites the file; ``--check`` exits 1 when it is stale.
``tests/unit/test_docs_variables.py`` runs the same check in ``make unit``/``make test``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
VARIABLES_MD = REPO / "docs" / "variables.md"

# Defaults set by the runbook itself, not by users: left out of the public tables.
INTERNAL = {
    "tf_run_attempt": "the attempt being run, set by the restart loop",
    "tf_verdict_expected_size": "the cluster size, passed by collect.yml",
    "tf_verdict_context": "extra summary data, passed by collect.yml",
    "tf_attempts_stop_reason": "the reason the wait records, not a user knob",
}

# The order a run meets the roles in; a role not named here follows, by name.
ROLE_ORDER = (
    "tf", "tf_preflight", "tf_firewall", "tf_cluster", "tf_worker", "tf_launch", "tf_wait", "tf_attempts",
    "tf_stop", "tf_collect", "tf_verdict",
)  # fmt: skip

BEGIN = "<!-- BEGIN generated: role {role} (make docs) -->"
END = "<!-- END generated: role {role} -->"
BLOCK = re.compile(
    r"<!-- BEGIN generated: role (?P<role>[a-z0-9_]+) \(make docs\) -->\n.*?<!-- END generated: role (?P=role) -->",
    re.DOTALL,
)
_TEMPLATE_NAME = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)")


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None


def role_names() -> list[str]:
    """Every role with defaults or an argument spec, in ROLE_ORDER, then by name."""
    found = sorted(
        path.name for path in ROLES.iterdir()
        if (path / "defaults" / "main.yml").is_file() or (path / "meta" / "argument_specs.yml").is_file()
    )  # fmt: skip
    return [r for r in ROLE_ORDER if r in found] + [r for r in found if r not in ROLE_ORDER]


def role_defaults(role: str) -> dict[str, Any]:
    return _load(ROLES / role / "defaults" / "main.yml") or {}


def role_options(role: str) -> dict[str, dict[str, Any]]:
    """The options of every entry point of a role's argument spec, first one wins."""
    specs = (_load(ROLES / role / "meta" / "argument_specs.yml") or {}).get("argument_specs") or {}
    options: dict[str, dict[str, Any]] = {}
    for entry in specs.values():
        for name, option in (entry.get("options") or {}).items():
            options.setdefault(name, option)
    return options


def is_template(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


def code(text: str) -> str:
    """A Markdown code span that holds ``text`` (pipes escaped for a table cell)."""
    text = text.replace("|", "\\|")
    return f"``{text}``" if "`" in text else f"`{text}`"


def default_cell(value: Any) -> str:
    """The default as the table shows it: code spans first (what the docs test reads)."""
    if is_template(value):
        # What it resolves from: the path after the template (`files/x.py`, `runs/`), else
        # the first variable it names (`ansible_host`).
        tail = value.strip().rsplit("}}", 1)[-1].strip().lstrip("/")
        if tail:
            shown = tail if "." in tail.rsplit("/", 1)[-1] else tail + "/"
        else:
            found = _TEMPLATE_NAME.search(value)
            shown = found.group(1) if found else value
        return f"{code(shown)} (templated)"
    if isinstance(value, bool):
        return code(str(value).lower())
    if isinstance(value, list):
        return ", ".join(code(str(item)) for item in value) if value else code("[]")
    if isinstance(value, dict):
        return code(json.dumps(value)) if value else code("{}")
    if value == "":
        return code('""')
    return code(str(value))


def type_text(option: dict[str, Any]) -> str:
    kind = str(option.get("type", "str"))
    if option.get("elements"):
        return f"{kind} of {option['elements']}"
    return kind


def meaning_cell(option: dict[str, Any]) -> str:
    description = option.get("description") or ""
    if isinstance(description, list):
        description = " ".join(str(line) for line in description)
    text = " ".join(str(description).split())
    parts = [f"({code(type_text(option))}) {text}".rstrip()]
    if option.get("choices"):
        parts.append("One or more of " if option.get("type") == "list" else "One of ")
        parts[-1] += ", ".join(code(str(choice)) for choice in option["choices"]) + "."
    return " ".join(parts).replace(" | ", " \\| ")


def role_block(role: str) -> str:
    """The generated Markdown of one role, markers included."""
    defaults = role_defaults(role)
    options = role_options(role)
    lines = [BEGIN.format(role=role), ""]
    public = [name for name in defaults if name not in INTERNAL]
    if public:
        lines += ["| variable | default | meaning |", "|---|---|---|"]
        for name in public:
            lines.append(f"| `{name}` | {default_cell(defaults[name])} | {meaning_cell(options.get(name, {}))} |")
        lines.append("")
    inputs = [name for name, option in options.items() if name not in defaults and "default" not in option]
    if inputs:
        lines += ["| input | type | meaning |", "|---|---|---|"]
        for name in inputs:
            option = options[name]
            required = "required" if option.get("required") else "optional"
            description = " ".join(str(option.get("description") or "").split()).replace(" | ", " \\| ")
            lines.append(f"| `{name}` | {code(type_text(option))}, {required} | {description} |")
        lines.append("")
    internal = [name for name in defaults if name in INTERNAL]
    if internal:
        lines += ["| set by the runbook | default | what |", "|---|---|---|"]
        for name in internal:
            lines.append(f"| `{name}` | {default_cell(defaults[name])} | {INTERNAL[name]} |")
        lines.append("")
    if not (public or inputs or internal):
        lines += ["No inputs of its own.", ""]
    lines.append(END.format(role=role))
    return "\n".join(lines)


def render(text: str) -> str:
    """``text`` with every role's block regenerated. A role without a block, or a block of
    no role, is an error: the file must show every role once."""
    roles = role_names()
    seen = [match["role"] for match in BLOCK.finditer(text)]
    problems = [f"no block for role {r}" for r in roles if r not in seen]
    problems += [f"block of {r}, which is no role with defaults or a spec" for r in seen if r not in roles]
    problems += [f"two blocks for role {r}" for r in sorted(set(seen)) if seen.count(r) > 1]
    if problems:
        raise ValueError(f"{VARIABLES_MD.relative_to(REPO)}: " + "; ".join(problems))
    return BLOCK.sub(lambda match: role_block(match["role"]), text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/variables.md is stale")
    args = parser.parse_args(argv)
    text = VARIABLES_MD.read_text(encoding="utf-8")
    fresh = render(text)
    if args.check:
        if fresh != text:
            print(f"{VARIABLES_MD.relative_to(REPO)} is stale: run `make docs`", file=sys.stderr)
            return 1
        return 0
    if fresh != text:
        VARIABLES_MD.write_text(fresh, encoding="utf-8")
        print(f"wrote {VARIABLES_MD.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
