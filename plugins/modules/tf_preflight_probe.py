#!/usr/bin/python
# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Look at a worker host before anything of a run is launched there.

Four modes, all read-only for the host's runs:

* ``host``: which of this host's worker ports are taken (and by which process, when it
  can be seen), the free disk space under the base directory, whether the run id was
  already launched here, and how many GPUs the host shows; with ``listen``, it then
  holds short-lived listeners on the ports from a detached process; with ``endpoints``
  too, it then does the ``connect`` part in the same run (the one-run probe: one module
  run per host for the whole preflight, where every host runs it at once).
* ``connect``: from this host, open a connection to every worker endpoint of the cluster,
  as TensorFlow will (up to 32 at once), and report those that cannot be reached and why;
  then wait, for a bounded time, until this host's own listener has heard every peer and
  ended.
* ``stop``: tell this host's listeners to end and wait until the ports are free again
  (after a failed preflight, or for a listener that outlived its host's ``connect``).
* ``versions``: what the worker interpreter reports of its Python, TensorFlow and numpy
  (``host`` mode does the same when given ``python``).
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_preflight_probe
short_description: Probe a worker host before a TensorFlow run is launched
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - V(host) mode reports taken ports with their owning process, free disk space, a run id
    already launched, the number of GPUs, and what the cluster's addresses resolve to here.
  - V(host) with O(listen), then V(connect), check that every worker can reach every other
    worker's port, with short-lived listeners in place of TensorFlow. A listener ends by
    itself once every peer reached every port it holds, or at its O(timeout), which no
    client can extend; V(connect) waits up to O(wait) for this host's own listener to end.
    V(stop) ends the listeners early, after a failed preflight.
  - V(host) with O(listen) and O(endpoints) does both in one run. It binds its listeners,
    then connects to every endpoint (each within O(probe_timeout)), trying a refused one
    again for up to O(settle) seconds while the peers' own runs bind theirs, and waits up
    to O(wait) for its listener to end. Every host must run it at the same time (C(--forks)
    at least the number of hosts), since a host whose peers start later would wait for nothing.
  - The listener answers first, with the token of its host and run; a connecting host sends
    its hello only to the listener it expects, so that a service that is not the probe (a
    port taken on a peer, a wrong address) gets nothing from it.
  - The probe scales with the slowest round trip, not with the number of hosts. A listener
    serves all its connections at once, each for at most 2 seconds from its accept (a
    silent or trickling client is cut off then and delays no other). V(connect) tries up to
    32 endpoints at once.
  - V(versions) mode reports what the worker interpreter O(python) says of its versions.
  - Reads the host's state only; apart from the short-lived listeners, changes nothing.
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
options:
  mode:
    description: What to probe (see the description).
    type: str
    required: true
    choices: [host, connect, stop, versions]
  ports:
    description: This host's worker ports (in V(connect) mode, those its listener holds).
    type: list
    elements: int
    default: []
  base_dir:
    description: The host's base directory for runs (V(host) mode; C(~) is the remote user's home).
    type: path
  run_id:
    description: The run about to be launched (V(host) mode). In V(connect) mode, each
      endpoint must answer as that run's probe of its host.
    type: str
  endpoints:
    description: Every worker of the cluster, as C(index), C(host), C(address), C(port) (V(connect) mode;
      in V(host) mode, reached once the listeners are up, as V(connect) mode does).
    type: list
    elements: dict
    default: []
  me:
    description: This host's inventory name, sent to each listener (V(connect) mode); with
      O(run_id), what this host's listener answers and which stop it obeys (V(host) and
      V(stop) modes).
    type: str
    default: ""
  peers:
    description: Inventory names a listener waits to hear from before it ends (V(host) mode with O(listen)).
    type: list
    elements: str
    default: []
  timeout:
    description:
      - Seconds to keep trying one endpoint (V(connect)), for a listener to live
        (V(host) with O(listen)), or to wait for the ports to be free (V(stop)).
      - The roles pass it for V(connect) and V(host); V(stop) uses this default (the one
        place of that value).
    type: float
    default: 10
  addresses:
    description: In V(host) mode, every worker address of the cluster, to resolve on this host.
    type: list
    elements: str
    default: []
  python:
    description: In V(host) and V(versions) modes, a worker interpreter to ask for its versions with
      O(versions_code); empty, no versions are read.
    type: str
    default: ""
  interpreter:
    description: In V(host) mode, C(tf_worker_python) as given (a path, or a command found on
      the remote user's C(PATH)), looked up; where O(python) is empty (its versions are not
      read in this run), the file found is also run once, as C(<interpreter> -c <code>), to
      show that it runs as Python 3. Empty for the managed virtualenv.
    type: path
    default: ""
  checkpoint_dir:
    description: In V(host) mode, C(tf_checkpoint_dir) as given; empty for the default under
      the run's directory.
    type: path
    default: ""
  versions_code:
    description: Python code that prints the interpreter's versions as JSON.
    type: str
    default: ""
  listener_pid:
    description: In V(stop) mode, the listener process the V(host) mode started (0 when none);
      only the ports it holds are told to stop. Unset, every port is. In V(connect) mode, the
      listener to wait for (0 or unset, none).
    type: int
  wait:
    description: In V(connect) mode (and V(host) mode with O(endpoints)), seconds to wait,
      after this host's connections, for its listener (O(listener_pid), or the one V(host)
      mode started) to end and O(ports) to be free; not waited for when a connection failed
      (the run is refused, and the listeners are stopped).
    type: float
    default: 0
  settle:
    description: Seconds to keep trying an endpoint that refuses the connection (its
      listener may not be up yet), when longer than the timeout of one endpoint (V(connect)
      mode, and V(host) mode with O(endpoints)).
    type: float
    default: 0
  probe_timeout:
    description: In V(host) mode with O(endpoints), seconds to keep trying one endpoint
      (O(timeout) is the listeners' lifetime there).
    type: float
    default: 10
  listen:
    description: In V(host) mode, once the ports are seen free, bind a listener on each and
      serve them from a detached process until every peer said hello, a V(stop) arrives or
      O(timeout) passes.
    type: bool
    default: false
  pick:
    description: In V(host) mode, the number of consecutive ports to pick here (C(tf_worker_port=auto)),
      in place of O(ports) - the lowest block of O(port_range) that nothing listens on, that binds, and that
      no other run reserved in the host's registers of ports (each user's C(/tmp/tf-runbook-ports-<uid>)); 0 to probe O(ports).
    type: int
    default: 0
  port_range:
    description: With O(pick), the first and last port it may pick.
    type: list
    elements: int
    default: []
  reserve:
    description: In V(host) mode, record the ports (picked or given) in the host's register of ports for
      O(run_id) and O(me), under its lock, so that another run's pick leaves them alone until TensorFlow
      listens on them; false in a dry run (a pick is then only computed). In V(stop) mode, give this run's
      and host's reservations up (a refused preflight).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: In check mode it only reads; nothing listens on the ports.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Look at the host and hold its worker ports with probe listeners
  tf_runbook.multiworker.tf_preflight_probe:
    mode: host
    ports: [2222, 2223]
    base_dir: ~/tf-runs
    run_id: mnist-20260101-1200
    me: "{{ inventory_hostname }}"
    addresses: [10.0.0.11, 10.0.0.12]
    listen: true
    peers: "{{ ansible_play_hosts }}"
    timeout: 60
  register: host_probe

