"""Open a run report in a real headless browser (Debian's ``chromium``).

``ensure_chromium()`` installs the package when it is missing (``apt-get update`` first),
the way nshosts.ensure_openssh_server installs openssh-server. ``measure(report, tmp)``
loads a copy of the report with a measuring script appended (the report itself has no
script) and returns, from the rendered DOM, the size of every chart and timeline and of
what was drawn in them. ``screenshot(report, png, height)`` takes a picture of the page.
The browser runs offline-minded: no first-run, sync, component updates, background
networking or QUIC, and a fresh profile every time.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from nshosts import _global_lock

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]
WIDTH = 1240
# Where screenshots are kept after the test (TF_RUNBOOK_TEST_ARTIFACTS overrides).
ARTIFACTS = Path(os.environ.get("TF_RUNBOOK_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / ".artifacts"))

MEASURE = """
<script>
(() => {
  const box = (el) => { const r = el.getBoundingClientRect(); return {width: r.width, height: r.height}; };
  const bbox = (el) => { const b = el.getBBox(); return {width: b.width, height: b.height}; };
  const out = {page: {width: document.documentElement.scrollWidth, height: document.documentElement.scrollHeight},
               charts: [], timelines: []};
  for (const svg of document.querySelectorAll('svg.chart')) {
    out.charts.push({metric: svg.dataset.metric, ...box(svg),
      series: [...svg.querySelectorAll('polyline.series')].map((p) => ({
        worker: p.dataset.worker, attempt: p.dataset.attempt, points: p.points.numberOfItems, ...bbox(p)})),
      disagreements: svg.querySelectorAll('circle.disagree').length});
  }
  for (const svg of document.querySelectorAll('svg.timeline')) {
    out.timelines.push({attempt: svg.dataset.attempt, ...box(svg),
      rows: [...svg.querySelectorAll('g.row')].map((g) => {
        const part = (sel) => { const el = g.querySelector(sel); return el ? box(el) : null; };
        return {worker: g.dataset.worker, status: g.getAttribute('class'), bar: part('rect.bar'),
                epochs: part('path.epochs'), join: part('path.join'),
                exit: part('.exit-ok, .exit-culprit, .exit-stopped, .exit-failed')};
      })});
  }
  const pre = document.createElement('pre');
  pre.id = 'measured';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""


def ensure_chromium() -> None:
    """Install Debian's chromium when it is missing (a fresh CI machine)."""
    if Path(CHROMIUM).exists():
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    with _global_lock():
        if Path(CHROMIUM).exists():
            return
        for argv in (["apt-get", "update", "-q"],
                     ["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"]):
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900, check=False)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(argv)} failed: {(proc.stderr or proc.stdout)[-2000:]}")


def _chromium(*args: str, timeout: int = 120) -> str:
    profile = tempfile.mkdtemp(prefix="tf-report-chromium-")
    try:
        proc = subprocess.run(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True, text=True, timeout=timeout, check=False,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert proc.returncode == 0, f"chromium failed ({proc.returncode}): {proc.stderr[-2000:]}"
    return proc.stdout


def measure(report: Path, tmp: Path) -> dict[str, Any]:
    """What the browser drew: sizes of each chart, timeline and their parts."""
    page = report.read_text(encoding="utf-8")
    assert "<script" not in page.lower(), "the report itself must carry no script"
    probe = tmp / "measure.html"
    probe.write_text(page.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    dom = _chromium(f"--window-size={WIDTH},1000", "--dump-dom", probe.as_uri())
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    return json.loads(html.unescape(found.group(1)))


def screenshot(report: Path, png: Path, height: int) -> Path:
    """A picture of the whole page (``height`` pixels tall), kept under ``png``."""
    png.parent.mkdir(parents=True, exist_ok=True)
    _chromium(f"--window-size={WIDTH},{height}", f"--screenshot={png}", report.as_uri())
    assert png.stat().st_size > 10_000, png
    return png
