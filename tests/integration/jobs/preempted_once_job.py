"""A job whose first attempt is preempted (worker 1 exits 42, what TensorFlow's preemption
handler exits with after saving) and whose next attempt trains as the trivial job does:
one restart, cheaply, without TensorFlow."""

import json
import os
import time

config = json.loads(os.environ["TF_CONFIG"])
index, size = config["task"]["index"], len(config["cluster"]["worker"])
print(f"worker={index} cluster_workers={size} replicas={size} global_batch={16 * size}", flush=True)
if os.environ.get("TF_RUNBOOK_ATTEMPT") == "0":
    if index == 1:
        raise SystemExit(42)
    time.sleep(600)  # stopped by the runbook after its peer's preemption
print(f"worker={index} epoch=1 loss=0.5000", flush=True)
if index == 0:
    with open("multiworker-complete.txt", "w", encoding="utf-8") as marker:
        marker.write("done\n")
print(f"worker={index} training_complete", flush=True)
