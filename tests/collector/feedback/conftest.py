"""The feedback tests' fixtures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.service import BackgroundService, Service
from tests.support.helpers import fast_assembler, make_config


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Service]:
    """A running service with default settings and a quick assembler."""
    with BackgroundService(make_config(tmp_path, assembler=fast_assembler())) as service:
        yield service
