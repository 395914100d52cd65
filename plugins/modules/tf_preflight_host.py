#!/usr/bin/python
# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Look at a worker host before anything of a run is launched there: its worker ports (picked
here for ``tf_worker_port: auto``), its base directory, an earlier launch of the run, its
GPUs, interpreter, checkpoint directory and addresses (with ``versions``, the interpreter's
versions too). With ``listen``, hold the ports with
probe listeners; with ``reach`` too, reach the peers in the same run (the one-run probe).
The module only parses its options and calls ``module_utils/tf_probe_*`` and ``tf_ports_auto``.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_preflight_host
short_description: Look at a worker host before a TensorFlow run is launched, and hold its ports
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - Reports taken ports with their owning process, free disk space, a run id already
    launched, the number of GPUs, the worker interpreter, the checkpoint directory, and what
    the cluster's addresses resolve to here.
  - With O(listen), once the ports are seen free, binds a listener on each and serves them
    from a detached process, in place of TensorFlow. The listener answers first, with the
    token of its host and run; it ends by itself once every host of O(listen.peers) reached
    every port it holds, on a M(tf_runbook.multiworker.tf_preflight_stop), or at
    O(listen.lifetime), which no client can extend. It serves all its connections at once,
    each for at most 2 seconds from its accept.
  - With O(reach) too, reaches the endpoints this host must reach in the same run (the
    one-run probe), and waits for its own listener to end.
  - Reads the host's state only; apart from the short-lived listeners and the register of
    ports (O(reserve)), changes nothing.
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
  - tf_runbook.multiworker.probe_reach.host
options:
  ports:
    description: This host's worker ports.
    type: list
    elements: int
    default: []
  base_dir:
    description: The host's base directory for runs (C(~) is the remote user's home).
    type: path
    required: true
  run_id:
    description: The run about to be launched.
    type: str
    required: true
  me:
    description: This host's inventory name; with O(run_id), what its listener answers
      and which stop it obeys, and what it sends to the listeners it reaches.
    type: str
    default: ""
  addresses:
    description: Every worker address of the cluster, to resolve on this host. A list of
      strings, or that list as one JSON string (what the runbook passes).
    type: raw
    default: []
  interpreter:
    description: C(tf_worker_python) as given (a path, or a command found on the remote
      user's C(PATH)), looked up; where O(versions) is omitted (its versions are not read in
      this run), the file found is also run once, as C(<interpreter> -c <code>), to show that it
      runs as Python 3. Empty for the managed virtualenv.
    type: path
    default: ""
  checkpoint_dir:
    description: C(tf_checkpoint_dir) as given; empty for the default under the run's directory.
    type: path
    default: ""
  versions:
    description: Ask a worker interpreter for its versions in this module run, as
      M(tf_runbook.multiworker.tf_preflight_versions) does (which saves a round trip per host
      after the deploy). Omitted, no versions are read.
    type: dict
    suboptions:
      python:
        description: The worker interpreter to ask.
        type: str
        required: true
      code:
        description: The code that prints its versions as JSON.
        type: str
        default: ""
  pick:
    description: The number of consecutive ports to pick here (C(tf_worker_port=auto)), in
      place of O(ports) - the lowest block of O(port_range) that nothing listens on, that
      binds, and that no other run reserved in the host's registers of ports (each user's
      C(/tmp/tf-runbook-ports-<uid>)); 0 to look at O(ports).
    type: int
    default: 0
  port_range:
    description: With O(pick), the first and last port it may pick.
    type: list
    elements: int
    default: []
  reserve:
    description: Record the ports (picked or given) in the host's register of ports for
      O(run_id) and O(me), under its lock, so that another run's pick leaves them alone until
      TensorFlow listens on them; false in a dry run (a pick is then only computed).
    type: bool
    default: false
  listen:
    description: Once the ports are seen free, hold them with probe listeners. Omitted,
      nothing listens.
    type: dict
    suboptions:
      peers:
        description: Inventory names the listener waits to hear from on every port before
          it ends (the hosts that must reach this one). Empty, nothing listens (no host
          must reach this one). A list of strings, or that list as one JSON string (what the
          runbook passes).
        type: raw
        default: []
      lifetime:
        description: Seconds the listener lives at most.
        type: float
        default: 10
