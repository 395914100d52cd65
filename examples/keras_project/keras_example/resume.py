"""The callbacks of a training that a restart resumes: the epoch's line, then every worker
meets, then the backup.

The runbook's verdict accepts a resume after epoch E only when every worker printed epoch
E (docs/verdict.md). Keras adds its progress logger, which prints the epoch's line, after
the callbacks it is given, so ``BackupAndRestore`` would back an epoch up before any
worker printed it: a worker killed between the two leaves a backup of an epoch it never
printed, the restart resumes after it, and the verdict refuses the run. Here the logger
comes first, then every worker meets in one collective, then the backup: a backup of
epoch E exists only once every worker printed epoch E.
"""

from __future__ import annotations

import tensorflow as tf


class EveryWorkerMeets(tf.keras.callbacks.Callback):
    """At the end of every epoch, returns only once every worker got there (a sum of one
    per replica, a collective of the strategy)."""

    def __init__(self, strategy: tf.distribute.Strategy) -> None:
        super().__init__()

        @tf.function
        def meet() -> tf.Tensor:
            per_replica = strategy.run(lambda: tf.constant(1, dtype=tf.int64))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        self._meet = meet

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self._meet()


def resume_callbacks(strategy: tf.distribute.Strategy, backup_dir: str) -> list[tf.keras.callbacks.Callback]:
    """The epoch's line (Keras' own, as ``verbose`` says), every worker meets, the backup."""
    return [
        tf.keras.callbacks.ProgbarLogger(count_mode="steps"),
        EveryWorkerMeets(strategy),
        tf.keras.callbacks.BackupAndRestore(backup_dir=backup_dir),
    ]
