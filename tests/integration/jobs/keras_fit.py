"""An ordinary multi-worker Keras script, written like TensorFlow's multi-worker Keras
tutorial (model.fit under MultiWorkerMirroredStrategy, the chief saves the model, the
other workers save to a temporary directory they delete), on generated data. It prints
nothing for the runbook: the verdict reads Keras' own verbose=2 epoch lines.

KERAS_FIT_EPOCHS (default 3) and KERAS_FIT_EPOCH_SECONDS (default 0: no wait) in its
environment make it train longer, each epoch waiting that long first, for a test that
watches its progress (tests/integration/test_progress.py).
"""

import json
import os
import shutil
import tempfile
import time

# Keras 3's model.fit fails under MultiWorkerMirroredStrategy with two workers in TF 2.21;
# tf_keras trains. The inventory hands TF_USE_LEGACY_KERAS=1 to the job (tf_worker_env):
# without it, say so at once rather than fail deep inside model.fit.
if os.environ.get("TF_USE_LEGACY_KERAS") != "1":
    raise SystemExit("TF_USE_LEGACY_KERAS=1 must be set (tf_worker_env)")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

per_worker_batch_size = 16
tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])

strategy = tf.distribute.MultiWorkerMirroredStrategy()


def make_dataset(global_batch_size: int) -> tf.data.Dataset:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(320, 8)).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int64")
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(320, seed=1).repeat().batch(global_batch_size)


def build_and_compile_model() -> tf.keras.Model:
    model = tf.keras.Sequential(
        [
            tf.keras.layers.InputLayer(input_shape=(8,)),
            tf.keras.layers.Dense(16, activation="relu"),
            tf.keras.layers.Dense(2),
        ]
    )
    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=tf.keras.optimizers.SGD(learning_rate=0.05),
        metrics=["accuracy"],
    )
    return model


def is_chief(task_type: str | None, task_id: int | None) -> bool:
    return task_type is None or task_type == "chief" or (task_type == "worker" and task_id == 0)


def write_filepath(filepath: str, task_type: str | None, task_id: int | None) -> str:
    """The chief writes to ``filepath``; every other worker to a temporary directory."""
    if is_chief(task_type, task_id):
        return filepath
    return os.path.join(tempfile.mkdtemp(prefix=f"workertemp_{task_id}_"), os.path.basename(filepath))


class SlowEpochs(tf.keras.callbacks.Callback):
    """Each epoch waits ``seconds`` after Keras printed its ``Epoch E/N`` line."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        time.sleep(self.seconds)


epochs = int(os.environ.get("KERAS_FIT_EPOCHS", "3"))
epoch_seconds = float(os.environ.get("KERAS_FIT_EPOCH_SECONDS", "0"))
global_batch_size = per_worker_batch_size * num_workers
with strategy.scope():
    multi_worker_model = build_and_compile_model()
multi_worker_model.fit(
    make_dataset(global_batch_size), epochs=epochs, steps_per_epoch=5, verbose=2,
    callbacks=[SlowEpochs(epoch_seconds)] if epoch_seconds else None,
)

task_type, task_id = strategy.cluster_resolver.task_type, strategy.cluster_resolver.task_id
model_path = write_filepath(os.path.join("model", "model.keras"), task_type, task_id)
os.makedirs(os.path.dirname(model_path), exist_ok=True)
multi_worker_model.save(model_path)  # every worker saves: saving may use collectives
if not is_chief(task_type, task_id):
    shutil.rmtree(os.path.dirname(model_path))
