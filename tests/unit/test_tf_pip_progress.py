"""How far a pip install is, from its --log file (tf_pip_progress), and the line printed."""

from __future__ import annotations

from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_pip_progress import pip_progress, progress_line

LOG = """\
2026-12-06T13:16:43,600 Created temporary directory: /tmp/pip-x
2026-12-06T13:16:43,689 Collecting tensorflow-cpu==2.21.0
2026-12-06T13:16:43,749   Downloading tensorflow_cpu-2.21.0-cp311-cp311-manylinux_2_27_x86_64.whl (270.4 MB)
2026-12-06T13:16:50,789 Collecting numpy==2.3.5
2026-12-06T13:16:50,790   Using cached numpy-2.3.5-cp311-cp311-manylinux_2_28_x86_64.whl (16.9 MB)
2026-12-06T13:16:50,796 Collecting six
2026-12-06T13:16:50,797   Downloading six-1.16.0-py2.py3-none-any.whl (11 kB)
     ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 11.0/11.0 kB 39.2 MB/s eta 0:00:00
"""


def test_the_steps_so_far_are_counted_and_the_current_download_named() -> None:
    progress = pip_progress(LOG)
    assert progress == {"collected": 3, "downloaded_bytes": 270_400_000,
                        "downloading": {"file": "six-1.16.0-py2.py3-none-any.whl", "size": 11_000},
                        "installing": None, "done": False}
    line = progress_line("w0", progress, 65.2, 2)
    assert line == ("w0: installing the worker requirements: 3 packages collected (2 pinned, with their dependencies), "
                    "270 MB downloaded, downloading six-1.16.0-py2.py3-none-any.whl (11 kB); 1m 05s so far")


def test_the_install_step_and_the_end_are_told() -> None:
    installing = LOG + "2026-12-06T13:17:01,000 Installing collected packages: six, numpy, tensorflow-cpu\n"
    progress = pip_progress(installing)
    assert progress["installing"] == 3 and progress["downloading"] is None and progress["downloaded_bytes"] == 270_411_000
    assert progress_line("w1", progress, 80, 2).startswith("w1: installing the worker requirements: all 3 packages in hand")
    done = pip_progress(installing + "2026-12-06T13:17:30,000 Successfully installed six-1.16.0\n")
    assert done["done"] and "installed; finishing; 1m 20s so far" in progress_line("w1", done, 80, 2)


def test_an_empty_log_is_pip_starting_and_the_first_line_says_where() -> None:
    progress = pip_progress("")
    assert progress["collected"] == 0 and not progress["done"]
    assert progress_line("w0", progress, 2, 2, "/h/venv") == (
        "w0: installing the worker requirements into /h/venv: starting pip (2 pinned packages); 2s so far")
