"""Entry script of the example project (tf_train_script: train.py).

An ordinary multi-worker Keras script: the runbook hands each worker its TF_CONFIG, and
the script prints nothing for the runbook; the verdict and the wait read Keras' own
``model.fit(verbose=2)`` lines (``Epoch 2/4``, then ``5/5 - 0s - loss: ... - accuracy: ...``).

    python train.py [--config train.json]

Run as is on one machine (no TF_CONFIG) it trains a single worker.
"""

from __future__ import annotations

import argparse
import os

# Keras 3's model.fit fails under MultiWorkerMirroredStrategy with more than one worker
# (TensorFlow 2.21); tf_keras trains. The inventory sets TF_USE_LEGACY_KERAS=1 for the job
# (tf_worker_env): without it, say so at once rather than fail deep inside model.fit.
if os.environ.get("TF_USE_LEGACY_KERAS") != "1":
    raise SystemExit("TF_USE_LEGACY_KERAS=1 must be set (tf_worker_env), and tf_keras installed")

import tensorflow as tf  # noqa: E402

from keras_example.config import load_config  # noqa: E402
from keras_example.data import make_dataset  # noqa: E402
from keras_example.model import build_and_compile_model  # noqa: E402
from keras_example.resume import resume_callbacks  # noqa: E402
from keras_example.saving import save_model  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="train.json", help="a file of configs/, or an absolute path")
    config = load_config(parser.parse_args(argv).config)

    # Created before any other TensorFlow operation; it reads TF_CONFIG.
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch_size = config["per_worker_batch_size"] * strategy.num_replicas_in_sync
    with strategy.scope():
        model = build_and_compile_model(config)

    # A restarted attempt (tf_restart_attempts) resumes from the last completed epoch: the
    # runbook hands every worker the chief's backup in TF_RUNBOOK_CHECKPOINT_DIR. Each
    # epoch is backed up only once every worker printed its line (keras_example/resume.py).
    callbacks = resume_callbacks(strategy, os.environ.get("TF_RUNBOOK_CHECKPOINT_DIR", "backup"))
    model.fit(
        make_dataset(config, global_batch_size),
        epochs=config["epochs"],
        steps_per_epoch=config["steps_per_epoch"],
        callbacks=callbacks,
        verbose=2,
    )
    save_model(model, config["model_path"], strategy)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
