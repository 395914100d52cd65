"""The run report: the verdict's timeline data, the layout filter and the rendered page.

Every page here is rendered from a crafted collected run (see report_runs.py) through the
verdict (summarize + add_timeline), the tf_report_view filter and templates/report.html.j2,
then parsed, and its structure and numbers checked.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import sys
import time
from contextlib import contextmanager
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import pytest
from ansible.errors import AnsibleActionFail, AnsibleFilterError

from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils import tf_report_view as tf_report
from report_runs import TEMPLATE, T0, build, endpoints, metrics_of, render, write_worker
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_report_view import (
    fmt_seconds,
    nice_ticks,
    tf_report_view,
)
import tf_report_action as tf_report_action_module
from tf_report_action import ActionModule, culprit_log_tails, draw, log_tail, report_paths, write_report
from tf_verdict import summarize

MARKER = "multiworker-complete.txt"


class Node:
    def __init__(self, tag: str, attrs: dict[str, str], parent: Node | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node] = []
        self.pieces: list[Node | str] = []  # text and children in document order

    @property
    def text(self) -> str:
        return "".join(piece for piece in self.pieces if isinstance(piece, str))

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def all_text(self) -> str:
        return "".join(piece if isinstance(piece, str) else piece.all_text() for piece in self.pieces)

    def find(self, tag: str, cls: str | None = None, **attrs: str) -> list[Node]:
        found = []
        for child in self.children:
            if child.tag == tag and (cls is None or cls in child.classes) and all(
                child.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items()
            ):
                found.append(child)
            found += child.find(tag, cls, **attrs)
        return found


VOID = {"meta", "link", "br", "img", "input", "hr"}


class Tree(HTMLParser):
    """Just enough of a DOM: tags, attributes, text; SVG's self-closing tags included."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.root = Node("#root", {}, None)
        self.node = self.root
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs}, self.node)
        self.node.children.append(node)
        self.node.pieces.append(node)
        if tag not in VOID:
            self.node = node

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs}, self.node)
        self.node.children.append(node)
        self.node.pieces.append(node)

    def handle_endtag(self, tag: str) -> None:
        node = self.node
        while node.parent is not None and node.tag != tag:
            node = node.parent
        assert node.tag == tag, f"</{tag}> closes nothing"
        self.node = node.parent or self.root

    def handle_data(self, data: str) -> None:
        self.node.pieces.append(data)


def page(summary: dict[str, Any]) -> tuple[str, Node]:
    html = render(summary)
    return html, Tree(html).root


def points(polyline: Node) -> list[tuple[float, float]]:
    return [tuple(map(float, pair.split(","))) for pair in polyline.attrs["points"].split()]  # type: ignore[misc]


# Where things must land, worked out by hand from the page's layout (not from the module's
# constants, so that a wrong scale cannot agree with itself): a chart's plot spans x = 62
# to 508 (520 units wide, 62 of labels on the left, 12 on the right); a timeline's x = 170
# to 1024 (1040 wide, 170 of labels, 16 on the right), from the attempt's first launch to
# its last record.
CHART_X_1_3 = {1: 62.0, 2: 285.0, 3: 508.0}  # epochs 1..3: the ends and the middle
CHART_X_1_4 = {1: 62.0, 2: 210.7, 3: 359.3, 4: 508.0}  # epochs 1..4: 446 / 3 apart
TIMELINE_X_7S = {0: 170.0, 2.0: 414.0, 3.5: 597.0, 5.0: 780.0, 6.5: 963.0, 7: 1024.0}  # 7 s: 122 a second
TIMELINE_X_6_2S = {3.5: 652.1, 4.5: 789.8}  # 6.2 s: 854 / 6.2 a second


@contextmanager
def cpu_budget(seconds: float) -> Iterator[None]:
    """Asserts that the block takes under ``seconds`` of this process's CPU; a block that
    would never end (a tick loop that stops advancing) is interrupted at twice that by a
    CPU-time timer and fails instead of hanging the test run."""

    def expired(_signum: int, _frame: Any) -> None:
        raise AssertionError(f"still running after {2 * seconds} s of CPU")

    previous = signal.signal(signal.SIGVTALRM, expired)
    signal.setitimer(signal.ITIMER_VIRTUAL, 2 * seconds)
    started = time.process_time()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, previous)
    used = time.process_time() - started
    assert used < seconds, f"{used:.3f} s of CPU"


def assert_self_contained(html: str) -> None:
    lowered = html.lower()
    for needle in ("<script", "http:", "https:", "url(", "@import", "@font-face", " src=", "<link", "<iframe"):
        assert needle not in lowered, needle


# --- crafted runs ------------------------------------------------------------------------


@pytest.fixture
def succeeded(tmp_path: Path) -> dict[str, Any]:
    run = tmp_path / "ok-run"
    hosts, eps = endpoints(2)
    for index in range(2):
        write_worker(run, hosts[index], index, eps)
    return build(run, 2)


@pytest.fixture
def disagreeing(tmp_path: Path) -> dict[str, Any]:
    run = tmp_path / "disagree"
    hosts, eps = endpoints(3, 3)
    for index in range(3):
        odd = {2: {"loss": "0.900000", "binary_accuracy": metrics_of(2)["binary_accuracy"]}} if index == 1 else None
        write_worker(run, hosts[index], index, eps, metrics=odd)
    return build(run, 3)


def write_killed(run: Path, hosts: list[str], eps: list[str]) -> None:
    """Worker 1 killed during epoch 2; the runbook stopped the others after it."""
    stopped = {
        "complete": False, "exit_status": 143, "reason": "stopped by the runbook", "stopped_by": "runbook",
        "signal": "SIGTERM",
    }
    write_worker(run, hosts[0], 0, eps, epochs=range(1, 3), finished_at=T0 + 6.0, **stopped)
    write_worker(run, hosts[1], 1, eps, epochs=range(1, 2), complete=False, exit_status=137, signal="SIGKILL",
                 finished_at=T0 + 4.5)
    write_worker(run, hosts[2], 2, eps, epochs=range(1, 3), finished_at=T0 + 6.2, **stopped)


@pytest.fixture
def killed(tmp_path: Path) -> dict[str, Any]:
    run = tmp_path / "killed"
    hosts, eps = endpoints(3, 3)
    write_killed(run, hosts, eps)
    return build(run, 3)


@pytest.fixture
def resumed(tmp_path: Path) -> dict[str, Any]:
    run = tmp_path / "resume"
    hosts, eps = endpoints(3, 3)
    write_killed(run, hosts, eps)
    for index in range(3):
        write_worker(run, hosts[index], index, eps, attempt=1, start=T0 + 10, epochs=range(2, 5), resumed_from=1)
    return build(run, 3)


# --- the verdict's additive timeline -------------------------------------------------------


