"""The collector's tests' fixtures (and the conftest.py of its sub-folders; tests/conftest.py holds the
ones every folder uses)."""

from __future__ import annotations

import pytest

from tests.support.helpers import ServeProcess


@pytest.fixture
def server(serve_process: ServeProcess) -> ServeProcess:
    """`serve_process` (tests/conftest.py), as the kill-and-restart tests call it: a `ragpulse serve`
    subprocess on this test's tmp_path, not started yet."""
    return serve_process
