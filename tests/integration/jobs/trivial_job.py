"""A job without TensorFlow that prints what the runbook's wait and verdict read from a
MultiWorkerMirroredStrategy run (the cluster size, one epoch's loss, the end) and has the
chief write its marker: the runbook's orchestration alone, on many hosts at once."""

import json
import os

config = json.loads(os.environ["TF_CONFIG"])
index, size = config["task"]["index"], len(config["cluster"]["worker"])
print(f"worker={index} cluster_workers={size} replicas={size} global_batch={16 * size}", flush=True)
print(f"worker={index} epoch=1 loss=0.5000", flush=True)
if index == 0:
    with open("multiworker-complete.txt", "w", encoding="utf-8") as marker:
        marker.write("done\n")
print(f"worker={index} training_complete", flush=True)
