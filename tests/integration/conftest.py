"""pytest fixtures exposing namespace-based test hosts (see nshosts.py).

Fixtures:
    ns_hosts        session-scoped NamespaceHosts with 3 hosts, shared by tests
                    that do not break hosts (no fault injection on it!).
    make_ns_hosts   factory ``make_ns_hosts(count=3, **kwargs)`` for tests that
                    need another size or inject faults; everything it created is
                    torn down when the test ends.
    multihost_env   preflight (root, iproute2...) + removal of leftovers of
                    killed earlier runs; used by the two above.

Tests using these fixtures get the ``multihost`` marker automatically, so
``pytest -m 'not multihost'`` deselects them on machines that cannot run them.
Where they are selected but the machine is unsuitable they *fail* with a
clear message instead of skipping silently.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

# Import by plain module name whatever pytest's import mode / package layout.
sys.path.insert(0, str(Path(__file__).resolve().parent))
# The tests' shared helpers (tests/helpers.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nshosts import NamespaceHosts, NamespaceHostsError, preflight  # noqa: E402

MULTIHOST_FIXTURES = frozenset({"ns_hosts", "make_ns_hosts", "multihost_env"})


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "multihost: needs root and network namespaces; brings up SSH test hosts "
        "(tests/integration/nshosts.py)",
    )


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Mark every test that uses a multi-host fixture, so -m filtering just works."""
    for item in items:
        if MULTIHOST_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.multihost)


@pytest.fixture(scope="session")
def multihost_env() -> None:
    """Fail (not skip) when namespaces cannot be used; clear stale leftovers once."""
    try:
        preflight()
    except NamespaceHostsError as exc:
        pytest.fail(f"multihost tests selected but unusable here: {exc}", pytrace=False)
    NamespaceHosts.cleanup_stale()


@pytest.fixture(scope="session")
def ns_hosts(
    multihost_env: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NamespaceHosts]:
    """Three hosts node0..node2 for the whole session.

    Shared: do not cut_network/power_off these (use make_ns_hosts instead).
    sshd logs end up in the fixture's tmp dir under ``logs/`` afterwards.
    """
    with NamespaceHosts(3, tmp_path_factory.mktemp("nshosts"), keep_logs=True) as hosts:
        yield hosts


@pytest.fixture
def make_ns_hosts(
    multihost_env: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., NamespaceHosts]]:
    """Factory for private, started NamespaceHosts; all closed at test end.

    ``make_ns_hosts(count=3, user="tfrunner", **kwargs)`` accepts every
    NamespaceHosts keyword argument.
    """
    created: list[NamespaceHosts] = []

    def factory(count: int = 3, **kwargs: Any) -> NamespaceHosts:
        kwargs.setdefault("keep_logs", True)
        hosts = NamespaceHosts(
            count, tmp_path_factory.mktemp(f"nshosts{count}-"), **kwargs
        )
        created.append(hosts)
        return hosts.start()

    yield factory
    errors = []
    for hosts in reversed(created):
        try:
            hosts.close()
        except NamespaceHostsError as exc:
            errors.append(str(exc))
    if errors:
        pytest.fail("make_ns_hosts teardown: " + "\n".join(errors), pytrace=False)


@pytest.fixture(scope="session")
def worker_python() -> str:
    """A shared virtualenv with the worker pins for Debian's Python, usable by the hosts'
    unprivileged user (built once, then reused)."""
    from workerenv import shared_venv

    return str(shared_venv())
