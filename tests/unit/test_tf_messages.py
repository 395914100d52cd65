"""How the controller's refusals name the kind of a user's value (plugin_utils/tf_messages):
in YAML's words, whatever wrapper Ansible hands the plugin."""

from __future__ import annotations

import pytest
from ansible._internal._datatag._tags import Origin

from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_messages import plain_types, type_name


@pytest.mark.parametrize(("value", "expected"), [
    (None, "nothing (null)"), (True, "a boolean"), (False, "a boolean"), ({}, "a mapping"), ([1], "a list"),
    ((1,), "a list"), ("x", "a string"), (5, "a whole number"), (0.5, "a number"), (b"x", "a bytes"),
])
def test_each_kind_is_named_in_the_words_of_yaml(value: object, expected: str) -> None:
    assert type_name(value) == expected


@pytest.mark.parametrize(("value", "expected"), [
    ([1], "a list"), ({"a": 1}, "a mapping"), ("x", "a string"), (5, "a whole number"),
])
def test_a_value_read_from_an_inventory_is_named_as_what_it_holds(value: object, expected: str) -> None:
    tagged = Origin(path="/inventory/hosts.yml", line_num=3).tag(value)
    assert type(tagged) is not type(value)  # Ansible's own wrapper class, named _AnsibleTagged...
    assert type_name(tagged) == expected


def test_ansibles_wrapper_classes_are_named_as_the_yaml_types_they_hold() -> None:
    message = ("argument 'tf_y_files' is of type dict and we were unable to convert to list: "
               "<class 'ansible.module_utils._internal._datatag._AnsibleTaggedDict'> cannot be converted to a list")
    assert plain_types(message) == ("argument 'tf_y_files' is of type dict and we were unable to convert to list: "
                                     "dict cannot be converted to a list")
    assert plain_types("<class '_AnsibleLazyTemplateList'>") == "list"
