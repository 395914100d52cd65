"""Generated data: the same on every worker (fixed seeds), so that their Keras metrics,
all-reduced across the cluster, agree line for line."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf


def make_dataset(config: dict[str, Any], global_batch_size: int) -> tf.data.Dataset:
    rng = np.random.default_rng(config["seed"])
    x = rng.normal(size=(config["samples"], config["features"])).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int64")
    dataset = tf.data.Dataset.from_tensor_slices((x, y))
    return dataset.shuffle(config["samples"], seed=config["seed"] + 1).repeat().batch(global_batch_size)
