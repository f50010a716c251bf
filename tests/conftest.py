"""Fixtures every test package shares."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from bench.pg_cluster import Cluster


@pytest.fixture(scope="module")
def pg_cluster() -> Iterator[Cluster]:
    """A throwaway PostgreSQL cluster from the machine's server binaries, one per test
    module that asks for it, stopped after the module's last test."""
    from bench.pg_cluster import Cluster  # (only modules that ask need the server)

    server = Cluster()
    try:
        yield server
    finally:
        server.stop()
