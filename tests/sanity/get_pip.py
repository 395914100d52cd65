"""Stand-in for ansible-test's pip bootstrap script (get-pip), whose download site
(ci-files.testing.ansible.com) may be out of reach: `make sanity` puts it in
ansible-test's cache. It installs pip from the interpreter's own ensurepip, then the pip
version ansible-test asks for from the package index (the machine's certificates, which
ansible-test's PIP_CONFIG_FILE=/dev/null would otherwise hide)."""

from __future__ import annotations

import ensurepip
import os
import subprocess
import sys

ensurepip.bootstrap(upgrade=True)
env = dict(os.environ, PIP_CERT=os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt")
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", *args], env=env))