def test_timeline_is_added_and_every_other_key_kept(tmp_path: Path, succeeded: dict[str, Any]) -> None:
    run = tmp_path / "ok-run"
    plain = summarize(run.name, str(run), MARKER, 2, {})
    assert {k: v for k, v in succeeded.items() if k not in ("timeline", "written_at")} == {
        k: v for k, v in plain.items() if k != "written_at"
    }
    json.dumps(succeeded)  # summary.json stays JSON
    [attempt] = succeeded["timeline"]
    assert attempt["attempt"] == 0 and attempt["culprit"] is None and attempt["disagreements"] == []
    assert attempt["started_at"] == T0
    worker = attempt["workers"][1]
    assert worker["log"] == "node0/worker-1/worker.log"
    assert worker["launched_at"] == T0 and worker["joined_at"] == T0 + 2.0
    assert worker["epoch_at"] == {"1": T0 + 3.5, "2": T0 + 5.0, "3": T0 + 6.5}
    assert worker["completed_at"] == T0 + 6.7 and worker["finished_at"] == T0 + 7.0
    assert worker["metrics"]["2"] == metrics_of(2)
    assert worker["exit_status"] == 0 and not worker["stopped"] and not worker["culprit"]


def test_timeline_names_the_culprit_victims_and_resume_point(resumed: dict[str, Any]) -> None:
    first, second = resumed["timeline"]
    assert first["culprit"] == 1
    assert [(w["index"], w["culprit"], w["stopped"]) for w in first["workers"]] == [
        (0, False, True), (1, True, False), (2, False, True),
    ]
    assert first["resumed_from_epoch"] is None and second["resumed_from_epoch"] == 1
    assert second["culprit"] is None
    assert second["workers"][2]["log"] == "node2/retry-1/worker-2/worker.log"
    assert sorted(second["workers"][0]["epoch_at"]) == ["2", "3", "4"]


def test_culprit_from_the_wait_when_no_exit_record_says(tmp_path: Path) -> None:
    run = tmp_path / "nolaunch"
    hosts, eps = endpoints(2)
    write_worker(
        run, hosts[0], 0, eps, complete=False, exit_status=143, reason="stopped by the runbook", stopped_by="runbook"
    )
    (run / "node0" / "worker-1").mkdir(parents=True)  # never launched: no files at all
    summary = build(run, 2, {"wait": {"failed_workers": [{"index": 1, "host": "node0", "returncode": -1}]}})
    assert summary["timeline"][0]["culprit"] == 1
    _, root = page(summary)
    [row] = root.find("g", "culprit")
    assert row.attrs["data-worker"] == "1"
    assert "no exit record" in root.all_text()


# --- rendered pages -------------------------------------------------------------------------


def test_the_compiled_template_is_cached_and_a_changed_template_compiled_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, succeeded: dict[str, Any]
) -> None:
    """Compiling the template was most of the report's time: Jinja2's bytecode cache keeps
    it, keyed by the template's text, so an edited template is never served stale."""
    import tempfile

    import jinja2

    from tf_report_action import render_report

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the cache's default place
    first = render_report(succeeded, "run {{ __tf_verdict_report.run.id }}")
    compiled: list[str] = []
    real = jinja2.Environment.compile
    monkeypatch.setattr(jinja2.Environment, "compile",
                        lambda self, source, *a, **k: compiled.append(source) or real(self, source, *a, **k))
    assert render_report(succeeded, "run {{ __tf_verdict_report.run.id }}") == first
    assert compiled == []
    assert render_report(succeeded, "status {{ __tf_verdict_report.run.status }}") == f"status {succeeded['status']}"
    assert len(compiled) == 1
    assert list((tmp_path / f"_jinja2-cache-{os.getuid()}").iterdir())


def test_succeeded_run_page(succeeded: dict[str, Any]) -> None:
    html, root = page(succeeded)
    assert_self_contained(html)
    assert root.find("span", id="status")[0].text == "SUCCEEDED"
    assert [c.attrs["data-metric"] for c in root.find("svg", "chart")] == ["loss", "binary_accuracy"]
    assert len(root.find("tr", "check")) == len(succeeded["checks"]) >= 12 and not root.find("tr", "fail")
    loss = root.find("svg", "chart", data_metric="loss")[0]
    lines = loss.find("polyline", "series")
    assert [line.attrs["data-worker"] for line in lines] == ["0", "1"]
    for line in lines:
        coords = points(line)
        assert [x for x, _ in coords] == [62.0, 285.0, 508.0]
        assert coords[0][1] < coords[1][1] < coords[2][1]  # the loss falls: y grows downwards
        assert "stroke-dasharray" not in line.attrs
    assert points(lines[0]) == points(lines[1])
    assert float(lines[0].attrs["stroke-width"]) > float(lines[1].attrs["stroke-width"])  # both show
    assert not root.find("circle", "disagree")
    assert "2 worker(s): every worker printed the same value" in loss.parent.all_text()  # type: ignore[union-attr]
    assert not loss.find("line", "resume")

    [timeline] = root.find("svg", "timeline")
    rows = timeline.find("g", "row")
    assert [r.attrs["data-worker"] for r in rows] == ["0", "1"] and all("ok" in r.classes for r in rows)
    at = TIMELINE_X_7S  # launch at T0, last exit at T0 + 7
    for row in rows:
        [bar] = row.find("rect", "bar")
        assert float(bar.attrs["x"]) == at[0] == 170.0
        assert float(bar.attrs["width"]) == pytest.approx(at[7] - at[0], abs=0.15)
        [epochs] = row.find("path", "epochs")
        assert [float(m) for m in re.findall(r"M([\d.]+) ", epochs.attrs["d"])] == [at[3.5], at[5.0], at[6.5]]
        [join] = row.find("path", "join")
        assert join.attrs["d"].startswith(f"M{at[2.0]} ")
        assert row.find("circle", "exit-ok")
    links = [a.attrs["href"] for a in root.find("a", "log")]
    assert links == ["node0/worker-0/worker.log", "node0/worker-1/worker.log"]
    cluster = [tr.all_text() for tr in root.find("tr", "worker")]
    assert "10.0.0.1:2223" in cluster[1] and "chief" in cluster[0]


def test_disagreeing_metrics_are_marked_and_named(disagreeing: dict[str, Any]) -> None:
    _, root = page(disagreeing)
    assert root.find("span", id="status")[0].text == "FAILED"
    assert "metrics_agree" in root.find("tr", "fail")[0].all_text()
    loss = root.find("svg", "chart", data_metric="loss")[0]
    circles = loss.find("circle", "disagree")
    assert len(circles) == 2  # one per distinct value
    assert {float(c.attrs["cx"]) for c in circles} == {CHART_X_1_3[2]}
    odd = [p for line in loss.find("polyline", "series") if line.attrs["data-worker"] == "1" for p in points(line)]
    assert any(float(c.attrs["cy"]) == odd[1][1] for c in circles)
    note = loss.parent.find("ul", "disagreements")[0].all_text()  # type: ignore[union-attr]
    assert f"epoch 2: {metrics_of(2)['loss']} on workers 0, 2; 0.900000 on worker 1" in note
    assert "epoch 2" in circles[0].find("title")[0].text and "worker 1" in circles[0].find("title")[0].text
    assert not root.find("svg", "chart", data_metric="binary_accuracy")[0].find("circle", "disagree")