- name: Look, listen and reach every worker port in one run (every host at once)
  tf_runbook.multiworker.tf_preflight_probe:
    mode: host
    ports: [2222]
    base_dir: ~/tf-runs
    run_id: mnist-20260101-1200
    me: "{{ inventory_hostname }}"
    listen: true
    peers: "{{ ansible_play_hosts }}"
    timeout: 120
    endpoints:
      - {index: 0, host: w1, address: 10.0.0.11, port: 2222}
      - {index: 1, host: w2, address: 10.0.0.12, port: 2222}
    probe_timeout: 5
    settle: 10
    wait: 10
  register: one_run

- name: Reach every worker port of the cluster from this host
  tf_runbook.multiworker.tf_preflight_probe:
    mode: connect
    me: "{{ inventory_hostname }}"
    run_id: mnist-20260101-1200
    endpoints:
      - {index: 0, host: w1, address: 10.0.0.11, port: 2222}
      - {index: 1, host: w2, address: 10.0.0.12, port: 2222}
    timeout: 10
    ports: [2222, 2223]
    listener_pid: "{{ host_probe.listener_pid }}"
    wait: 20
  register: reach

- name: Stop this host's probe listeners (after a failed preflight)
  tf_runbook.multiworker.tf_preflight_probe:
    mode: stop
    ports: [2222, 2223]
    run_id: mnist-20260101-1200
    me: "{{ inventory_hostname }}"
    listener_pid: "{{ host_probe.listener_pid }}"

