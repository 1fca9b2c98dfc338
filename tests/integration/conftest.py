"""Fixtures the integration tests share (the suite-wide ones are in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients.pylance_client import LiveWriter, live_writer
from tests.integration.test_clients_pylance import ONE


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveWriter]:
    """A pylance ``ShardWriter`` kept open over a one-shard table, its writes in a model."""
    yield from live_writer(tmp_path, ONE)
