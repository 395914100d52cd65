"""GPU hosts that would train on the CPU (issue 24, point 8).

A host whose preflight counts GPUs hands each worker its ``CUDA_VISIBLE_DEVICES``; a
TensorFlow without CUDA (``tensorflow-cpu``, the managed virtualenv's default pin) then
trains on the CPU without a word. The managed virtualenv therefore installs the CUDA build
on such a host (:func:`tf_gpu_pins`), and before launch every worker interpreter is asked
how many GPUs its TensorFlow sees under the devices it will get (:func:`tf_gpu_probe_code`,
run on the host; :func:`tf_gpu_problems`, judged on the controller). ``tf_worker_gpus_per_slot:
0`` hands no GPU to any worker: a CPU run, nothing to check.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ansible.errors import AnsibleFilterError

# A requirement on TensorFlow's CPU-only build: the name (any case, - or _), extras, the rest.
_CPU_PIN = re.compile(r"^\s*tensorflow[-_.]cpu\s*(\[[^\]]*\])?(?P<rest>.*)$", re.IGNORECASE)
CUDA_BUILD = "tensorflow[and-cuda]"
# Seconds one worker's TensorFlow may take to import and list its GPUs (CUDA's start-up
# included); the whole check is bounded by the probe's own timeout (120 s).
ASK_TIMEOUT = 100

# Run by the worker interpreter. Standard library only: a host without TensorFlow (a job
# of another framework) reports none and is not judged. Each worker's count is read in a
# child process of its own, with that worker's CUDA_VISIBLE_DEVICES, all at once.
_PROBE = r'''
import importlib.util, json, os, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
DEVICES = json.loads(__DEVICES__)
JOB_ENV = json.loads(__ENV__)
COUNT = ("import json, tensorflow as tf; print(json.dumps({'gpus': len(tf.config.list_physical_devices('GPU')),"
         " 'version': getattr(tf, '__version__', None)}))")
def ask(devices):
    env = dict(os.environ, **JOB_ENV)
    env.update(CUDA_VISIBLE_DEVICES=devices, TF_CPP_MIN_LOG_LEVEL="2")
    try:
        done = subprocess.run([sys.executable, "-c", COUNT], env=env, capture_output=True, text=True,
                              timeout=__TIMEOUT__)
    except subprocess.TimeoutExpired:
        return {"error": "TensorFlow did not list its GPUs within __TIMEOUT__ s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()
        return {"error": "importing TensorFlow failed: " + (tail[-1] if tail else "exit %d" % done.returncode)}
    try:
        return json.loads(lines[-1])
    except ValueError:
        return {"error": "TensorFlow printed no GPU count: " + lines[-1][-200:]}
if importlib.util.find_spec("tensorflow") is None:
    print(json.dumps({"tensorflow": False, "workers": {}}))
else:
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(DEVICES)))) as pool:
        seen = dict(zip(DEVICES, pool.map(ask, DEVICES.values())))
    print(json.dumps({"tensorflow": True, "workers": seen}))
'''


def _given(devices: Any) -> bool:
    """A worker gets GPUs: a device list that is not empty (None: no GPU on the host;
    "": every GPU hidden, tf_worker_gpus_per_slot 0)."""
    return devices is not None and str(devices).strip() != ""


def tf_worker_devices(devices: dict[str, Any], indices: list[Any]) -> dict[str, Any]:
    """The entries of ``devices`` (tf_preflight_gpu_devices, every worker's) for the
    workers ``indices`` of one host, looked up one by one: the whole map in every host's
    arguments cost the controller per worker of the cluster, in every host's task."""
    if not isinstance(devices, dict):
        raise AnsibleFilterError(f"expected worker index to CUDA_VISIBLE_DEVICES, got {type(devices).__name__}")
    return {str(index): devices[str(index)] for index in indices if str(index) in devices}


def tf_gpu_given(devices: dict[str, Any]) -> bool:
    """Whether any worker of ``devices`` (tf_preflight_gpu_devices) gets GPUs: computed
    once by the preflight (``tf_preflight_gpu_given``), so that a condition every host
    decides does not read every worker's entry."""
    if not isinstance(devices, dict):
        raise AnsibleFilterError(f"expected worker index to CUDA_VISIBLE_DEVICES, got {type(devices).__name__}")
    return any(_given(value) for value in devices.values())


def _local_devices(devices: dict[str, Any], indices: list[Any]) -> dict[str, str]:
    return {index: str(value) for index, value in tf_worker_devices(devices, indices).items() if _given(value)}


def tf_gpu_pins(requirements: list[str], devices: dict[str, Any], indices: list[Any]) -> list[str]:
    """The managed virtualenv's requirements on this host: where its workers ``indices`` get
    GPUs (``devices``: tf_preflight_gpu_devices), a ``tensorflow-cpu`` pin becomes
    ``tensorflow[and-cuda]`` with the same version; anything else is kept as written (a pin
    of another build is the user's choice)."""
    if not isinstance(requirements, list):
        raise AnsibleFilterError(f"tf_worker_requirements must be a list, got {type(requirements).__name__}")
    if not _local_devices(devices, indices):
        return list(requirements)
    pins = []
    for requirement in requirements:
        match = _CPU_PIN.match(str(requirement))
        pins.append(CUDA_BUILD + match.group("rest").strip() if match else requirement)
    return pins


def tf_gpu_probe_code(devices: dict[str, Any], indices: list[Any], env: dict[str, Any] | None = None) -> str:
    """Python code that prints, as JSON, how many GPUs TensorFlow sees for each of this
    host's workers ``indices`` under the devices it gets, in the environment the job gets
    (``env``: tf_worker_env, say a LD_LIBRARY_PATH to CUDA; the code then holds its values:
    run it with no_log); '' when none of them gets GPUs."""
    local = _local_devices(devices, indices)
    if not local:
        return ""
    if env is not None and not isinstance(env, dict):
        raise AnsibleFilterError(f"tf_worker_env must be a mapping, got {type(env).__name__}")
    job_env = {str(name): str(value) for name, value in (env or {}).items()}
    return (
        _PROBE.replace("__DEVICES__", repr(json.dumps(local, sort_keys=True)))
        .replace("__ENV__", repr(json.dumps(job_env, sort_keys=True)))
        .replace("__TIMEOUT__", str(ASK_TIMEOUT))
    )


def tf_gpu_problems(
    seen: dict[str, Any], devices: dict[str, Any], host_gpus: dict[str, Any], interpreters: dict[str, Any] | None = None
) -> list[str]:
    """One message per worker that gets GPUs its TensorFlow does not see.

    ``seen`` maps each host to its probe's result (``versions``: what tf_gpu_probe_code
    printed, or ``error``; a skipped host has none); ``devices`` is every worker's
    CUDA_VISIBLE_DEVICES; ``host_gpus`` what each host shows; ``interpreters`` each host's
    worker interpreter, named in the message."""
    problems = []
    fix = (
        "install TensorFlow's CUDA build, tensorflow[and-cuda] (in tf_worker_requirements, or in the "
        "tf_worker_python you name), or set tf_worker_gpus_per_slot: 0 for a CPU run"
    )
    for host, result in seen.items():
        found = (result or {}).get("versions") if isinstance(result, dict) else None
        if not isinstance(found, dict):
            continue
        python = f" {interpreters[host]}" if interpreters and interpreters.get(host) else ""
        if found.get("error"):
            problems.append(f"host {host}: the worker interpreter{python} could not be asked for its GPUs: "
                            f"{found['error']}")
            continue
        if not found.get("tensorflow"):
            continue  # no TensorFlow: the job uses something else, and says so itself
        for index, answer in sorted((found.get("workers") or {}).items(), key=lambda item: int(item[0])):
            given = str(devices.get(index, devices.get(int(index), "")) if isinstance(devices, dict) else "")
            wanted = len([d for d in given.split(",") if d.strip()])
            shows = host_gpus.get(host, "?") if isinstance(host_gpus, dict) else "?"
            if answer.get("error"):
                problems.append(
                    f"host {host}: worker {index}'s TensorFlow{python} could not list its GPUs "
                    f"(CUDA_VISIBLE_DEVICES={given}, the host shows {shows}): {answer['error']}"
                )
            elif int(answer.get("gpus") or 0) < wanted:
                version = f" {answer['version']}" if answer.get("version") else ""
                problems.append(
                    f"host {host}: worker {index} gets {wanted} of the {shows} GPU(s) the host shows "
                    f"(CUDA_VISIBLE_DEVICES={given}), but its TensorFlow{version}{python} sees "
                    f"{int(answer.get('gpus') or 0)}: it would train on the CPU; {fix}"
                )
    return problems


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {"tf_gpu_pins": tf_gpu_pins, "tf_gpu_probe_code": tf_gpu_probe_code, "tf_gpu_problems": tf_gpu_problems,
                "tf_worker_devices": tf_worker_devices, "tf_gpu_given": tf_gpu_given}