- name: Ask the worker interpreter for its versions
  tf_runbook.multiworker.tf_preflight_probe:
    mode: versions
    python: /home/u/tf-venv/bin/python
    versions_code: "import json, sys; print(json.dumps({'python': sys.version.split()[0]}))"
  register: versions
"""

RETURN = r"""
busy_ports:
  description: Each taken port with C(port), C(error), and C(pid) and C(process) when seen.
  type: list
  elements: dict
  returned: host mode
  sample: [{"port": 2222, "error": "Address already in use", "pid": 4242, "process": "python3"}]
free_mb:
  description: Free space under the base directory (its nearest existing parent).
  type: int
  returned: host mode
base_dir:
  description: O(base_dir), absolute.
  type: str
  returned: host mode
run_launched:
  description: A record that shows the run id was already launched here ('' when none).
  type: str
  returned: host mode
base_dir_identity:
  description: The kernel's boot id, the device and inode of O(base_dir) (or of its nearest existing parent) and the
    rest of its path; two hosts with the same identity are one machine with one base directory. Empty where the
    boot id cannot be read.
  type: str
  returned: host mode
base_dir_state:
  description: What O(base_dir) is on this host (path, user and uid, exists, and is_dir, owner, owner_uid, mode
    and the entries that are not the runbook's own, and whether its C(runs) is a directory and whose, or the
    nearest existing parent and whether the user can create the directory there), judged on the controller by
    module_utils/tf_base_dir.py.
  type: dict
  returned: host mode
interpreter_state:
  description: What O(interpreter) is here (C(path), C(found) for a command name on C(PATH), or
    C(exists), C(is_file), C(executable)); where it was run (see O(interpreter)), C(python) (its
    version, C(3.11.2)) when it ran as Python 3, else C(fault), why not (it cannot be executed,
    its exit status and what it said, another Python); empty when O(interpreter) is.
  type: dict
  returned: host mode
checkpoint_state:
  description: What O(checkpoint_dir) is here (C(path), C(exists), and C(is_dir) and C(writable),
    or the nearest existing C(parent) and C(parent_writable)), with C(runs_dir) where it lies in the runs
    directory under O(base_dir); empty when O(checkpoint_dir) is.
  type: dict
  returned: host mode
gpus:
  description: GPUs the host shows.
  type: int
  returned: host mode
resolved:
  description: Each of O(addresses) to the IP addresses it stands for here.
  type: dict
  returned: host mode
sources:
  description: The addresses this host's connections to O(addresses) come from.
  type: list
  elements: str
  returned: host mode
listener_pid:
  description: The detached listener process (0 when none was started).
  type: int
  returned: host mode
versions:
  description: What O(versions_code) printed, or C(error).
  type: dict
  returned: versions mode, or host mode with O(python)
failures:
  description: Each endpoint that could not be reached, with C(reason) ([] in V(host) mode without
    O(endpoints)).
  type: list
  elements: dict
  returned: connect and host modes
listener_gone:
  description: Whether this host's listener (O(listener_pid), or the one V(host) mode started) had
    ended, and freed O(ports), when the module returned (true when there was none).
  type: bool
  returned: connect and host modes
ports_held:
  description: The ports of O(ports) still held when the module returned ([] once the listener is gone).
  type: list
  elements: int
  returned: connect and host modes
ports_picked:
  description: The ports this host looked at and reserved, those of O(pick) (or O(ports)); [] in other modes.
  type: list
  elements: int
  returned: host mode
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_probe_host import look_host
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_probe_interpreter import command_runner, interpreter_versions
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_probe_listen import (
    listen_failure,
    probe_token,
    start_listener,
    stop_listeners,
)
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_ports_auto import REGISTRY, host_ports, release
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_probe_reach import connect_and_await
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_run import run_dir_of

