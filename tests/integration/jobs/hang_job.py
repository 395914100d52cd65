"""A job whose worker 1 hangs in its own function after epoch 1 (a data loader that
deadlocks, a read from a dead NFS mount), so that worker 0 blocks in TensorFlow's
all-reduce of epoch 2: every process alive, no progress line any more. Worker 1 marks the
moment it hangs with the file ``hang-started`` in its working directory (the worker
directory)."""

import json
import os
import threading

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
print(f"worker={index} cluster_workers={strategy.num_replicas_in_sync} replicas={strategy.num_replicas_in_sync}",
      flush=True)


def load_batch_that_deadlocks() -> None:
    threading.Event().wait()


@tf.function
def step() -> tf.Tensor:
    def replica() -> tf.Tensor:
        return tf.distribute.get_replica_context().all_reduce("sum", tf.constant(1.0))
    return strategy.run(replica)


for epoch in range(1, 4):
    if epoch == 2 and index == 1:
        open("hang-started", "w").close()
        load_batch_that_deadlocks()
    step()
    print(f"worker={index} epoch={epoch}/3 loss={1.0 / epoch:.4f}", flush=True)
print(f"worker={index} training_complete", flush=True)