attributes:
  check_mode:
    support: full
    details: In check mode it only reads; nothing listens on the ports and nothing is reached.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Look at the host and hold its worker ports with probe listeners
  tf_runbook.multiworker.tf_preflight_host:
    ports: [2222, 2223]
    base_dir: ~/tf-runs
    run_id: mnist-20260101-1200
    me: "{{ inventory_hostname }}"
    addresses: [10.0.0.11, 10.0.0.12]
    listen:
      peers: [w1, w2]
      lifetime: 60
  register: host_probe

- name: Look, listen and reach the peers in one run (every host at once)
  tf_runbook.multiworker.tf_preflight_host:
    ports: [2222]
    base_dir: ~/tf-runs
    run_id: mnist-20260101-1200
    me: "{{ inventory_hostname }}"
    listen:
      peers: [w1, w2]
      lifetime: 120
    reach:
      endpoints:
        - {index: 0, host: w1, address: 10.0.0.11, port: 2222}
        - {index: 1, host: w2, address: 10.0.0.12, port: 2222}
      timeout: 5
      settle: 10
      wait: 10
  register: one_run
"""

RETURN = r"""
busy_ports:
  description: Each taken port with C(port), C(error), and C(pid) and C(process) when seen.
  type: list
  elements: dict
  returned: always
  sample: [{"port": 2222, "error": "Address already in use", "pid": 4242, "process": "python3"}]
free_mb:
  description: Free space under the base directory (its nearest existing parent).
  type: int
  returned: always
base_dir:
  description: O(base_dir), absolute.
  type: str
  returned: always
run_launched:
  description: A record that shows the run id was already launched here ('' when none).
  type: str
  returned: always
base_dir_identity:
  description: The kernel's boot id, the device and inode of O(base_dir) (or of its nearest existing parent) and the
    rest of its path; two hosts with the same identity are one machine with one base directory. Empty where the
    boot id cannot be read.
  type: str
  returned: always
base_dir_state:
  description: What O(base_dir) is on this host (path, user and uid, exists, and is_dir, owner, owner_uid, mode
    and the entries that are not the runbook's own, and whether its C(runs) is a directory and whose, or the
    nearest existing parent and whether the user can create the directory there), judged on the controller by
    module_utils/tf_base_dir.py.
  type: dict
  returned: always
interpreter_state:
  description: What O(interpreter) is here (C(path), C(found) for a command name on C(PATH), or
    C(exists), C(is_file), C(executable)); where it was run (see O(interpreter)), C(python) (its
    version, C(3.11.2)) when it ran as Python 3, else C(fault), why not (it cannot be executed,
    its exit status and what it said, another Python); empty when O(interpreter) is.
  type: dict
  returned: always
checkpoint_state:
  description: What O(checkpoint_dir) is here (C(path), C(exists), and C(is_dir) and C(writable),
    or the nearest existing C(parent) and C(parent_writable)), with C(runs_dir) where it lies in the runs
    directory under O(base_dir); empty when O(checkpoint_dir) is.
  type: dict
  returned: always
gpus:
  description: GPUs the host shows.
  type: int
  returned: always
resolved:
  description: Each name of O(addresses) to the IP addresses it stands for here (empty
    where it does not resolve). An IP address stands for itself and is left out.
  type: dict
  returned: always
sources:
  description: The addresses this host's connections to O(addresses) come from.
  type: list
  elements: str
  returned: always
listener_pid:
  description: The detached listener process (0 when none was started).
  type: int
  returned: always
versions:
  description: What O(versions.code) printed, or C(error).
  type: dict
  returned: with O(versions)
failures:
  description: With O(reach), the C(failures) of M(tf_runbook.multiworker.tf_preflight_reach) for
    O(reach.endpoints); [] without it.
  type: list
  elements: dict
  returned: always
listener_gone:
  description: As M(tf_runbook.multiworker.tf_preflight_reach) returns it, for the listener this
    module run started (true when none was started).
  type: bool
  returned: always
ports_held:
  description: As M(tf_runbook.multiworker.tf_preflight_reach) returns it; where no O(reach)
    waited, O(ports) while this module run's listener holds them.
  type: list
  elements: int
  returned: always