ARGUMENT_SPEC = {
    "mode": {"type": "str", "required": True, "choices": ["host", "connect", "stop", "versions"]},
    "ports": {"type": "list", "elements": "int", "default": []},
    "base_dir": {"type": "path"},
    "run_id": {"type": "str"},
    "endpoints": {"type": "list", "elements": "dict", "default": []},
    "me": {"type": "str", "default": ""},
    "peers": {"type": "list", "elements": "str", "default": []},
    "timeout": {"type": "float", "default": 10},
    "listen": {"type": "bool", "default": False},
    "python": {"type": "str", "default": ""},
    "interpreter": {"type": "path", "default": ""},
    "checkpoint_dir": {"type": "path", "default": ""},
    "versions_code": {"type": "str", "default": ""},
    "listener_pid": {"type": "int", "default": None},
    "wait": {"type": "float", "default": 0},
    "addresses": {"type": "list", "elements": "str", "default": []},
    "settle": {"type": "float", "default": 0},
    "probe_timeout": {"type": "float", "default": 10},
    "pick": {"type": "int", "default": 0},
    "port_range": {"type": "list", "elements": "int", "default": []},
    "reserve": {"type": "bool", "default": False},
}


def host_mode(module: AnsibleModule) -> None:
    """Look at the host; with O(listen), hold its ports; with O(endpoints), reach every
    worker port and wait for this host's listener (the one-run probe)."""
    params = module.params
    if not params["base_dir"] or not params["run_id"]:
        module.fail_json(msg="host mode needs base_dir and run_id")
    write = params["reserve"] and not module.check_mode
    if params["pick"]:
        try:
            params["ports"] = host_ports(params["run_id"], params["me"], params["pick"], params["port_range"], [], write,
                                         run_dir=run_dir_of(params["base_dir"], params["run_id"]))
        except (ValueError, OSError) as exc:
            module.fail_json(msg=str(exc))
    seen = look_host(
        command_runner(module), params["ports"], params["base_dir"], params["run_id"],
        interpreter=params["interpreter"], python=params["python"], versions_code=params["versions_code"],
        checkpoint_dir=params["checkpoint_dir"], addresses=params["addresses"],
    )
    # Given ports are recorded too, once seen free: status.yml lists every run, and a pick
    # of another run leaves them alone until this one's TensorFlow listens on them.
    if write and not params["pick"] and params["ports"] and not seen["busy_ports"]:
        try:
            host_ports(params["run_id"], params["me"], 0, [], params["ports"], write,
                       run_dir=run_dir_of(params["base_dir"], params["run_id"]))
        except OSError as exc:
            module.fail_json(msg=str(exc))
    seen["listener_pid"] = 0
    seen["ports_picked"] = list(params["ports"])
    # Listen only on a clean host: with a port taken, the run is refused anyway.
    if params["listen"] and params["ports"] and not seen["busy_ports"] and not module.check_mode:
        try:
            seen["listener_pid"] = start_listener(
                params["ports"], params["peers"], params["timeout"], probe_token(params["run_id"], params["me"])
            )
        except OSError as exc:
            module.fail_json(msg=listen_failure(params["me"], params["ports"], exc), **seen)
    # The one-run probe: with O(endpoints), this host connects to every worker port
    # right after its own listeners are up. A host refused for its look (a port taken)
    # does not: the run is refused for that, and nothing listens here to wait for.
    if params["endpoints"] and not seen["busy_ports"] and not module.check_mode:
        seen.update(connect_and_await(params, seen["listener_pid"]))
    else:  # a listener started here is still up: it waits for the connect mode's runs
        held = list(params["ports"]) if seen["listener_pid"] else []
        seen.update({"failures": [], "listener_gone": not held, "ports_held": held})
    module.exit_json(changed=False, **seen)


def versions_mode(module: AnsibleModule) -> None:
    params = module.params
    if not params["python"]:
        module.fail_json(msg="versions mode needs python")
    versions = interpreter_versions(params["python"], params["versions_code"], command_runner(module))
    module.exit_json(changed=False, versions=versions)


def connect_mode(module: AnsibleModule) -> None:
    module.exit_json(changed=False, **connect_and_await(module.params, module.params["listener_pid"] or 0))


def stop_mode(module: AnsibleModule) -> None:
    params = module.params
    token = probe_token(params["run_id"], params["me"]) if params["run_id"] else ""
    still = stop_listeners(params["ports"], params["timeout"], token, params["listener_pid"])
    if params["reserve"] and params["run_id"] and not module.check_mode:
        release(REGISTRY, params["run_id"], params["me"])
    if still:
        module.fail_json(msg=f"ports {still} are still taken after the probe listeners were told to stop")
    module.exit_json(changed=False)


MODES = {"host": host_mode, "connect": connect_mode, "stop": stop_mode, "versions": versions_mode}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    MODES[module.params["mode"]](module)


if __name__ == "__main__":
    main()
