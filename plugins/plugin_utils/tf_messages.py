# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the controller's refusals name the kind of a user's value.

Ansible hands plugins its own lazy containers (``_AnsibleLazyTemplateList``, ...) and
tagged strings, whose class names mean nothing to a user who wrote ``[1]`` in an
inventory: a message says what the value is in the words of YAML, and so does a message of
Ansible's own argument validator that names one of those classes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any


def type_name(value: Any) -> str:
    """``value``'s kind, with its article: a list, a mapping, a string, nothing (null)..."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple, set, frozenset)):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int):
        return "a whole number"
    if isinstance(value, float):
        return "a number"
    return f"a {type(value).__name__}"


# Ansible's validator names the class of a value it cannot convert, which for a user's
# value is one of Ansible's wrappers (<class '..._AnsibleTaggedDict'>).
_WRAPPED_CLASS = re.compile(r"<class '(?:[\w.]+\.)?_Ansible(?:Tagged|LazyTemplate)(\w+)'>")


def plain_types(message: str) -> str:
    """``message`` with Ansible's wrapper classes named as the YAML types they hold."""
    return _WRAPPED_CLASS.sub(lambda match: match.group(1).lower(), message)