def test_killed_worker_is_the_marked_culprit(killed: dict[str, Any]) -> None:
    _, root = page(killed)
    [timeline] = root.find("svg", "timeline")
    statuses = {r.attrs["data-worker"]: r.classes - {"row"} for r in timeline.find("g", "row")}
    assert statuses == {"0": {"stopped"}, "1": {"culprit"}, "2": {"stopped"}}
    [culprit] = timeline.find("g", "culprit")
    assert culprit.find("path", "exit-culprit") and culprit.find("rect", "bar")
    [bar] = culprit.find("rect", "bar")  # the attempt lasted 6.2 s; worker 1 exited at 4.5 s
    assert float(bar.attrs["x"]) + float(bar.attrs["width"]) == pytest.approx(TIMELINE_X_6_2S[4.5], abs=0.15)
    assert "culprit: exit 137 SIGKILL" in culprit.all_text()
    assert len(timeline.find("rect", "exit-stopped")) == 2
    head = root.find("div", "attempt")[0].find("div", "head")[0].all_text()
    assert "culprit: worker 1 on node1" in head and "137" in head
    assert root.find("tr", "culprit")[0].find("a", "log")[0].attrs["href"] == "node1/worker-1/worker.log"
    assert "worker 1 on host node1 failed first" in root.find("div", id="reason")[0].text


def test_restart_with_resume(resumed: dict[str, Any]) -> None:
    _, root = page(resumed)
    first, second = root.find("svg", "timeline")
    assert (first.attrs["data-attempt"], second.attrs["data-attempt"]) == ("0", "1")
    [resume] = first.find("line", "resume")
    assert float(resume.attrs["x1"]) == TIMELINE_X_6_2S[3.5]  # epoch 1 of attempt 0 ended at T0 + 3.5
    assert "attempt 1 resumed after epoch 1" in first.all_text()
    note = root.find("div", "attempt", data_attempt="1")[0].find("p", "resume-note")[0].text
    assert "Resumed after epoch 1" in note and "from epoch 2" in note
    loss = root.find("svg", "chart", data_metric="loss")[0]
    dashed = [line for line in loss.find("polyline", "series") if "stroke-dasharray" in line.attrs]
    solid = [line for line in loss.find("polyline", "series") if "stroke-dasharray" not in line.attrs]
    assert {line.attrs["data-attempt"] for line in dashed} == {"0"} and len(solid) == 3
    assert [x for x, _ in points(solid[0])] == [CHART_X_1_4[e] for e in (2, 3, 4)]
    [restart] = loss.find("line", "resume")
    assert float(restart.attrs["x1"]) == CHART_X_1_4[1]
    assert "3 worker(s), 6 curves (earlier attempts dashed)" in loss.parent.all_text()  # type: ignore[union-attr]
    links = [a.attrs["href"] for a in root.find("a", "log")]
    assert "node1/worker-1/worker.log" in links and "node1/retry-1/worker-1/worker.log" in links


def test_32_workers_200_epochs_render_fast_and_small(tmp_path: Path) -> None:
    run = tmp_path / "large"
    hosts, eps = endpoints(32, 8)
    for index in range(32):
        write_worker(run, hosts[index], index, eps, epochs=range(1, 201), epoch_seconds=0.5, start=T0 + index * 0.05)
    (run / "summary.json").write_text(json.dumps(build(run, 32), indent=2, sort_keys=True))
    # What the role's action does: read summary.json, lay it out, render, write. CPU time,
    # not wall time: the bound holds on a loaded machine too.
    started, wall = time.process_time(), time.perf_counter()
    with cpu_budget(1.0):
        written = write_report(str(run / "summary.json"), str(TEMPLATE), str(run / "report.html"))
    elapsed, wall = time.process_time() - started, time.perf_counter() - wall
    html = (run / "report.html").read_text()
    size = len(html.encode())
    assert written == {"path": str(run / "report.html"), "bytes": size, "seconds": written["seconds"]}
    print(f"32 workers x 200 epochs: summary.json of {(run / 'summary.json').stat().st_size / 1024:.0f} KiB "
          f"read, laid out, rendered and written in {elapsed:.3f} s of CPU ({wall:.3f} s wall), {size / 1024:.0f} KiB")
    assert elapsed < 1.0, elapsed
    assert size < 2 * 1024 * 1024, size
    root = Tree(html).root
    assert_self_contained(html)
    for svg in root.find("svg", "chart"):
        lines = svg.find("polyline", "series")
        assert len(lines) == 32 and all(len(points(line)) == 200 for line in lines)
        assert not svg.find("path", "dots")  # too many for markers
    [timeline] = root.find("svg", "timeline")
    rows = timeline.find("g", "row")
    assert len(rows) == 32
    assert all(len(re.findall("M", r.find("path", "epochs")[0].attrs["d"])) == 200 for r in rows)
    assert float(timeline.attrs["height"]) <= 480  # the rows shrink, the page stays readable
    assert len(root.find("a", "log")) == 32


def test_report_is_written_atomically_and_privately(tmp_path: Path, succeeded: dict[str, Any]) -> None:
    (tmp_path / "summary.json").write_text(json.dumps(succeeded))
    dest = tmp_path / "report.html"
    dest.write_text("an earlier report")
    write_report(str(tmp_path / "summary.json"), str(TEMPLATE), str(dest))
    assert oct(dest.stat().st_mode & 0o777) == "0o600"
    assert dest.read_text() == render(succeeded)
    assert sorted(os.listdir(tmp_path)) == ["ok-run", "report.html", "summary.json"]  # no temporary left


def test_report_without_a_summary_is_refused_and_nothing_written(tmp_path: Path) -> None:
    with pytest.raises(AnsibleActionFail, match=r"cannot read the run's summary .*/missing/summary.json"):
        write_report(str(tmp_path / "missing" / "summary.json"), str(TEMPLATE), str(tmp_path / "report.html"))
    assert not (tmp_path / "report.html").exists()


def test_the_run_directory_names_the_summary_and_the_report_as_the_contract_does() -> None:
    # The role passes the run's directory alone: no YAML names either file.
    assert report_paths({"run_dir": "/runs/r1"}) == ("/runs/r1/summary.json", "/runs/r1/report.html")
    assert report_paths({"run_dir": "/runs/r1", "dest": "/tmp/page.html"}) == ("/runs/r1/summary.json", "/tmp/page.html")
    assert report_paths({"summary": "/s.json", "dest": "/p.html"}) == ("/s.json", "/p.html")
    with pytest.raises(AnsibleActionFail, match="tf_report needs run_dir, or summary and dest"):
        report_paths({})
    with pytest.raises(AnsibleActionFail, match="tf_report needs run_dir, or dest$"):
        report_paths({"summary": "/s.json"})


def test_checks_not_checked_and_devices_are_shown(succeeded: dict[str, Any]) -> None:
    succeeded["checks"][0] = {"name": "cluster_seen", "ok": None, "result": "not checked", "detail": "not checked: x"}
    succeeded["context"]["devices"] = {"0": "0,1", "1": None}
    _, root = page(succeeded)
    unchecked = [c["name"] for c in succeeded["checks"] if c["ok"] is None]
    rows = root.find("tr", "unchecked")
    assert [r.find("code")[0].text for r in rows] == unchecked and "cluster_seen" in unchecked
    assert all(r.find("span", "badge")[0].text == "--" for r in rows) and not root.find("tr", "fail")
    assert f"0 failed check(s), {len(unchecked)} not checked" in root.all_text()
    assert [td.text for td in root.find("td", "devices")] == ["GPU 0,1", "not set (every device of the host)"]
    del succeeded["context"]["devices"]
    assert not page(succeeded)[1].find("td", "devices")


