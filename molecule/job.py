"""A stand-in for the training job in the roles' molecule scenarios: it follows the
metrics contract (README, "The default job") without TensorFlow, and sleeps --sleep
seconds while it "trains", so that a scenario can stop it."""

from __future__ import annotations

import argparse
import json
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--sleep", type=float, default=0.0)
args = parser.parse_args()
config = json.loads(os.environ["TF_CONFIG"])
index = config["task"]["index"]
size = len(config["cluster"]["worker"])
print(f"worker={index} cluster_workers={size} replicas={size} global_batch={size}", flush=True)
time.sleep(args.sleep)
print(f"worker={index} epoch=1 loss=0.5", flush=True)
print(f"worker={index} training_complete", flush=True)
if index == 0:
    with open("multiworker-complete.txt", "w", encoding="utf-8") as handle:
        handle.write("done\n")
