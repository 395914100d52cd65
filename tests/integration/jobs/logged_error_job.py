"""A job whose worker 1 catches TensorFlow's own UnavailableError in a retry loop, logs it
with its traceback (logging.exception, as such loops do), prints a DeadlineExceededError
line, and then gives up with its own exit status 1: the job's own decision, a job-error
that no restart fixes, whatever its log says (issue 37, point 5). Worker 0 joins and waits."""

import json
import logging
import os
import sys
import time

import tensorflow as tf

index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
print(f"worker={index} cluster_workers=2", flush=True)
if index == 1:
    for attempt in range(3):
        try:
            raise tf.errors.UnavailableError(None, None, "the feature service is down")
        except tf.errors.UnavailableError:
            logging.exception("attempt %d to reach the feature service failed", attempt + 1)
    print("DeadlineExceededError: giving up on the feature service", flush=True)
    sys.exit(1)
time.sleep(600)
