#!/usr/bin/python
# Copyright: (c) 2026, tf-runbook contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One host's part of copying the chief's checkpoint to every host (issue 23, point 5)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: tf_checkpoint_sync
short_description: Copy the chief's checkpoint directory to the hosts that do not share it
version_added: "0.1.0"
author: tf-runbook contributors (!UNKNOWN)
description:
  - TensorFlow's checkpointing (C(PreemptionCheckpointHandler), Keras' C(BackupAndRestore)) has only the chief
    write the checkpoint and every worker read it back on restore, which assumes a filesystem every host shares.
    Before a restart or a resume the runbook makes every host's run checkpoint directory
    (C(TF_RUNBOOK_CHECKPOINT_DIR)) hold the chief's files, in steps, each one task over the hosts.
  - O(mode=mark) on every host writes its marker file of the copy O(marker) into O(dir) (and removes those of
    earlier copies and any archive a killed copy left); O(mode=look) on every other host tells whose markers are seen there (C(seen)) and whether
    the chief's is one of them (C(shared)); a directory every host shares needs no copy, and hosts that share a
    directory the chief does not get one copy (C(copy_to)). The look also tells the space free in O(dir), the checkpoints the chief's last copy
    brought there (C(copied)) and whether that copy was cut short (C(incomplete)).
  - O(mode=pack) on the chief's host removes the marker and, with O(copy) true, first refuses a copy that cannot
    be made whole or would lose a checkpoint, naming the host and the numbers; too little space on the chief (the
    archive), on the controller (O(controller_free), measured by the action plugin where O(dest) lands) or on a
    host of O(targets) (the archive and the staged files); a chief's directory that holds no checkpoint, or an
    older one, than a host holds from the chief's last copy (told by the numbers TensorFlow's C(checkpoint) and
    the default job's C(latest) name). Otherwise it packs every plain file of O(dir) (but the runbook's own
    files) as a plain member with its mtime (a hard link as the file it names, listed in C(hard_links); a
    symbolic link is left out) into an uncompressed tar archive beside them, which the action plugin brings to
    the controller at O(dest) and removes from the host.
  - With O(relay_key), the copy goes host to host (issue 42). Each host whose look needs the files listens on
    O(relay_port); the pack sends the files once, to the first of them, and each passes every byte on to the next
    while it stages them, checks each file's sha256 against the chief's signed list and swaps them in as the unpack
    does (C(relayed)). Only the hosts the relay did not serve (C(relay_fallback)) get the archive through the
    controller (C(copy_to)).
  - O(mode=unpack) on a host that does not share the directory takes the archive the action plugin sent from the
    controller's O(src) (beside O(dir), not into the Ansible tmp), stages every file of it in a directory inside
    O(dir) (fsynced, with its mtime), then renames each over the file of the same name, the pointer files (named
    C(checkpoint) or C(latest)) last, so that a pointer never names a checkpoint whose files are not all there;
    then it removes the files of the chief's last copy that the chief no longer has, fsyncs the directories and
    only then records the copy complete. A copy cut short (a staging directory left over, a record not
    complete) is cleaned up and redone (C(redone)). Nothing else of the directory, and nothing outside it, is
    touched; only plain files and directories are accepted, a member's path must stay inside O(dir), no symbolic
    link on the way is followed and a link in a file's place is replaced, never written through. Two copies
    into one directory (hosts that share it) take turns on a lock file.
  - O(dir) is one run's own directory (C(<run>/checkpoints), or C(<tf_checkpoint_dir>/<run_id>)); another run's
    files are never reached. A O(dir) that is a symbolic link or a directory of another user is refused in every
    mode; a missing one is made (mode 0700) with mkdir.
extends_documentation_fragment:
  - tf_runbook.multiworker.attributes
