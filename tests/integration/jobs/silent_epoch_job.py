"""A job without TensorFlow whose second epoch computes silently: it prints the startup
line and its first epoch's progress line, then keeps a core busy for ``argv[1]`` seconds
(a pure Python loop, no output at all, as a Keras ``verbose=2`` epoch longer than
tf_stall_timeout), then prints its last epoch line and ends. Busy, not stalled: the wait's
stall watchdog must see its CPU use as progress (issue 37)."""

import json
import os
import sys
import time

config = json.loads(os.environ["TF_CONFIG"])
index, size = config["task"]["index"], len(config["cluster"]["worker"])
busy_seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
print(f"worker={index} cluster_workers={size} replicas={size} global_batch={16 * size}", flush=True)
print(f"worker={index} epoch=1/2 loss=0.5000", flush=True)
open("silent-epoch-started", "w").close()
end = time.monotonic() + busy_seconds
total = 0
while time.monotonic() < end:
    total += sum(i * i for i in range(10000))
print(f"worker={index} epoch=2/2 loss=0.2500", flush=True)
if index == 0:
    with open("multiworker-complete.txt", "w", encoding="utf-8") as marker:
        marker.write("done\n")
print(f"worker={index} training_complete", flush=True)
