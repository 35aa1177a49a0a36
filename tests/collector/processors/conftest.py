"""The processors' tests' fixtures: the judge and the downstream backend of the scoring and
redaction tests, one of each per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from collector.service import BackgroundService, Service
from tests.support.helpers import make_config
from tests.support.openai_stub import OpenAIStub, always_pass


@pytest.fixture(scope="module")
def judge() -> Iterator[OpenAIStub]:
    """A judge that gives a valid, passing verdict to every prompt."""
    with OpenAIStub(responder=always_pass) as stub:
        yield stub


@pytest.fixture(scope="module")
def downstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A second ragpulse as a plain OTLP/gRPC backend behind the one under test: it stores what it
    receives, no assembly."""
    config = make_config(tmp_path_factory.mktemp("downstream"), assembler={"enabled": False})
    with BackgroundService(config) as svc:
        yield svc
