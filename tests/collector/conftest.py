"""The collector's tests' fixtures (and the conftest.py of its sub-folders; tests/conftest.py holds the
ones every folder uses)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from collector.service import Service
from tests.support.helpers import ServeProcess, judged_example_app
from tests.support.openai_stub import passing_verdict


@pytest.fixture
def server(serve_process: ServeProcess) -> ServeProcess:
    """`serve_process` (tests/conftest.py), as the kill-and-restart tests call it: a `ragpulse serve`
    subprocess on this test's tmp_path, not started yet."""
    return serve_process


@pytest.fixture(scope="module")
def judged_shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A running service, one per test module, fed the example app's 12 questions in the healthy and
    the degraded mode: 24 traces, every one scored, judge included (a test judge that passes)."""
    with judged_example_app(
        tmp_path_factory.mktemp("shop"), ("healthy", "degraded"), passing_verdict
    ) as service:
        yield service
