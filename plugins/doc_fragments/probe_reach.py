# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of the preflight's reach, written once for the two modules that take them.

``tf_runbook.multiworker.probe_reach`` gives them as a module's own options
(``tf_preflight_reach``, the two-step probe); ``tf_runbook.multiworker.probe_reach.host`` gives
the same text as the suboptions of ``tf_preflight_host``'s ``reach`` (the one-run probe, which
reaches the peers in the same module run as its look). Both modules' argument specs come from
``module_utils/tf_probe_reach.py``'s ``REACH_SPEC``.
"""

from __future__ import annotations

from ansible_collections.tf_runbook.multiworker.plugins.plugin_utils.tf_doc_suboptions import as_suboptions

HOST_HEAD = r"""
options:
  reach:
    description: Once this host's listeners are up, reach the endpoints this host must
      reach, as M(tf_runbook.multiworker.tf_preflight_reach) does, in this module run (the
      one-run probe). Every host must run it at the same time (C(--forks) at least the
      number of hosts), since a host whose peers start later would wait for nothing.
      Omitted, nothing is reached. Not done where a port is taken (the run is refused).
    type: dict
    suboptions:
"""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  endpoints:
    description: The worker endpoints this host must reach (C(tf_preflight_pairs)), as C(index),
      C(host), C(address), C(port); each must answer as the probe of its host for O(run_id).
      A list of dicts, or that list as one JSON string (the runbook passes the string, which
      costs the controller less than a list of every host in every host's arguments).
    type: raw
    default: []
  timeout:
    description: Seconds to keep trying one endpoint.
    type: float
    default: 10
  settle:
    description: Seconds to keep trying an endpoint that refuses the connection (its
      listener may not be up yet), when longer than the timeout of one endpoint.
    type: float
    default: 0
  wait:
    description: Seconds to wait, after this host's connections, for its own listener to end
      and its ports to be free; not waited for when a connection failed (the run is refused,
      and the listeners are stopped).
    type: float
    default: 0
"""

    # An annotated assignment, as ansible-test's yamllint reads each plain one of this class
    # as a YAML string constant; Ansible reads the attribute like any other fragment.
    HOST: str = as_suboptions(DOCUMENTATION, HOST_HEAD)
