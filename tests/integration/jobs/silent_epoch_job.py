"""A job without TensorFlow whose second epoch computes silently: it prints the startup
line and its first epoch's progress line, then keeps a core busy for ``argv[1]`` seconds
(a pure Python loop, no output at all, as a Keras ``verbose=2`` epoch longer than
tf_stall_timeout), then prints its last epoch line and ends. Busy, not stalled: the wait's
stall watchdog must see its CPU use as progress (issue 37).

With ``argv[2]`` (a number N), the host is loaded past its CPUs while it computes: the job
pins itself to one CPU and starts N processes spinning on that CPU for as long, in
sessions of their own (not the job's process group, whose CPU the wait reads), so that
the job gets a few percent of the core, under the wait's BUSY_CPU_SHARE. It prints
``busy_cpu_share=`` (the share of a core it got while computing) and writes the
spinners' pids to ``contenders.pids``; each spinner ends by itself when the epoch does."""

import json
import os
import subprocess
import sys
import time

config = json.loads(os.environ["TF_CONFIG"])
index, size = config["task"]["index"], len(config["cluster"]["worker"])
busy_seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
contenders = int(sys.argv[2]) if len(sys.argv) > 2 else 0
print(f"worker={index} cluster_workers={size} replicas={size} global_batch={16 * size}", flush=True)
print(f"worker={index} epoch=1/2 loss=0.5000", flush=True)
if contenders:
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    spin = f"import os, time\nos.sched_setaffinity(0, {{{cpu}}})\nend = time.monotonic() + {busy_seconds + 2}\nwhile time.monotonic() < end:\n    pass\n"
    spinners = [subprocess.Popen([sys.executable, "-c", spin], start_new_session=True) for _ in range(contenders)]
    with open("contenders.pids", "w", encoding="utf-8") as pids:
        pids.write("".join(f"{p.pid}\n" for p in spinners))
open("silent-epoch-started", "w").close()
started, used = time.monotonic(), time.process_time()
end = started + busy_seconds
total = 0
while time.monotonic() < end:
    total += sum(i * i for i in range(10000))
if contenders:
    print(f"worker={index} busy_cpu_share={(time.process_time() - used) / (time.monotonic() - started):.4f}", flush=True)
print(f"worker={index} epoch=2/2 loss=0.2500", flush=True)
if index == 0:
    with open("multiworker-complete.txt", "w", encoding="utf-8") as marker:
        marker.write("done\n")
print(f"worker={index} training_complete", flush=True)