def test_keras_epoch_lines_are_charted_like_the_checks_read_them(tmp_path: Path) -> None:
    run = tmp_path / "keras"
    hosts, eps = endpoints(2)
    for index in range(2):
        wdir = write_worker(run, hosts[index], index, eps)
        lines = [f"Epoch {e}/2\n4/4 - 1s - 12ms/step - loss: 0.{7 - e}000 - accuracy: 0.5{e}00" for e in (1, 2)]
        (wdir / "worker.log").write_text("\n".join(lines) + "\n")
    summary = build(run, 2)
    assert summary["job_output"]["metrics_from"] == "keras"
    assert summary["timeline"][0]["workers"][1]["metrics"] == {
        "1": {"loss": "0.6000", "accuracy": "0.5100"}, "2": {"loss": "0.5000", "accuracy": "0.5200"},
    }
    _, root = page(summary)
    assert [c.attrs["data-metric"] for c in root.find("svg", "chart")] == ["loss", "accuracy"]


def test_text_from_logs_is_escaped(killed: dict[str, Any]) -> None:
    killed["reason"] = "worker 1 said <script>alert(1)</script> & left"
    killed["timeline"][0]["workers"][1]["exit_reason"] = "<b>bold</b>"
    html, _ = page(killed)
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; left" in html
    assert "&lt;b&gt;bold&lt;/b&gt;" in html
    assert not [t for t in Elements(html).tags if t in ("script", "b")]  # present as text, never as markup


# --- the filter's pieces ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [(0, 10, [0, 2, 4, 6, 8, 10]), (0.31, 0.56, [0.35, 0.4, 0.45, 0.5, 0.55]), (1, 200, [50, 100, 150, 200]),
     (5, 5, [5])],
)
def test_nice_ticks(low: float, high: float, expected: list[float]) -> None:
    assert nice_ticks(low, high, 5) == pytest.approx(expected)


@pytest.mark.parametrize(("seconds", "shown"), [(None, "-"), (0.04, "0.0 s"), (42.25, "42.2 s"), (125, "2:05 min")])
def test_fmt_seconds(seconds: float | None, shown: str) -> None:
    assert fmt_seconds(seconds) == shown


def test_values_that_cannot_be_drawn_are_named(succeeded: dict[str, Any]) -> None:
    succeeded["timeline"][0]["workers"][0]["metrics"]["3"]["loss"] = "nan"
    view = tf_report_view(succeeded)
    loss = view["charts"][0]
    assert loss["skipped"] == ["epoch 3, worker 0: loss=nan"]
    assert [len(s["points"].split()) for s in loss["series"]] == [2, 3]


@pytest.mark.parametrize("bad", [None, [], {"status": "failed"}])
def test_filter_refuses_what_is_not_a_summary(bad: Any) -> None:
    with pytest.raises(AnsibleFilterError, match="expected the verdict's summary"):
        tf_report_view(bad)


def test_the_documentation_only_module_documents_the_actions_options() -> None:
    """plugins/modules/tf_report.py (read by ansible-doc) documents exactly the options the
    action validates, with the same types and required flags."""
    import yaml

    from ansible_collections.tf_runbook.multiworker.plugins.modules import tf_report as doc_module
    from tf_report_action import ARGUMENT_SPEC

    options = yaml.safe_load(doc_module.DOCUMENTATION)["options"]
    documented = {name: {"type": o["type"], "required": o.get("required", False)} for name, o in options.items()}
    assert documented == {name: {"type": s["type"], "required": s.get("required", False)} for name, s in ARGUMENT_SPEC.items()}


# --- values the axes must survive (issue 24, point 1) -----------------------------------------

BIG = sys.float_info.max


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (1e16, 1e16 + 2, [1e16, 1e16 + 2]),  # a step of 0.5 does not move 1e16: the two ends
        (-1e308, 1e308, [-1e308, -5e307, 0, 5e307, 1e308]),  # the span overflows a float
        (-BIG, BIG, [-1e308, 0, 1e308]),
        (0, 5e-324, [0, 5e-324]),  # the smallest float: the span underflows
        (1e-300, 3e-300, [1e-300, 1.5e-300, 2e-300, 2.5e-300, 3e-300]),
        (7, 7, [7]),
    ],
)
def test_nice_ticks_at_the_float_types_ends(low: float, high: float, expected: list[float]) -> None:
    with cpu_budget(1.0):
        ticks = nice_ticks(low, high, 5)
    assert ticks == pytest.approx(expected, rel=1e-12)


MAGNITUDES = [0.0, 1e-300, 1e-9, 0.5, 3.0, 1e6, 1e15, 1e16, 2**53, 1e20, 1e300, 1e308]
SPANS = [5e-324, 1e-300, 1e-12, 1e-3, 1.0, 2.0, 7.0, 1e6, 1e20, 1e300, 1e308]


def test_nice_ticks_are_bounded_increasing_and_finite_for_any_span() -> None:
    """Every pair of magnitude and span, both signs: at most MAX_TICKS ticks (the bound,
    12, known here independently), strictly increasing, finite, within the span's reach."""
    cases = 0
    with cpu_budget(1.0):
        for base in MAGNITUDES:
            for sign in (1, -1):
                low = sign * base
                for span in SPANS:
                    high = min(low + span, BIG)
                    for target in (1, 5, 8, 1000):
                        ticks = nice_ticks(low, high, target)
                        assert 1 <= len(ticks) <= 12, (low, high, target, ticks)
                        assert all(math.isfinite(t) for t in ticks)
                        assert all(a < b for a, b in zip(ticks, ticks[1:])), (low, high, ticks)
                        cases += 1
    assert cases == len(MAGNITUDES) * 2 * len(SPANS) * 4


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nice_ticks_refuse_what_is_not_a_number(bad: float) -> None:
    with pytest.raises(AnsibleFilterError, match="cannot scale an axis from"):
        nice_ticks(0.0, bad)


def run_of(tmp_path: Path, values: list[dict[int, dict[str, str]]], epochs: range = range(1, 4)) -> dict[str, Any]:
    """A run of one worker per entry of ``values`` (its metrics per epoch)."""
    run = tmp_path / "odd"
    hosts, eps = endpoints(len(values))
    for index, metrics in enumerate(values):
        write_worker(run, hosts[index], index, eps, epochs=epochs, metrics=metrics)
    return build(run, len(values))


def drawn(tmp_path: Path, summary: dict[str, Any]) -> Node:
    """The page the action writes for ``summary``, drawn (not the page that says why),
    within a second of CPU."""
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    with cpu_budget(1.0):
        written = write_report(str(tmp_path / "summary.json"), str(TEMPLATE), str(tmp_path / "report.html"))
    assert "error" not in written, written["error"]
    html = (tmp_path / "report.html").read_text()
    assert_self_contained(html)
    return Tree(html).root


