"""The project's settings, read from configs/ next to this package.

The runbook starts each worker in the worker's own directory (where its log and model
go), not in the project's: a path such as ``configs/train.json`` opened as is would be
looked up there. So the config is found relative to this file, wherever the project was
unpacked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
REQUIRED = ("epochs", "steps_per_epoch", "per_worker_batch_size", "learning_rate", "samples", "features", "seed",
            "model_path")


def config_path(name: str) -> Path:
    """``name`` as given when absolute, else the file of that name in the project's configs/."""
    path = Path(name)
    return path if path.is_absolute() else CONFIG_DIR / path


def load_config(name: str = "train.json") -> dict[str, Any]:
    """The settings of ``name``; a missing key is an error that names the file and the key."""
    path = config_path(name)
    config = json.loads(path.read_text(encoding="utf-8"))
    missing = [key for key in REQUIRED if key not in config]
    if missing:
        raise SystemExit(f"{path}: missing setting(s) {', '.join(missing)}")
    return config