options:
  mode:
    description: The step (see above).
    type: str
    choices: [mark, look, pack, unpack]
    required: true
  dir:
    description: This host's checkpoint directory of the run (C(tf_worker_checkpoint_dir)), absolute.
    type: path
    required: true
  marker:
    description: The random name part of the marker file, the same for O(mode=mark), O(mode=look) and
      O(mode=pack).
    type: str
    default: ""
  copy:
    description: With O(mode=pack), pack the directory (some host does not share it); false only removes the
      marker.
    type: bool
    default: true
  src:
    description: With O(mode=unpack), the archive on the controller (handled by the action plugin).
    type: path
  dest:
    description: With O(mode=pack), where the action plugin puts the archive on the controller.
    type: path
  archive:
    description: The archive's path on this host, beside O(dir) (set by the action plugin); with O(mode=pack), by
      default a new file in O(dir).
    type: path
  targets:
    description: With O(mode=pack), each host the copy goes to with its O(mode=look) result (C(free), C(dir),
      C(copied)), to check before anything is packed.
    type: dict
    default: {}
  host:
    description: This host's inventory name, which its marker carries and the refusals name (set by the action
      plugin).
    type: str
    default: ""
  chief:
    description: With O(mode=look), the chief's inventory name.
    type: str
    default: ""
  controller_dir:
    description: With O(mode=pack), where the archive lands on the controller (set by the action plugin).
    type: path
    default: ""
  controller_free:
    description: With O(mode=pack), the bytes free in O(controller_dir) (set by the action plugin); negative when
      not measured.
    type: int
    default: -1
  manifest:
    description: With O(mode=mark), also return each of the chief's files with its size and sha256 (C(files)), for
      the other hosts' look to compare (set on the chief's host).
    type: bool
    default: false
  chief_files:
    description: With O(mode=look), the chief's files (its mark's C(files)); a host whose directory holds every one
      of them with the same size and sha256 (and nothing of the chief's last copy the chief no longer has) says
      C(same), and the pack sends it nothing (C(skipped_hosts)).
    type: dict
    default: {}
  relay_port:
    description: With O(mode=look), this host's worker port (its first slot's, free between attempts); a host that
      needs the copy listens there for the host-to-host relay (a detached process, gone once its message came, or
      after five minutes), C(relay). 0 for none.
    type: int
    default: 0
  relay_key:
    description: With O(mode=look) and O(mode=pack), the copy's secret, under which every message of the relay is
      signed (HMAC-SHA256); empty for no relay (every host through the controller).
    type: str
    default: ""
  workers:
    description: With O(mode=pack), the cluster spec's workers (C(host), C(slot), C(address), C(port)), where each
      host's relay listens.
    type: list
    elements: dict
    default: []
attributes:
  check_mode:
    support: full
    details: In check mode nothing is written, packed or unpacked; O(mode=look) still looks.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Mark every host's checkpoint directory
  tf_runbook.multiworker.tf_checkpoint_sync:
    mode: mark
    dir: "{{ tf_worker_checkpoint_dir }}"
    marker: "{{ marker }}"

- name: Unpack the chief's checkpoint on a host that does not share it
  tf_runbook.multiworker.tf_checkpoint_sync:
    mode: unpack
    dir: "{{ tf_worker_checkpoint_dir }}"
    src: runs/20260101T120000Z-abc123/.checkpoint-1.tar
"""

RETURN = r"""
shared:
  description: With O(mode=look), whether this host sees the chief's marker (the directory is shared).
  type: bool
  returned: mode look
files:
  description: How many files were packed or unpacked; with O(mode=mark) and O(manifest), each of the chief's files
    to its size and sha256.
  type: raw
  returned: mode pack and unpack; mode mark with O(manifest)
same:
  description: With O(mode=look) and O(chief_files), whether this host already holds every file of the chief's,
    same sizes and sha256 (nothing is sent to it).
  type: bool
  returned: mode look, with O(chief_files), when the directory is not shared
