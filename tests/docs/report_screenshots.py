"""Draw the run report of collected runs again with this tree's template and take a
picture of each page for docs/ (Debian's chromium, headless, as the report tests use it).

    .venv/bin/python tests/docs/report_screenshots.py RUN_DIR:docs/report-succeeded.png ...

Each RUN_DIR is a run's directory on the controller (``runs/<run_id>/``, holding its
``summary.json``); its report is written to a temporary copy of the directory, so the
run itself is left as it is. The picture is as tall as ``--height`` pixels (1600 by
default): the top of the report, its header, the verdict and the first attempts.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO / "collections"))

from browser import ensure_chromium, screenshot  # noqa: E402  (tests/integration on the path first)
from ansible_collections.tf_runbook.multiworker.plugins.action.tf_report import write_report  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pairs", nargs="+", metavar="RUN_DIR:PNG")
    parser.add_argument("--height", type=int, default=1600)
    args = parser.parse_args(argv)
    ensure_chromium()
    for pair in args.pairs:
        run_dir, _, png = pair.rpartition(":")
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / Path(run_dir).name
            shutil.copytree(run_dir, copy)
            report = copy / "report.html"
            write_report(str(copy / "summary.json"), str(REPO / "templates" / "report.html.j2"), str(report))
            screenshot(report, REPO / png, args.height)
        print(f"{png}: the report of {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
