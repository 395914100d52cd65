"""TF_CONFIG of each worker, and the pre-launch check that every host got the right one."""

from __future__ import annotations

import json
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import cluster_checksum
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_config_readback import config_problems
from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_spec_packed import plain


def tf_config(spec: dict[str, Any], index: Any) -> dict[str, Any]:
    """The TF_CONFIG of the runbook's process ``index``: the cluster (chief, worker and ps
    tasks, never the evaluator, as TensorFlow requires) and its own task's type and index
    within its type."""
    spec = plain(spec)
    index = int(index)
    if not 0 <= index < int(spec["size"]):
        raise AnsibleFilterError(f"worker index {index} is outside 0..{int(spec['size']) - 1}")
    process = spec["workers"][index] if "workers" in spec else {}
    task = {"type": process.get("type", "worker"), "index": int(process.get("task_index", index))}
    return {"cluster": spec["cluster"], "task": task}


def tf_config_files(local_workers: list[dict[str, Any]], spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The TF_CONFIG of each worker on this host, as module tf_run_dir takes them (each a
    string already: only the spec is read, through its packed copy)."""
    spec = plain(spec)
    return [
        {"index": int(worker["index"]), "content": json.dumps(tf_config(spec, worker["index"])) + "\n"}
        for worker in local_workers
    ]


def tf_config_readback(read_back: list[dict[str, Any]], host: str) -> list[dict[str, Any]]:
    """Turn the TF_CONFIGs tf_run_dir read back on this host into check entries."""
    return [{"host": host, "index": int(item["index"]), "content": item["content"]} for item in read_back]


def tf_config_problems(readbacks: list[dict[str, Any]], spec: dict[str, Any]) -> list[str]:
    """Why the TF_CONFIG files as written on the hosts do not make the cluster of ``spec``,
    each naming its host and worker; empty when they do (plugin_utils/tf_config_readback.py)."""
    return config_problems(readbacks, spec)


def tf_config_check(readbacks: list[dict[str, Any]], spec: dict[str, Any]) -> dict[str, Any]:
    """Check the TF_CONFIG files as written on the hosts; return a short report, or raise
    naming every problem (tf_config_problems)."""
    problems = tf_config_problems(readbacks, spec)
    if problems:
        raise AnsibleFilterError("TF_CONFIG check failed: " + "; ".join(problems))
    return {"checksum": cluster_checksum(spec["cluster"]), "workers": len(readbacks)}


def tf_pip_download_args(target: str, requirements: str, dest: str) -> list[str]:
    """pip arguments that fetch binary wheels for workers of another Python and platform.

    ``target`` is ``"<major>.<minor> <machine>"`` as printed on the workers, e.g.
    ``"3.11 x86_64"``. pip matches manylinux tags exactly, so every glibc level from
    2.17 up is listed.
    """
    try:
        version, machine = target.split()
        major, minor = (int(part) for part in version.split("."))
    except ValueError:
        raise AnsibleFilterError(f"worker interpreter reported {target!r}, expected e.g. '3.11 x86_64'") from None
    args = [
        "download", "--only-binary=:all:", "--disable-pip-version-check", "--quiet",
        "--python-version", f"{major}.{minor}", "--implementation", "cp",
        "--abi", f"cp{major}{minor}",
    ]
    for tag in [f"manylinux2014_{machine}"] + [f"manylinux_2_{n}_{machine}" for n in range(17, 40)]:
        args += ["--platform", tag]
    return args + ["-r", requirements, "-d", dest]


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        return {
            "tf_config": tf_config,
            "tf_config_readback": tf_config_readback,
            "tf_config_files": tf_config_files,
            "tf_config_check": tf_config_check,
            "tf_config_problems": tf_config_problems,
            "tf_pip_download_args": tf_pip_download_args,
        }