def y_labels(root: Node, metric: str = "loss") -> list[str]:
    return [t.text for t in root.find("svg", "chart", data_metric=metric)[0].find("text", "tick")
            if float(t.attrs["x"]) < 62]


def test_values_one_float_step_apart_are_drawn(tmp_path: Path) -> None:
    """loss=1e16 and loss=10000000000000002: the report used to append ticks forever."""
    root = drawn(tmp_path, run_of(tmp_path, [{e: {"loss": "1e16"} for e in (1, 2, 3)},
                                             {e: {"loss": "10000000000000002"} for e in (1, 2, 3)}]))
    assert y_labels(root) == ["10000000000000000", "10000000000000002"]
    assert len(root.find("circle", "disagree")) == 6  # three epochs, two values each


def test_values_at_the_ends_of_the_float_type_are_drawn(tmp_path: Path) -> None:
    root = drawn(tmp_path, run_of(tmp_path, [{e: {"loss": "-1e308"} for e in (1, 2, 3)},
                                             {e: {"loss": "1e308"} for e in (1, 2, 3)}]))
    assert y_labels(root) == ["-1e+308", "-5e+307", "0", "5e+307", "1e+308"]
    lines = root.find("svg", "chart", data_metric="loss")[0].find("polyline", "series")
    assert [{y for _, y in points(line)} for line in lines] == [{186.1}, {21.9}]  # padded by 6 % of the span: 184 * (0.12 / 2.24) from each end


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400"])
def test_values_past_the_float_type_are_named_not_drawn(tmp_path: Path, value: str) -> None:
    root = drawn(tmp_path, run_of(tmp_path, [{2: {"loss": value, "binary_accuracy": "0.5"}}, {}]))
    card = root.find("svg", "chart", data_metric="loss")[0].parent
    assert f"not drawn: epoch 2, worker 0: loss={value}" in card.all_text()  # type: ignore[union-attr]


def test_a_single_value_is_drawn(tmp_path: Path) -> None:
    root = drawn(tmp_path, run_of(tmp_path, [{1: {"loss": "0.5"}}], epochs=range(1, 2)))
    [chart] = root.find("svg", "chart", data_metric="loss")
    [line] = chart.find("polyline", "series")
    assert points(line) == [(285.0, 104.0)]  # the middle of the plot (x 62-508, y 12-196)
    assert chart.find("path", "dots")  # one dot: a one-point line would not show
    assert [t.text for t in chart.find("text", "tick") if float(t.attrs["x"]) >= 62] == ["1"]


def test_a_single_epoch_of_two_workers_is_labelled_once(tmp_path: Path) -> None:
    root = drawn(tmp_path, run_of(tmp_path, [{}, {}], epochs=range(1, 2)))
    for chart in root.find("svg", "chart"):
        assert [t.text for t in chart.find("text", "tick") if float(t.attrs["x"]) >= 62] == ["1"]


def test_times_past_the_float_type_are_not_drawn(tmp_path: Path, killed: dict[str, Any]) -> None:
    rows = killed["timeline"][0]["workers"]
    killed["timeline"][0]["started_at"] = None  # the span is then from -1e308 to 1e308
    rows[0]["finished_at"], rows[1]["launched_at"], rows[2]["joined_at"] = 1e308, -1e308, float("nan")
    rows[2]["epoch_at"] = {"1": "soon", "2": True}
    root = drawn(tmp_path, killed)  # summary.json may hold NaN: Python's json writes and reads it
    [timeline] = root.find("svg", "timeline")
    assert len(timeline.find("g", "row")) == 3 and 2 <= len(timeline.find("text", "tick")) <= 12
    assert not timeline.find("g", data_worker="2")[0].find("path", "join")


def test_a_summary_that_cannot_be_laid_out_gives_a_page_that_says_why(tmp_path: Path) -> None:
    summary = {"run_id": "odd-run", "status": "failed", "reason": "worker 1 <b>failed</b>",
               "timeline": [{"attempt": 0, "workers": [{"host": "node0"}]}]}  # a worker without an index
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    written = write_report(str(tmp_path / "summary.json"), str(TEMPLATE), str(tmp_path / "report.html"))
    assert written["error"] == "KeyError: 'index'"
    root = Tree((tmp_path / "report.html").read_text()).root
    assert root.find("span", id="status")[0].text == "FAILED"
    assert root.find("div", id="reason")[0].text == "worker 1 <b>failed</b>" and not root.find("b")
    assert "The report could not be drawn: KeyError: 'index'" in root.find("p", id="not-drawn")[0].all_text()
    assert root.find("a")[0].attrs["href"] == "summary.json"


def test_a_template_that_fails_gives_a_page_and_a_warning_not_a_failed_task(tmp_path: Path, succeeded: dict[str, Any]) -> None:
    (tmp_path / "summary.json").write_text(json.dumps(succeeded))
    (tmp_path / "broken.html.j2").write_text("{{ __tf_verdict_report.no_such_field.x }}")
    action = ActionModule.__new__(ActionModule)
    action._task = SimpleNamespace(check_mode=False)  # type: ignore[attr-defined]
    action._find_needle = lambda _kind, name: name  # type: ignore[method-assign]
    args = {"summary": str(tmp_path / "summary.json"), "template": str(tmp_path / "broken.html.j2"),
            "dest": str(tmp_path / "report.html")}
    result = action.work(args, {})
    assert result["changed"] is True and "failed" not in result
    assert result["error"].startswith("UndefinedError: ")
    assert result["warnings"] == [
        f"the report could not be drawn ({result['error']}); {tmp_path}/report.html says so, and the verdict "
        f"and {tmp_path}/summary.json stand"
    ]
    assert Tree((tmp_path / "report.html").read_text()).root.find("span", id="status")[0].text == "SUCCEEDED"


# --- markup from logs and records never becomes markup (issue 24, point 21) -------------------


def markup(field: str) -> str:
    """Text that, printed unescaped, adds a script, an image with a handler, and (breaking
    out of a quoted attribute either way) a handler attribute; ``field`` names it."""
    return (
        f'<script>alert("{field}")</script><img src=x onerror="alert(1)">'
        f'" data-injected="1" onmouseover="alert(2)" \' data-injected=\'1\' onfocus=\'alert(3)\' <b>'
    )


