"""A custom training loop built on TensorFlow's own answer to preemption,
``tf.distribute.experimental.PreemptionCheckpointHandler`` (as TensorFlow's fault-tolerance
guide writes it): when any worker gets SIGTERM, every worker saves a checkpoint at the same
step and exits 42; started again, the handler restores that checkpoint and training goes on
from the step it saved.

The handler has only the chief write the real checkpoint (the others write a temporary one
they delete) and every worker read the chief's back: its directory is the run's
``TF_RUNBOOK_CHECKPOINT_DIR``, which the runbook fills with the chief's checkpoint on every
host before a restart or a resume. Prints the metrics contract's lines: ``cluster_workers=``
once the strategy exists, ``resumed_from_epoch=E`` after a restore
(after a line ``restored step S``), ``epoch=E/N loss=...``
after each epoch, ``training_complete`` at the end; the chief writes the verdict's marker.

Arguments: ``--epochs`` (default 6), ``--steps-per-epoch`` (default 20), ``--step-seconds``
(a pause per step, default 0.05, so that a test can signal the job mid-run).
"""

import argparse
import json
import os
import time

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=6)
parser.add_argument("--steps-per-epoch", type=int, default=20)
parser.add_argument("--step-seconds", type=float, default=0.05)
args = parser.parse_args()

tf_config = json.loads(os.environ["TF_CONFIG"])
index = tf_config["task"]["index"]
workers = len(tf_config["cluster"]["worker"])
checkpoint_dir = os.environ["TF_RUNBOOK_CHECKPOINT_DIR"]

strategy = tf.distribute.MultiWorkerMirroredStrategy()
print(f"worker={index} cluster_workers={workers} replicas={strategy.num_replicas_in_sync}", flush=True)

with strategy.scope():
    weights = tf.Variable(tf.zeros([4, 1]), name="weights")
    bias = tf.Variable(0.0, name="bias")
checkpoint = tf.train.Checkpoint(weights=weights, bias=bias)
# Restores the chief's latest checkpoint from checkpoint_dir, on every worker.
handler = tf.distribute.experimental.PreemptionCheckpointHandler(strategy.cluster_resolver, checkpoint, checkpoint_dir)

TRUE_WEIGHTS = np.array([[1.0], [2.0], [-1.0], [0.5]], dtype="float32")


def batch(step: int) -> tuple[np.ndarray, np.ndarray]:
    """The same batch for a step on every worker, in every attempt."""
    rng = np.random.default_rng(step)
    x = rng.normal(size=(16, 4)).astype("float32")
    return x, (x @ TRUE_WEIGHTS + 0.25).astype("float32")


@tf.function
def train_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
    def replica_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, weights) + bias - y))
        grads = tape.gradient(loss, [weights, bias])
        grads = tf.distribute.get_replica_context().all_reduce("mean", grads)
        weights.assign_sub(0.05 * grads[0])
        bias.assign_sub(0.05 * grads[1])
        return loss

    losses = strategy.run(replica_step, args=(x, y))
    return strategy.reduce("MEAN", losses, axis=None)


done = handler.total_run_calls
if done:
    print(f"restored step {done} from {checkpoint_dir}", flush=True)
    print(f"worker={index} resumed_from_epoch={done // args.steps_per_epoch}", flush=True)
for epoch in range(done // args.steps_per_epoch, args.epochs):
    for step in range(handler.total_run_calls % args.steps_per_epoch, args.steps_per_epoch):
        x, y = batch(epoch * args.steps_per_epoch + step)
        # The loss of the epoch's last step and the bias after it: the same on every worker,
        # and the same whether or not the epoch was cut by a preemption and restored.
        last = float(handler.run(train_step, tf.constant(x), tf.constant(y)))
        time.sleep(args.step_seconds)
    print(f"worker={index} epoch={epoch + 1}/{args.epochs} loss={last:.6f} bias={float(bias.numpy()):.6f}", flush=True)

if index == 0:
    with open("multiworker-complete.txt", "w", encoding="utf-8") as handle:
        handle.write(f"epochs={args.epochs}\n")
print(f"worker={index} training_complete", flush=True)
