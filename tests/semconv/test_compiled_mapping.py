"""The mapping compiled with mypyc (setup.py) is the mapping as written: it is what runs, and it maps
every trace exactly as the interpreted source does.

The interpreted side is a copy of `semconv`'s sources without the extensions, imported in a
subprocess; both sides map the same traces (arbitrary ones, from the mapper property tests'
strategies, and the load generator's) and their `RagTrace`s must serialize to the same JSON.
(Spans go over as plain data: the compiled `Attributes` class pickles its own way.)
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings

import semconv
from collector.otlp.batch import decode_request
from collector.schema.span_records import span_records
from semconv import SpanRecord, map_trace
from tests.support.helpers import REPO
from tests.support.span_strategies import traces as arbitrary_traces

# The modules setup.py compiles (its COMPILED list, as module names).
COMPILED_MODULES = [
    "semconv.values",
    "semconv.documents",
    "semconv.mapping",
    "semconv.fields",
    "semconv.parallel_trees",
    "semconv.tree",
    "semconv.tools",
    "semconv.agent_steps",
    "semconv.mappers.genai",
    "semconv.mappers.langfuse",
    "semconv.mappers.langsmith",
    "semconv.mappers.openinference",
    "semconv.mappers.openllmetry",
]

# The interpreted side: a subprocess with the copy first on sys.path, mapping one pickled trace per
# line of stdin (hex) to one line of RagTrace JSON on stdout.
INTERPRETED = """
import pickle, sys
sys.path.insert(0, sys.argv[1])
import semconv, semconv.mapping
where = semconv.mapping.__file__
assert semconv.__file__.startswith(sys.argv[1]) and where.endswith(".py"), where
from semconv import EventRecord, SpanRecord
for line in sys.stdin:
    spans = [
        SpanRecord(**fields, events=[EventRecord(*event) for event in events])
        for fields, events in pickle.loads(bytes.fromhex(line))
    ]
    print(semconv.map_trace(spans).model_dump_json(), flush=True)
"""


def test_setup_compiles_the_listed_modules() -> None:
    """The list above is setup.py's: a module added there is checked here too."""
    setup = (REPO / "setup.py").read_text()
    listed = [name.replace(".", "/") + ".py" for name in COMPILED_MODULES]
    for path in listed:
        assert f'"{path}"' in setup
    assert setup.count('.py",') == len(listed)


def test_the_mapping_runs_compiled() -> None:
    """`make` builds the extensions, so the tests (and the service) run them; with
    RAGPULSE_PURE_PYTHON=1 nothing is compiled and everything runs interpreted."""
    compiled = not os.environ.get("RAGPULSE_PURE_PYTHON")
    for name in COMPILED_MODULES:
        module = importlib.import_module(name)
        assert str(module.__file__).endswith(".so") is compiled, (name, module.__file__)


class Interpreted:
    """The interpreted mapping in its subprocess (see INTERPRETED)."""

    def __init__(self, tmp: Path) -> None:
        copy = tmp / "interpreted"
        source = Path(semconv.__file__).parent
        shutil.copytree(source, copy / "semconv", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
        self.process = subprocess.Popen(
            [sys.executable, "-c", INTERPRETED, str(copy)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=tmp,
        )

    def map(self, spans: list[SpanRecord]) -> str:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(pickle.dumps([_plain(span) for span in spans]).hex() + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, f"the interpreted mapping exited ({self.process.wait()})"
        return line.rstrip("\n")


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Interpreted]:
    mapper = Interpreted(tmp_path_factory.mktemp("mapping"))
    yield mapper
    mapper.process.kill()
    mapper.process.wait()


def _plain(span: SpanRecord) -> tuple[dict[str, Any], list[tuple[str, int | None, dict[str, Any]]]]:
    """A span as (its fields but events, its events as (name, time, attributes)), in builtin types."""
    fields = {f.name: getattr(span, f.name) for f in dataclasses.fields(span) if f.name != "events"}
    fields["attributes"] = dict(span.attributes)
    return fields, [(event.name, event.time_us, dict(event.attributes)) for event in span.events]


def _load_generator_traces() -> list[list[SpanRecord]]:
    sys.path.insert(0, str(REPO / "bench"))
    try:
        from load_generator import build  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(REPO / "bench"))
    batch = decode_request(build(25, 7))
    by_trace: dict[str, list[SpanRecord]] = {}
    for record in span_records(batch.spans, batch.events):
        by_trace.setdefault(record.trace_id, []).append(record)
    return list(by_trace.values())


def _same(interpreted: Interpreted, spans: list[SpanRecord]) -> None:
    # Interpreted first: the spans go over before either side has indexed their attributes.
    theirs = interpreted.map(spans)
    assert map_trace(spans).model_dump_json() == theirs, spans


def _nesting(value: Any) -> int:
    """How deep `value` nests: lists and dicts, and brackets in text (JSON or a Python repr)."""
    deepest = 0
    stack = [(value, 0)]
    while stack:  # not recursive: the values nest deeper than the recursion limit
        item, depth = stack.pop()
        if isinstance(item, str):
            level = 0
            for char in item:
                level += (char in "[{(") - (char in "]})")
                deepest = max(deepest, depth + level)
        elif isinstance(item, dict | list | tuple):
            deepest = max(deepest, depth + 1)
            stack += [(child, depth + 1) for child in (item.values() if isinstance(item, dict) else item)]
    return deepest


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(arbitrary_traces)
def test_compiled_maps_arbitrary_traces_as_interpreted(
    interpreted: Interpreted, spans: list[SpanRecord]
) -> None:
    # A value nested close to the recursion limit parses (json, ast) or not by how deep the call
    # stack already is, and compiled functions take no Python frames: not a difference of the code.
    maps = [span.attributes for span in spans] + [event.attributes for span in spans for event in span.events]
    assume(_nesting(maps) < 200)
    _same(interpreted, spans)


def test_compiled_maps_the_load_generators_traces_as_interpreted(interpreted: Interpreted) -> None:
    for spans in _load_generator_traces():
        _same(interpreted, spans)