class Elements(HTMLParser):
    """Every element and attribute of a page as a browser's parser sees them."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str]] = []
        self.text: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += [(k, v or "") for k, v in attrs]

    handle_startendtag = handle_starttag

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def injected(self) -> list[str]:
        """What the markup above added to the page, if it became markup."""
        return [f"<{t}>" for t in self.tags if t in ("script", "img", "b")] + [
            f"{k}=" for k, _ in self.attrs if k.startswith("on") or k in ("src", "data-injected")
        ]

    def shows(self, field: str) -> bool:
        """Whether the field's text reached the page (as text or an attribute's value)."""
        needle = f'alert("{field}")'.lower()
        return any(needle in piece.lower() for piece in self.text + [v for _, v in self.attrs])


FIELDS = (
    "run_id", "status", "reason", "written_at", "check_name", "check_detail", "metric", "value", "disagree_value",
    "host", "endpoint", "devices", "exit_reason", "signal", "cause_kind", "cause_detail", "log", "log_line",
    "stall_detail", "stack_where", "stack_frame", "stack_host",
)  # fmt: skip


def injected_run(tmp_path: Path) -> tuple[dict[str, Any], Path]:
    """A failed, restarted run (worker 1 killed, the others stopped, then a resume) whose
    every field that comes from a log or a record carries markup; its summary.json and the
    culprit's log written in the run directory."""
    run = tmp_path / "resume"
    hosts, eps = endpoints(3, 3)
    write_killed(run, hosts, eps)
    for index in range(3):
        write_worker(run, hosts[index], index, eps, attempt=1, start=T0 + 10, epochs=range(2, 5), resumed_from=1)
    summary = build(run, 3)
    m = {field: markup(field) for field in FIELDS}
    summary.update(run_id=m["run_id"], status=m["status"], reason=m["reason"], written_at=m["written_at"])
    summary["checks"][0].update(name=m["check_name"], detail=m["check_detail"])
    summary["context"]["devices"] = {"0": m["devices"]}
    summary["workers"][2].update(host=m["host"], endpoint=m["endpoint"])
    summary["stall"] = {"culprits": [1], "detail": m["stall_detail"]}
    summary["workers"][1]["stacks"] = {"where": m["stack_where"], "frames": ["train.py:9 in main", m["stack_frame"]]}
    summary["workers"][0]["stacks"] = {"where": "tensorflow", "frames": []}
    summary["workers"][0]["host"] = m["stack_host"]
    first, second = summary["timeline"]
    for row in first["workers"] + second["workers"]:
        row["metrics"] = {epoch: {m["metric"]: v["loss"]} for epoch, v in row["metrics"].items()}
    second["workers"][0]["metrics"]["3"] = {m["metric"]: m["value"]}
    second["disagreements"] = [{"epoch": "3", "metric": m["metric"], "values": [
        {"value": m["disagree_value"], "workers": [0]}, {"value": "0.5", "workers": [1, 2]}]}]
    first["workers"][2].update(host=m["host"], exit_reason=m["exit_reason"], signal=m["signal"], log=m["log"])
    first["workers"][1]["cause"] = {"kind": m["cause_kind"], "detail": m["cause_detail"]}
    first["workers"][0]["cause"] = {"kind": "runbook", "detail": m["cause_detail"]}
    (run / "node1" / "worker-1" / "worker.log").write_text(f"Traceback (most recent call last):\n{m['log_line']}\n")
    (run / "summary.json").write_text(json.dumps(summary))
    return summary, run


def test_markup_from_logs_and_records_stays_text(tmp_path: Path) -> None:
    """Every field a job, a log or a record can fill, filled with markup: the parsed page
    has none of its elements or attributes, and shows each field as text."""
    _summary, run = injected_run(tmp_path)
    written = write_report(str(run / "summary.json"), str(TEMPLATE), str(run / "report.html"))
    assert "error" not in written, written
    page_ = Elements((run / "report.html").read_text())
    assert page_.injected() == []
    assert [field for field in FIELDS if not page_.shows(field)] == []


@pytest.mark.parametrize(
    "expression",
    ["report.run.reason", "r.exit_reason", "check.detail", "c.metric", "n", "a.culprit.log_tail", "r.cause.detail",
     "r.host", "w.host", "report.stall.detail", "d.title", "report.run.id"],
)
def test_the_markup_test_fails_when_a_field_is_printed_raw(tmp_path: Path, expression: str) -> None:
    """The test above can fail: the same run, rendered with one field marked ``|safe``,
    puts the markup on the page."""
    _summary, run = injected_run(tmp_path)
    template = TEMPLATE.read_text(encoding="utf-8")
    assert "{{ %s }}" % expression in template
    raw = tmp_path / "raw.html.j2"
    raw.write_text(template.replace("{{ %s }}" % expression, "{{ %s | safe }}" % expression))
    written = write_report(str(run / "summary.json"), str(raw), str(run / "report.html"))
    assert "error" not in written, written
    assert "<script>" in Elements((run / "report.html").read_text()).injected()


# --- causes, the culprit's log, stalls, stacks and where each epoch came from -----------------

OOM = {"kind": "out-of-memory", "detail": "killed by SIGKILL; the kernel counted 1 OOM kill", "signal": "SIGKILL",
       "oom_kills": 1}
STOPPED = {"kind": "runbook", "detail": "stopped after worker 1 failed"}


def worker_rows(root: Node, attempt: int = 0) -> dict[str, Node]:
    table = root.find("div", "attempt", data_attempt=str(attempt))[0].find("table", "workers")[0]
    return {tr.find("td")[0].all_text().split()[0]: tr for tr in table.find("tbody")[0].find("tr")}


def test_each_workers_cause_is_in_its_timeline_row(killed: dict[str, Any]) -> None:
    rows = killed["timeline"][0]["workers"]
    rows[0]["cause"], rows[1]["cause"], rows[2]["cause"] = STOPPED, OOM, {"kind": "made-up", "detail": ""}
    _, root = page(killed)
    table = worker_rows(root)
    causes = {index: tr.find("td", "cause-cell")[0] for index, tr in table.items()}
    assert {i: td.all_text() for i, td in causes.items()} == {
        "0": "runbook stopped after worker 1 failed",
        "1": "out-of-memory killed by SIGKILL; the kernel counted 1 OOM kill",
        "2": "made-up ",
    }
    assert [td.find("span", "cause")[0].classes for td in causes.values()] == [
        {"cause", "runbook"}, {"cause", "out-of-memory"}, {"cause", "other"},  # only the contract's kinds as classes
    ]
    head = root.find("div", "attempt")[0].find("div", "head")[0].all_text()
    assert "culprit: worker 1 on node1, out-of-memory, exit status 137" in head
    [culprit] = root.find("svg", "timeline")[0].find("g", "culprit")
    assert "culprit: exit 137 SIGKILL, out-of-memory" in culprit.all_text()
    assert culprit.find("title")[0].text.endswith("(exited), out-of-memory - the culprit")


def test_a_summary_written_before_causes_is_drawn_without_them(killed: dict[str, Any]) -> None:
    # A summary.json of an earlier version: none of the keys the causes work added.
    for key in ("stall", "epoch_sources", "stopped", "judged_again"):
        killed.pop(key, None)
    for worker in killed.get("workers", []):
        worker.pop("cause", None)
        worker.pop("stacks", None)
    for attempt in killed.get("timeline", []):
        for row in attempt.get("workers", []):
            row.pop("cause", None)
    _, root = page(killed)
    assert not root.find("td", "cause-cell") and "cause" not in [th.text for th in root.find("th")]
    assert not root.find("div", id="stall") and not root.find("section", id="stacks")
    assert not root.find("p", id="epoch-sources") and not root.find("pre", "log-tail")


TRACEBACK = [
    "Epoch 2/3",
    "Traceback (most recent call last):",
    '  File "/job/train.py", line 41, in load_batch',
    "    import missing_module",
    "ModuleNotFoundError: No module named 'missing_module'",
]


