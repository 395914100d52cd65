"""A job whose worker 1 fails at import with ModuleNotFoundError, the job's own error that
no restart can fix; worker 0 joins and waits (no TensorFlow: the test is about the cause)."""

import json
import os
import time

index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
if index == 1:
    import tf_runbook_no_such_module  # noqa: F401

print(f"worker={index} cluster_workers=2", flush=True)
time.sleep(600)