differs:
  description: With O(mode=look) and O(chief_files), why the copy is needed (the first file that differs); empty
    when C(same).
  type: str
  returned: mode look, with O(chief_files), when the directory is not shared
relay:
  description: With O(mode=look), whether this host listens for the relay (C(listening), C(port)), or why not
    (C(error)).
  type: dict
  returned: mode look, when the host needs the copy and O(relay_key) and O(relay_port) are given
relayed:
  description: With O(mode=pack), each host the relay served to its outcome (C(files), C(bytes), C(removed),
    C(redone)).
  type: dict
  returned: mode pack
relay_fallback:
  description: With O(mode=pack), each host the copy goes to through the controller to why the relay did not serve it.
  type: dict
  returned: mode pack
skipped_hosts:
  description: With O(mode=pack), each host the copy skipped (its look found the chief's files there) to why.
  type: dict
  returned: mode pack
bytes:
  description: Their size in bytes.
  type: int
  returned: mode pack and unpack
free:
  description: With O(mode=look), the bytes free in O(dir) (its nearest existing directory).
  type: int
  returned: mode look
seen:
  description: With O(mode=look), the hosts whose marker of this copy O(dir) holds (those that share it, this
    host included).
  type: list
  elements: str
  returned: mode look
copy_to:
  description: With O(mode=pack), the hosts the archive goes to, one per directory.
  type: list
  elements: str
  returned: mode pack
shares_with:
  description: With O(mode=pack), each other host that shares the directory of a host of C(copy_to), to that
    host.
  type: dict
  returned: mode pack
dir:
  description: With O(mode=look), O(dir).
  type: str
  returned: mode look
copied:
  description: With O(mode=look), each pointer file of the chief's last copy here to the checkpoint number it
    named then.
  type: dict
  returned: mode look
incomplete:
  description: With O(mode=look), whether the last copy here was cut short (the next one redoes it).
  type: bool
  returned: mode look
redone:
  description: With O(mode=unpack), whether this copy cleaned up and redid one that had been cut short.
  type: bool
  returned: mode unpack
hard_links:
  description: With O(mode=pack), the files under the chief's directory with more than one name, each packed as
    a plain file, relative to it.
  type: list
  elements: str
  returned: mode pack, when something was packed
removed:
  description: Files of the chief's last copy that the chief no longer has, removed by O(mode=unpack).
  type: list
  elements: str
  returned: mode unpack
links_left_out:
  description: With O(mode=pack), the symbolic links under the chief's directory that were not packed (a
    link may point anywhere), relative to it.
  type: list
  elements: str
  returned: mode pack, when something was packed
archive:
  description: With O(mode=pack), the archive (on the controller once the action plugin fetched it and removed it
    from the host); empty when nothing was packed.
  type: str
  returned: mode pack
"""

import tarfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tf_runbook.multiworker.plugins.module_utils.tf_checkpoint_copy import run


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "mode": {"type": "str", "choices": ["mark", "look", "pack", "unpack"], "required": True},
            "dir": {"type": "path", "required": True},
            "marker": {"type": "str", "default": ""},
            "copy": {"type": "bool", "default": True},
            "src": {"type": "path"},
            "dest": {"type": "path"},
            "archive": {"type": "path"},
            "targets": {"type": "dict", "default": {}},
            "host": {"type": "str", "default": ""},
            "chief": {"type": "str", "default": ""},
            "controller_dir": {"type": "path", "default": ""},
            "controller_free": {"type": "int", "default": -1},
            "manifest": {"type": "bool", "default": False},
            "chief_files": {"type": "dict", "default": {}},
            "relay_port": {"type": "int", "default": 0},
            "relay_key": {"type": "str", "default": "", "no_log": True},
            "workers": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    try:
        result = run(module.params, module.check_mode)
    except (OSError, ValueError, tarfile.TarError) as exc:
        module.fail_json(msg=f"tf_checkpoint_sync {module.params['mode']} in {module.params['dir']}: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