def test_the_culprits_last_log_lines_are_a_block_with_their_line_breaks(tmp_path: Path, killed: dict[str, Any]) -> None:
    run = tmp_path / "killed"
    (run / "node1" / "worker-1" / "worker.log").write_text("\n".join(["noise"] * 40 + TRACEBACK) + "\n\n")
    (run / "summary.json").write_text(json.dumps(killed))
    write_report(str(run / "summary.json"), str(TEMPLATE), str(run / "report.html"))
    root = Tree((run / "report.html").read_text()).root
    [block] = root.find("pre", "log-tail")
    assert block.attrs["data-worker"] == "1"
    assert block.text == "\n".join(["noise"] * 15 + TRACEBACK)  # the last 20 non-blank lines, as the log has them
    caption = block.parent.find("p", "caption")[0].all_text()  # type: ignore[union-attr]
    assert caption == "The last 20 line(s) of the culprit's log (worker 1, node1/worker-1/worker.log):"


def test_log_tail_reads_the_end_of_a_large_log_only(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    log.write_text("".join(f"line {n:07d} of a long log\n" for n in range(200_000)) + "last \x1b[2J line\n")
    assert log.stat().st_size > 5_000_000
    with cpu_budget(0.5):
        tail = log_tail(str(log))
    assert tail == [f"line {n:07d} of a long log" for n in range(199_981, 200_000)] + ["last \\x1b[2J line"]
    everything = log_tail(str(log), lines=10**6)
    # The last 64 KiB: the 16-byte last line and the whole 27-byte lines before it; the
    # line cut at the start of the read is dropped.
    assert len(everything) == 1 + (64 * 1024 - 16) // 27 and re.fullmatch(r"line \d{7} of a long log", everything[0])
    assert log_tail(str(tmp_path / "missing.log")) == []


def test_a_log_path_outside_the_run_is_not_read(tmp_path: Path, killed: dict[str, Any]) -> None:
    run = tmp_path / "killed"
    (tmp_path / "secret.log").write_text("secret\n")
    killed["timeline"][0]["workers"][1]["log"] = "../secret.log"
    assert culprit_log_tails(killed, str(run)) == {}
    killed["timeline"][0]["workers"][1]["log"] = "node1/worker-1/worker.log"
    assert list(culprit_log_tails(killed, str(run))) == ["node1/worker-1/worker.log"]


FRAMES = ["train.py:88 in main", "train.py:52 in train_epoch", "data.py:41 in load_batch"]


def test_a_stall_and_each_workers_stack_are_shown(killed: dict[str, Any]) -> None:
    killed["stall"] = {"culprits": [1], "detail": "no worker printed progress for 20 s"}
    killed["workers"][1]["stacks"] = {"file": "stacks.txt", "captured_at": T0 + 30, "where": "own-code", "frames": FRAMES}
    killed["workers"][0]["stacks"] = {"file": "stacks.txt", "captured_at": T0 + 30, "where": "tensorflow", "frames": []}
    _, root = page(killed)
    assert root.find("div", id="stall")[0].all_text() == "Stalled: no worker printed progress for 20 s\nculprit: worker 1"
    rows = root.find("section", id="stacks")[0].find("tr", "stack")
    assert [(r.attrs["data-worker"], "culprit" in r.classes) for r in rows] == [("0", False), ("1", True)]
    assert [td.all_text() for td in rows[0].find("td")] == ["0", "node0", "TensorFlow", "no frame of its own code"]
    assert rows[1].find("td")[2].text == "its own code"
    assert rows[1].find("pre", "frames")[0].text == "\n".join(FRAMES)  # innermost last, one a line
    killed["stall"]["culprits"] = []
    assert page(killed)[1].find("div", id="stall")[0].all_text().endswith("culprit: every worker stalled")


def test_where_each_epoch_came_from(resumed: dict[str, Any]) -> None:
    resumed["epoch_sources"] = {"1": 0, "2": 1, "3": 1, "4": 1}
    _, root = page(resumed)
    assert root.find("p", id="epoch-sources")[0].all_text() == (
        "Each epoch is judged once, from the latest attempt that printed it:\n"
        "epoch(s) 1 from attempt 0; epoch(s) 2-4 from attempt 1."
    )
    taken = [div.find("span", "epochs-taken")[0].text for div in root.find("div", "attempt")]
    assert taken == ["epoch(s) 1 judged from this attempt", "epoch(s) 2-4 judged from this attempt"]


def test_one_attempt_says_nothing_about_where_epochs_came_from(succeeded: dict[str, Any]) -> None:
    succeeded["epoch_sources"] = {"1": 0, "2": 0, "3": 0}
    _, root = page(succeeded)
    assert not root.find("p", id="epoch-sources")
    assert root.find("span", "epochs-taken")[0].text == "epoch(s) 1-3 judged from this attempt"


@pytest.mark.parametrize(("epochs", "shown"), [([], ""), ([4], "4"), ([3, 1, 2, 5, 8, 7], "1-3, 5, 7-8")])
def test_epoch_ranges(epochs: list[int], shown: str) -> None:
    assert tf_report.epoch_ranges(epochs) == shown


def test_keras_jobs_join_and_epoch_marks(tmp_path: Path) -> None:
    """A Keras job prints no contract line: it joined when its first epoch began (its first
    timed ``Epoch 1/N`` header), and epoch E ended at the step line printed after the
    ``Epoch E/N`` header (verbose=2 prints one at the end of each epoch). A worker whose
    supervisor timed no line falls back to state.json's own note of the join."""
    run = tmp_path / "keras"
    hosts, eps = endpoints(2)
    for index in range(2):
        wdir = write_worker(run, hosts[index], index, eps, epochs=range(1, 3))
        lines = [f"Epoch {e}/2\n4/4 - 1s - 12ms/step - loss: 0.{7 - e}000" for e in (1, 2)]
        (wdir / "worker.log").write_text("\n".join(lines) + "\n")
        record = json.loads((wdir / "exit.json").read_text())
        timed = [
            [T0 + 2.0, "Epoch 1/2"], [T0 + 3.5, "4/4 - 1s - 12ms/step - loss: 0.6000"],
            [T0 + 3.6, "Epoch 2/2"], [T0 + 5.0, "4/4 - 1s - 12ms/step - loss: 0.5000"],
        ]
        record.update(timed_lines=timed if index == 1 else [], finished_at=T0 + 5.0)
        (wdir / "exit.json").write_text(json.dumps(record))
        if index == 0:  # the supervisor's own note of the join, where its state was collected
            (wdir / "state.json").write_text(json.dumps({"started_at": T0, "joined_at": T0 + 1.25}))
    summary = build(run, 2)
    row = summary["timeline"][0]["workers"][1]
    assert (row["joined"], row["joined_at"], row["epoch_at"]) == (True, T0 + 2.0, {"1": T0 + 3.5, "2": T0 + 5.0})
    assert summary["timeline"][0]["workers"][0]["joined_at"] == T0 + 1.25
    _, root = page(summary)
    assert [tr.find("td")[3].text for tr in worker_rows(root).values()] == ["1.2 s", "2.0 s"]
    rows = root.find("svg", "timeline")[0].find("g", "row")
    [marks] = rows[1].find("path", "epochs")
    # A 5 s attempt: 854 / 5 px a second from x = 170; epoch 1 ended at 3.5 s, epoch 2 at 5 s.
    assert [float(m) for m in re.findall(r"M([\d.]+) ", marks.attrs["d"])] == [767.8, 1024.0]
    assert not rows[0].find("path", "epochs")


def test_a_run_too_large_to_draw_gives_a_page_that_says_why(succeeded: dict[str, Any]) -> None:
    """Past 500,000 metric values the page would take minutes and tens of MB: it says so
    instead, and still shows the verdict's checks."""
    row = succeeded["timeline"][0]["workers"][0]
    row["metrics"] = {str(epoch): {"loss": "0.5", "accuracy": "0.5"} for epoch in range(1, 250_002)}
    succeeded["checks"][1]["detail"] = "<b>a detail</b>"
    with cpu_budget(2.0):
        html, error = draw(succeeded, TEMPLATE.read_text(encoding="utf-8"), "/nonexistent")
    # 250,001 epochs of two metrics on worker 0, 3 of two on worker 1.
    assert error is not None and error.endswith(
        ": tf_report_view: 500008 metric values are more than the report draws (500000); summary.json holds them all"
    )
    root = Tree(html).root
    assert root.find("span", id="status")[0].text == "SUCCEEDED"
    rows = root.find("table", id="checks")[0].find("tr", "check")
    assert [r.find("code")[0].text for r in rows] == [c["name"] for c in succeeded["checks"]]
    assert rows[1].find("td")[2].text == "<b>a detail</b>" and not root.find("b")


# --- the operator's view (issue 39) ---------------------------------------------------------


def test_a_run_shows_its_total_time_and_each_epochs_time(succeeded: dict[str, Any]) -> None:
    """Joined 2 s after launch, then an epoch every 1.5 s (report_runs.write_worker)."""
    view = tf_report_view(succeeded)
    assert view["run"]["duration"] != "-"
    times = view["timelines"][0]["epoch_times"]
    assert times["worker"] == 0
    assert [e["epoch"] for e in times["epochs"]] == [1, 2, 3]
    assert (times["mean"], times["last"]) == ("1.5 s", "1.5 s")
    _, root = page(succeeded)
    assert root.find("span", id="total-time")[0].text.startswith("took ")
    [shown] = root.find("p", "epoch-times")
    assert "2: 1.5 s" in shown.text and "mean 1.5 s, last 1.5 s" in shown.text
    assert [c.text for c in root.find("td", "per-epoch")] == ["1.5 s", "1.5 s"]
    # A run that succeeded needs no next step.
    assert view["next_steps"] is None and not root.find("div", id="next-steps")


def test_a_failed_run_says_what_to_do_next(killed: dict[str, Any]) -> None:
    view = tf_report_view(killed, resume={"inventory": ["/inv/hosts yml"], "playbook": "/rb/train.yml"})
    steps = view["next_steps"]
    assert steps["resume"] == "ansible-playbook /rb/train.yml -i '/inv/hosts yml' -e tf_run_id=killed -e tf_resume=true"
    assert steps["culprit"]["log"] == "node1/worker-1/worker.log"
    # Without the playbook run's inventory, a placeholder says what goes there.
    assert tf_report_view(killed)["next_steps"]["resume"] == (
        "ansible-playbook train.yml -i <inventory> -e tf_run_id=killed -e tf_resume=true"
    )
    _, root = page(killed)
    [box] = root.find("div", id="next-steps")
    assert box.find("a", "log")[0].attrs["href"] == "node1/worker-1/worker.log"
    assert "tf_resume=true" in box.find("pre", id="resume-command")[0].text


def test_collected_artifacts_are_listed_from_every_attempt(tmp_path: Path, resumed: dict[str, Any]) -> None:
    """A resumed run's model sits under its last attempt's retry-N/ directory."""
    run = tmp_path / "resume"
    model = run / "node0" / "retry-1" / "worker-0" / "model"
    model.mkdir()
    (model / "model.keras").write_text("m")
    (run / "node0" / "worker-0" / "tensorboard").mkdir()
    (run / "node1" / "worker-1" / "outside").symlink_to(tmp_path)
    # The runbook's records are not the job's output, nor is the chief's marker.
    found = tf_report_action_module.collected_artifacts(str(run), MARKER)
    assert found == ["node0/retry-1/worker-0/model", "node0/worker-0/tensorboard"]
    html = tf_report_action_module.draw(resumed, TEMPLATE.read_text(encoding="utf-8"), str(run), {"marker": MARKER})[0]
    [section] = Tree(html).root.find("section", id="artifacts")
    assert [a.attrs["href"] for a in section.find("a")] == ["node0/retry-1/worker-0/model", "node0/worker-0/tensorboard"]
    assert not Tree(render(resumed)).root.find("section", id="artifacts")


def test_long_causes_wrap_instead_of_pushing_the_log_links_off_the_card() -> None:
    css = TEMPLATE.read_text(encoding="utf-8")
    assert re.search(r"table\.workers td[^{]*\{[^}]*overflow-wrap: anywhere", css)


# --- the sidecar evaluator (issue 41) ---------------------------------------------------------


@pytest.mark.parametrize(("status", "state"), [("stopped", "ok"), ("failed", "fail")])
def test_the_evaluators_metrics_are_a_section_of_their_own(succeeded: dict[str, Any], status: str, state: str) -> None:
    """One row per evaluated checkpoint, apart from the training's checks and charts; how
    it ended, with its log linked."""
    evaluator = {
        "index": 2, "host": "node2", "status": status, "required": False, "exit_status": -15 if status == "stopped" else 2,
        "reason": "r", "cause": {"kind": "job-error"} if status == "failed" else None, "stopped_by": "runbook",
        "training_ended": status == "stopped", "log": "/runs/r/node2/worker-2/worker.log",
        "log_in_run": "node2/worker-2/worker.log",
        "evaluations": [{"epoch": 1, "metrics": {"loss": "0.7", "binary_accuracy": "0.5"}},
                        {"epoch": 3, "metrics": {"loss": "0.2", "binary_accuracy": "0.9"}}],
    }  # fmt: skip
    summary = {**succeeded, "evaluator": evaluator}
    view = tf_report_view(summary)["evaluator"]
    assert view["names"] == ["binary_accuracy", "loss"]
    assert view["rows"] == [{"epoch": 1, "cells": ["0.5", "0.7"]}, {"epoch": 3, "cells": ["0.9", "0.2"]}]
    _, root = page(summary)
    [section] = root.find("section", id="evaluator")
    [line] = section.find("p", id="evaluator-status")
    assert state in line.attrs.get("class", "") and "node2" in line.text
    assert ("FAILED" in line.text) == (status == "failed")
    assert [a.attrs["href"] for a in line.find("a", "log")] == ["node2/worker-2/worker.log"]
    rows = section.find("tr", "evaluation")
    assert [[td.text for td in r.find("td")] for r in rows] == [["1", "0.5", "0.7"], ["3", "0.9", "0.2"]]
    # Without an evaluator, no section.
    assert tf_report_view(succeeded)["evaluator"] is None and not page(succeeded)[1].find("section", id="evaluator")
