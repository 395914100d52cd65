"""The model: built and compiled inside the strategy's scope by train.py."""

from __future__ import annotations

from typing import Any

import tensorflow as tf


def build_and_compile_model(config: dict[str, Any]) -> tf.keras.Model:
    model = tf.keras.Sequential(
        [
            tf.keras.layers.InputLayer(input_shape=(config["features"],)),
            tf.keras.layers.Dense(16, activation="relu"),
            tf.keras.layers.Dense(2),
        ]
    )
    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=tf.keras.optimizers.SGD(learning_rate=config["learning_rate"]),
        metrics=["accuracy"],
    )
    return model
