"""The run report: the verdict's timeline data, the layout filter and the rendered page.

Every page here is rendered from a crafted collected run (see report_runs.py) through the
verdict (summarize + add_timeline), the tf_report_view filter and templates/report.html.j2,
then parsed, and its structure and numbers checked.
"""

from __future__ import annotations

import json
import os
import re
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleActionFail, AnsibleFilterError

import tf_report
from report_runs import TEMPLATE, T0, build, endpoints, metrics_of, render, write_worker
from tf_report import fmt_seconds, nice_ticks, tf_report_view
from tf_report_action import write_report
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


def chart_x(epoch: int, low: int, high: int) -> float:
    left, right = tf_report.CHART_LEFT, tf_report.CHART_W - tf_report.CHART_RIGHT
    return round(left + (epoch - low) / (high - low) * (right - left), 1)


def timeline_x(seconds: float, span: float) -> float:
    left, right = tf_report.TIMELINE_LABEL_W, tf_report.TIMELINE_W - tf_report.TIMELINE_RIGHT
    return round(left + seconds / span * (right - left), 1)


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
        assert [x for x, _ in coords] == [chart_x(e, 1, 3) for e in (1, 2, 3)]
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
    span = 7.0  # launch at T0, last exit at T0 + 7
    for row in rows:
        [bar] = row.find("rect", "bar")
        assert float(bar.attrs["x"]) == timeline_x(0, span)
        assert float(bar.attrs["width"]) == pytest.approx(timeline_x(7, span) - timeline_x(0, span), abs=0.15)
        [epochs] = row.find("path", "epochs")
        assert [float(m) for m in re.findall(r"M([\d.]+) ", epochs.attrs["d"])] == [
            timeline_x(t, span) for t in (3.5, 5.0, 6.5)
        ]
        [join] = row.find("path", "join")
        assert join.attrs["d"].startswith(f"M{timeline_x(2.0, span)} ")
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
    assert {float(c.attrs["cx"]) for c in circles} == {chart_x(2, 1, 3)}
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
    span = 6.2
    [bar] = culprit.find("rect", "bar")
    assert float(bar.attrs["x"]) + float(bar.attrs["width"]) == pytest.approx(timeline_x(4.5, span), abs=0.15)
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
    span = 6.2
    assert float(resume.attrs["x1"]) == timeline_x(3.5, span)  # epoch 1 of attempt 0 ended at T0 + 3.5
    assert "attempt 1 resumed after epoch 1" in first.all_text()
    note = root.find("div", "attempt", data_attempt="1")[0].find("p", "resume-note")[0].text
    assert "Resumed after epoch 1" in note and "from epoch 2" in note
    loss = root.find("svg", "chart", data_metric="loss")[0]
    dashed = [line for line in loss.find("polyline", "series") if "stroke-dasharray" in line.attrs]
    solid = [line for line in loss.find("polyline", "series") if "stroke-dasharray" not in line.attrs]
    assert {line.attrs["data-attempt"] for line in dashed} == {"0"} and len(solid) == 3
    assert [x for x, _ in points(solid[0])] == [chart_x(e, 1, 4) for e in (2, 3, 4)]
    [restart] = loss.find("line", "resume")
    assert float(restart.attrs["x1"]) == chart_x(1, 1, 4)
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