ports_picked:
  description: The ports this host looked at and reserved, those of O(pick) (or O(ports)).
  type: list
  elements: int
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_json_list import json_list
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_ports_auto import host_ports
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_probe_host import look_host
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_probe_interpreter import VERSIONS_SPEC, command_runner
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_probe_listen import listen_failure, probe_token, start_listener
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_probe_reach import REACH_SPEC, connect_and_await
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import run_dir_of

ARGUMENT_SPEC = {
    "ports": {"type": "list", "elements": "int", "default": []},
    "base_dir": {"type": "path", "required": True},
    "run_id": {"type": "str", "required": True},
    "me": {"type": "str", "default": ""},
    # A list, or the list as one JSON string (module_utils/tf_json_list.py).
    "addresses": {"type": "raw", "default": []},
    "interpreter": {"type": "path", "default": ""},
    "checkpoint_dir": {"type": "path", "default": ""},
    "versions": {"type": "dict", "options": VERSIONS_SPEC},
    "pick": {"type": "int", "default": 0},
    "port_range": {"type": "list", "elements": "int", "default": []},
    "reserve": {"type": "bool", "default": False},
    "listen": {"type": "dict", "options": {
        "peers": {"type": "raw", "default": []},
        "lifetime": {"type": "float", "default": 10},
    }},
    "reach": {"type": "dict", "options": REACH_SPEC},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    try:
        params["addresses"] = json_list(params["addresses"], "addresses", str)
        if params["listen"]:
            params["listen"]["peers"] = json_list(params["listen"]["peers"], "listen.peers", str)
        if params["reach"]:
            params["reach"]["endpoints"] = json_list(params["reach"]["endpoints"], "reach.endpoints", dict)
    except ValueError as exc:
        module.fail_json(msg=f"host {params['me']}: {exc}")
    write = params["reserve"] and not module.check_mode
    run_dir = run_dir_of(params["base_dir"], params["run_id"])
    ports = params["ports"]
    try:
        if params["pick"]:
            ports = host_ports(params["run_id"], params["me"], params["pick"], params["port_range"], [], write,
                               run_dir=run_dir)
    except (ValueError, OSError) as exc:
        module.fail_json(msg=str(exc))
    versions = params["versions"] or {"python": "", "code": ""}
    seen = look_host(
        command_runner(module), ports, params["base_dir"], params["run_id"],
        interpreter=params["interpreter"], python=versions["python"], versions_code=versions["code"],
        checkpoint_dir=params["checkpoint_dir"], addresses=params["addresses"],
    )
    clean = not seen["busy_ports"]
    # Given ports are recorded too, once seen free: status.yml lists every run, and a pick
    # of another run leaves them alone until this one's TensorFlow listens on them.
    try:
        if write and not params["pick"] and ports and clean:
            host_ports(params["run_id"], params["me"], 0, [], ports, write, run_dir=run_dir)
    except OSError as exc:
        module.fail_json(msg=str(exc))
    seen.update(listener_pid=0, ports_picked=list(ports))
    # Listen only on a clean host (with a port taken, the run is refused anyway), and only
    # where some host must reach this one.
    listen = params["listen"]
    if listen and listen["peers"] and ports and clean and not module.check_mode:
        try:
            seen["listener_pid"] = start_listener(ports, listen["peers"], listen["lifetime"],
                                                  probe_token(params["run_id"], params["me"]))
        except OSError as exc:
            module.fail_json(msg=listen_failure(params["me"], ports, exc), **seen)
    # The one-run probe. A host refused for its look (a port taken) reaches nothing: the
    # run is refused for that, and nothing listens here to wait for.
    if params["reach"] and clean and not module.check_mode:
        seen.update(connect_and_await(params["reach"], params["me"], params["run_id"], ports, seen["listener_pid"]))
    else:  # a listener started here is still up: it waits for tf_preflight_reach's runs
        held = list(ports) if seen["listener_pid"] else []
        seen.update(failures=[], listener_gone=not held, ports_held=held)
    module.exit_json(changed=False, **seen)


if __name__ == "__main__":
    main()
