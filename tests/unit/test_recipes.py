"""The recipes of docs/architecture.md (issue 40): each adds one thing in the files it names,
and a test here fails when one of its steps is forgotten. Each test first shows the check
passing on the tree, then adds the thing half-way (a fake format, cause, probe field,
phase) and shows that the check names the forgotten step."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from ansible_collections.tf_runbook.multiworker.plugins.module_utils import tf_causes, tf_metrics, tf_probe_host, tf_worker_records
from conftest import PLUGINS, REPO

ARCHITECTURE = REPO / "docs" / "architecture.md"


def recipe(title: str) -> str:
    """The text of one recipe of docs/architecture.md (a ``### `` heading of ``## Recipes``)."""
    text = ARCHITECTURE.read_text(encoding="utf-8").split("\n## Recipes\n", 1)[1].split("\n## ", 1)[0]
    return text.split(f"\n### {title}\n", 1)[1].split("\n### ", 1)[0]


@pytest.mark.parametrize(
    ("title", "files"),
    [
        ("A new output format", ["plugins/module_utils/tf_metrics.py", "tests/unit/test_tf_verdict_formats.py"]),
        ("A new failure cause", ["plugins/module_utils/tf_causes.py", "roles/tf/meta/argument_specs.yml",
                                 "docs/operating.md"]),
        ("A new preflight check", ["plugins/module_utils/tf_probe_", "plugins/modules/tf_preflight_host.py",
                                   "plugins/filter/tf_preflight.py", "docs/preflight.md"]),
        ("A new role variable", ["defaults/main.yml", "meta/argument_specs.yml", "meta/ranges.yml",
                                 "tests/docs/docs_variables.py", "docs/variables.md"]),
        ("A new phase", ["playbooks/train.yml", "docs/architecture.md"]),
    ],
)
def test_each_recipe_names_its_files_and_its_test(title: str, files: list[str]) -> None:
    text = recipe(title)
    for name in files:
        assert name in text, f"recipe {title!r} does not name {name}"
    assert "tests/unit/test_recipes.py" in text or "tests/unit/test_" in text


# -- A new output format ---------------------------------------------------------------------

FAKE_LINE = "fakefmt step=3 of=5 loss=0.25"


def parse_fake(lines: list[str]) -> dict[str, Any]:
    series = tf_metrics.empty_series()
    for line in lines:
        match = re.match(r"^fakefmt step=(\d+) of=(\d+) (.*)$", line)
        if match:
            pairs, _repeated = tf_metrics.pairs_of(match.group(3))
            tf_metrics.add_epoch(series, int(match.group(1)), pairs)
    return series


FAKE = tf_metrics.Format(name="fakefmt", label="fake lines", parse=parse_fake, progress=r"^fakefmt step=\d",
                         timed=r"^fakefmt step=\d")


@pytest.fixture
def fake_format() -> Iterator[tf_metrics.Format]:
    tf_metrics.register(FAKE)
    yield FAKE
    tf_metrics.unregister(FAKE.name)


def format_seen_by(line: str) -> dict[str, bool]:
    """Who sees a format's line: the progress pattern of the wait (``tf_worker_records``,
    whose progress lines feed the stall watchdog), with and without a ``tf_stall_pattern``,
    the supervisor's timed lines and the verdict's parser."""
    parsed = tf_metrics.parse_worker(line + "\n")
    return {
        "progress_pattern": re.search(tf_metrics.progress_pattern(), line) is not None,
        "wait": tf_worker_records.progress_regex("").search(line) is not None,
        "progress_pattern_with_stall_pattern": re.search(tf_metrics.progress_pattern("^never$"), line) is not None,
        "timed": tf_metrics.is_timed(line),
        "verdict": tf_metrics.source_of([parsed]) == FAKE.name,
    }


def test_a_registered_format_is_seen_by_the_watchdog_the_supervisor_and_the_verdict(fake_format: Any) -> None:
    assert format_seen_by(FAKE_LINE) == dict.fromkeys(format_seen_by(FAKE_LINE), True)
    assert tf_metrics.parse_worker(FAKE_LINE)["series"]["fakefmt"]["epochs"] == {3: {"loss": "0.25"}}


def test_a_format_left_out_of_the_registry_is_seen_by_nobody() -> None:
    assert not any(format_seen_by(FAKE_LINE).values())


def test_no_plugin_or_role_joins_the_built_in_progress_patterns_by_hand() -> None:
    """The registry is the only source: a copy of a built-in format's progress regex
    elsewhere would miss a format registered later."""
    copies = []
    for path in [*PLUGINS.rglob("*.py"), *REPO.glob("roles/*/*/*.yml"), *REPO.glob("roles/*/files/*.py")]:
        if path.name == "tf_metrics.py":
            continue
        text = path.read_text(encoding="utf-8")
        copies += [f"{path.relative_to(REPO)}: {fmt.progress}" for fmt in tf_metrics.FORMATS if fmt.progress in text]
    assert not copies


# -- A new failure cause ------------------------------------------------------------------------


def operating_cause_rows() -> set[str]:
    """The kinds of the causes table of docs/operating.md (### Causes)."""
    text = (REPO / "docs" / "operating.md").read_text(encoding="utf-8").split("\n### Causes\n", 1)[1]
    return set(re.findall(r"^\| `([a-z-]+)` \|", text.split("\n### ", 1)[0], re.M))


def restart_on_spec() -> dict[str, Any]:
    spec = yaml.safe_load((REPO / "roles" / "tf" / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))
    return next(entry["options"]["tf_restart_on"] for entry in spec["argument_specs"].values()
                if "tf_restart_on" in entry.get("options", {}))  # fmt: skip


def cause_problems(causes: tuple[str, ...], restartable: tuple[str, ...]) -> list[str]:
    """What a cause added half-way lacks: its row (its one-line text for a person), a place
    in tf_restart_on's choices, and restartable causes that are causes."""
    spec = restart_on_spec()
    rows = operating_cause_rows()
    problems = [f"{kind}: no row in docs/operating.md#causes" for kind in causes if kind not in rows]
    problems += [f"{kind}: not a choice of tf_restart_on" for kind in causes if kind not in spec["choices"]]
    problems += [f"{kind}: restartable but not a cause" for kind in restartable if kind not in causes]
    problems += [f"{kind}: a choice of tf_restart_on but not a cause" for kind in spec["choices"] if kind not in causes]
    if list(spec["default"]) != list(restartable):
        problems.append("tf_restart_on's default is not RESTARTABLE_CAUSES")
    return problems


def test_the_cause_tables_agree() -> None:
    assert cause_problems(tf_causes.CAUSES, tf_causes.RESTARTABLE_CAUSES) == []
    # Every cause reads back from a record of its kind, with its text.
    for kind in tf_causes.CAUSES:
        cause = tf_causes.cause_of({"cause": {"kind": kind, "detail": "d"}})
        assert cause["kind"] == kind and tf_causes.cause_text(cause) == f"{kind} (d)"


def test_a_cause_added_only_to_causes_is_named_for_each_forgotten_step() -> None:
    causes = (*tf_causes.CAUSES, "gpu-fault")
    assert cause_problems(causes, tf_causes.RESTARTABLE_CAUSES) == [
        "gpu-fault: no row in docs/operating.md#causes", "gpu-fault: not a choice of tf_restart_on",
    ]  # fmt: skip
    assert cause_problems(tf_causes.CAUSES, (*tf_causes.RESTARTABLE_CAUSES, "gpu-fault")) == [
        "gpu-fault: restartable but not a cause", "tf_restart_on's default is not RESTARTABLE_CAUSES",
    ]  # fmt: skip


# -- A new preflight check -------------------------------------------------------------------


def probe_return() -> dict[str, Any]:
    source = (PLUGINS / "modules" / "tf_preflight_host.py").read_text(encoding="utf-8")
    return yaml.safe_load(source.split('RETURN = r"""', 1)[1].split('"""', 1)[0])


def readers() -> str:
    """Where the probe's results are read: the preflight's filters and the roles' tasks."""
    paths = [*(PLUGINS / "filter").glob("*.py"), *REPO.glob("roles/*/tasks/*.yml")]
    return "\n".join(path.read_text(encoding="utf-8") for path in paths)


def probe_field_problems(fields: set[str]) -> list[str]:
    documented, read = probe_return(), readers()
    problems = [f"{f}: not in tf_preflight_host's RETURN" for f in sorted(fields) if f not in documented]
    problems += [f"{f}: read by no filter or task" for f in sorted(fields)
                 if not re.search(rf"[\"'.]{re.escape(f)}\b", read)]  # fmt: skip
    return problems


def host_look_fields(tmp_path: Path) -> set[str]:
    def run(argv: list[str], timeout: float) -> tuple[int, str, str]:
        return 0, "{}", ""

    return set(tf_probe_host.look_host(run, [], str(tmp_path), "r1", python="python3", checkpoint_dir=str(tmp_path)))


def test_every_field_of_the_host_look_is_documented_and_checked(tmp_path: Path) -> None:
    fields = host_look_fields(tmp_path)
    assert {"busy_ports", "free_mb", "gpus", "interpreter_state", "checkpoint_state", "versions"} <= fields
    assert probe_field_problems(fields) == []


def test_a_probe_field_without_its_doc_and_its_check_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    look = tf_probe_host.probe_host
    monkeypatch.setattr(tf_probe_host, "probe_host", lambda *a, **k: {**look(*a, **k), "swap_mb": 0})
    fields = host_look_fields(tmp_path)
    assert probe_field_problems(fields) == [
        "swap_mb: not in tf_preflight_host's RETURN", "swap_mb: read by no filter or task",
    ]  # fmt: skip


# -- A new phase ---------------------------------------------------------------------------------

# Phases imported by playbooks/train.yml that the phase table may not list yet, each with
# why. Empty it once the row is in: no other phase may lack its row.
UNLISTED_PHASES: dict[str, str] = {}


def phase_table() -> str:
    return ARCHITECTURE.read_text(encoding="utf-8").split("\n## Phases\n", 1)[1].split("\n## ", 1)[0]


def phase_problems(imported: list[str], table: str) -> dict[str, str]:
    problems = {}
    for name in imported:
        if not (REPO / "playbooks" / name).is_file():
            problems[name] = "imported by playbooks/train.yml but missing"
        elif f"`playbooks/{name}`" not in table:
            problems[name] = "no row in docs/architecture.md's phase table"
    return problems


def train_imports() -> list[str]:
    plays = yaml.safe_load((REPO / "playbooks" / "train.yml").read_text(encoding="utf-8"))
    return [play["ansible.builtin.import_playbook"] for play in plays]


def test_every_phase_of_train_yml_has_its_playbook_and_its_row() -> None:
    assert set(phase_problems(train_imports(), phase_table())) <= set(UNLISTED_PHASES)


def test_a_phase_without_its_row_or_its_playbook_is_named() -> None:
    problems = phase_problems([*train_imports(), "rehearse.yml"], phase_table())
    assert problems["rehearse.yml"] == "imported by playbooks/train.yml but missing"
    assert phase_problems(["deploy.yml"], "no table") == {"deploy.yml": "no row in docs/architecture.md's phase table"}
