"""Saving under MultiWorkerMirroredStrategy, as TensorFlow's multi-worker Keras guide says.

Every worker calls ``model.save`` (saving may run collective operations, so a worker that
skipped it could hang the others), but only the chief writes to the real path; every other
worker writes to a temporary directory of its own and deletes it afterwards.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import tensorflow as tf


def is_chief(task_type: str | None, task_id: int | None) -> bool:
    """Worker 0 is the chief (there is no separate chief task); no task type: one worker."""
    return task_type is None or task_type == "chief" or (task_type == "worker" and task_id == 0)


def write_filepath(filepath: str, task_type: str | None, task_id: int | None) -> str:
    """``filepath`` for the chief; a path in a fresh temporary directory for the others."""
    if is_chief(task_type, task_id):
        return filepath
    return os.path.join(tempfile.mkdtemp(prefix=f"workertemp_{task_id}_"), os.path.basename(filepath))


def save_model(model: tf.keras.Model, filepath: str, strategy: tf.distribute.Strategy) -> str:
    """Save ``model`` on every worker; the path the chief's copy is at."""
    resolver = strategy.cluster_resolver
    task_type, task_id = (resolver.task_type, resolver.task_id) if resolver is not None else (None, None)
    path = write_filepath(filepath, task_type, task_id)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    model.save(path)
    if not is_chief(task_type, task_id):
        shutil.rmtree(os.path.dirname(path))
    return filepath
