"""The emitting half of the convention needs nothing of the server.

`semconv.emit` imports only the OpenTelemetry API and `semconv.names` (the package's `__init__` loads
the models and the mapping on first use of their names), and `emit/` is a distribution of its own,
`ragpulse-emit`, whose wheel holds just those modules and depends only on `opentelemetry-api`: an app
installs it into a fresh venv without pydantic, DuckDB or a compiler, and its spans carry the
convention. docs/architecture.md, "Packaging".
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import semconv
from tests.support.helpers import REPO

ROOT = REPO
EMIT = ROOT / "emit"
# What `import semconv.emit` may load besides the standard library.
LIGHT = {"semconv", "semconv.emit", "semconv.names"}
HEAVY = ("pydantic", "duckdb", "pyarrow", "grpc", "openai", "collector", "evaluators")

IMPORTS = """
import json, sys
import semconv.emit
print(json.dumps(sorted(sys.modules)))
"""


def _loaded_after_import(python: str | Path, cwd: Path) -> list[str]:
    out = subprocess.run(
        [str(python), "-c", IMPORTS], cwd=cwd, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return json.loads(out)


def _offending(modules: list[str]) -> list[str]:
    semconv_modules = {m for m in modules if m == "semconv" or m.startswith("semconv.")}
    heavy = [m for m in modules if m.split(".")[0] in HEAVY]
    return sorted(semconv_modules - LIGHT) + heavy


def test_importing_emit_loads_neither_pydantic_nor_the_mapping(tmp_path: Path) -> None:
    """In the dev venv, where pydantic and the compiled mapping are installed and importable."""
    loaded = _loaded_after_import(sys.executable, cwd=ROOT)
    assert "semconv.emit" in loaded and "opentelemetry.trace" in loaded
    assert _offending(loaded) == []


def test_the_package_still_exports_the_models_and_the_mapping() -> None:
    """`from semconv import RagTrace, map_trace` (the collector's imports) works through the lazy init."""
    from semconv import RAG_STEP_KINDS, STEP_KINDS, Document, EventRecord, RagTrace, SpanRecord, Step
    from semconv import map_trace as imported_map_trace
    from semconv.mapping import map_trace
    from semconv.models import RagTrace as ModelsRagTrace

    assert imported_map_trace is map_trace and RagTrace is ModelsRagTrace
    assert {RAG_STEP_KINDS, STEP_KINDS, Document, EventRecord, SpanRecord, Step}
    for name in semconv.__all__:
        assert getattr(semconv, name) is not None, name
        assert name in dir(semconv)
    assert map_trace([]).convention == "unknown"
    try:
        semconv.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("an unknown name must raise AttributeError")


def test_emit_distribution_shares_the_servers_modules() -> None:
    """emit/semconv's names.py and emit.py are the server's files (symlinks), not copies that drift;
    the two distributions carry one version."""
    for name in ("names.py", "emit.py"):
        link = EMIT / "semconv" / name
        assert link.is_symlink(), f"{link} must be a symlink to semconv/{name}"
        assert os.readlink(link) == f"../../semconv/{name}"
        assert link.resolve() == ROOT / "semconv" / name
    assert sorted(p.name for p in (EMIT / "semconv").iterdir() if p.suffix == ".py") == [
        "__init__.py",
        "emit.py",
        "names.py",
    ]
    emit_project = tomllib.loads((EMIT / "pyproject.toml").read_text())["project"]
    main_project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert emit_project["version"] == main_project["version"]
    assert [d.split(">")[0] for d in emit_project["dependencies"]] == ["opentelemetry-api"]


# Run in the fresh venv: the convention's request, retrieval and chat spans through an SDK tracer,
# after checking what `import semconv.emit` loaded (before the SDK is imported).
APP = """
import json, sys
import semconv, semconv.emit
from semconv import emit
loaded = sorted(sys.modules)

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
tracer = provider.get_tracer("my-rag-app")
question = "How long do I have to return an item?"
with emit.request(tracer, question, case_id="returns-1") as req:
    with emit.retrieval(tracer, question, data_source="kb", top_k=3) as step:
        step.documents([{"id": "refund-window", "score": 0.82, "content": "Refunds within 30 days."}])
    with emit.chat(tracer, model="gpt-4o-mini", provider="openai") as step:
        step.messages([{"role": "user", "content": question}], system="Answer from the context.")
        step.output("Within 30 days.", input_tokens=12, output_tokens=4)
    req.answer("Within 30 days.")
spans = [
    {"name": s.name, "parent": s.parent.span_id if s.parent else None, "id": s.context.span_id,
     "attributes": dict(s.attributes)}
    for s in exporter.get_finished_spans()
]
print(json.dumps({"semconv": semconv.__file__, "loaded": loaded, "spans": spans}))
"""

# Which of the modules named on its command line the fresh venv could import.
CAN_IMPORT = """
import importlib.util, json, sys
print(json.dumps({name: importlib.util.find_spec(name) is not None for name in sys.argv[1:]}))
"""


def _pip(venv: Path, *args: str) -> None:
    subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            *args,
        ],
        check=True,
        timeout=240,
    )


def test_emit_installs_alone_into_a_fresh_venv(tmp_path: Path) -> None:
    # `pip install ./emit` from a copy of the checkout's two directories, links kept as links: pip
    # builds in place, and its build/ left in the real emit/ could hold files since removed.
    checkout = tmp_path / "checkout"
    shutil.copytree(
        EMIT, checkout / "emit", symlinks=True, ignore=shutil.ignore_patterns("build", "*.egg-info")
    )
    (checkout / "semconv").mkdir()
    for name in ("names.py", "emit.py"):
        shutil.copy(ROOT / "semconv" / name, checkout / "semconv" / name)
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    _pip(venv, str(checkout / "emit"))

    # Nothing of the server came along.
    can_import = json.loads(
        subprocess.run(
            [str(python), "-c", CAN_IMPORT, *HEAVY, "opentelemetry.trace", "semconv.emit"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert can_import == {name: name in ("opentelemetry.trace", "semconv.emit") for name in can_import}
    files = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(*m.files('ragpulse-emit'), sep='\\n')"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert sorted(f for f in files if ".dist-info" not in f and "__pycache__" not in f) == [
        "semconv/__init__.py",
        "semconv/emit.py",
        "semconv/names.py",
    ]
    init = subprocess.check_output(
        [str(python), "-c", "import semconv; print(semconv.__file__)"], cwd=tmp_path
    )
    installed = Path(init.decode().strip()).parent
    for name in ("names.py", "emit.py"):  # the symlinks' targets, copied
        assert not (installed / name).is_symlink()
        assert (installed / name).read_text() == (ROOT / "semconv" / name).read_text()

    # The SDK, for this test's app only: it reads the finished spans.
    _pip(venv, "opentelemetry-sdk")
    out = subprocess.run(
        [str(python), "-c", APP], cwd=tmp_path, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    result = json.loads(out)
    assert result["semconv"].startswith(str(venv)), result["semconv"]
    assert _offending(result["loaded"]) == []
    assert not any(m.startswith("opentelemetry.sdk") for m in result["loaded"])

    spans = {s["name"]: s for s in result["spans"]}
    assert set(spans) == {"rag.request", "retrieval kb", "chat gpt-4o-mini"}
    root = spans["rag.request"]
    assert root["parent"] is None
    assert spans["retrieval kb"]["parent"] == root["id"] == spans["chat gpt-4o-mini"]["parent"]
    assert root["attributes"] == {
        "rag.step": "chain",
        "rag.question": "How long do I have to return an item?",
        "rag.case.id": "returns-1",
        "rag.answer": "Within 30 days.",
    }
    retrieval = spans["retrieval kb"]["attributes"]
    assert retrieval["gen_ai.operation.name"] == "retrieval"
    assert retrieval["gen_ai.data_source.id"] == "kb"
    assert retrieval["gen_ai.retrieval.top_k"] == 3
    assert json.loads(retrieval["gen_ai.retrieval.documents"]) == [
        {"id": "refund-window", "score": 0.82, "content": "Refunds within 30 days."}
    ]
    chat = spans["chat gpt-4o-mini"]["attributes"]
    assert chat["gen_ai.operation.name"] == "chat"
    assert chat["gen_ai.provider.name"] == "openai"
    assert chat["gen_ai.usage.input_tokens"] == 12 and chat["gen_ai.usage.output_tokens"] == 4
    [message] = json.loads(chat["gen_ai.output.messages"])
    assert message["parts"] == [{"type": "text", "content": "Within 30 days."}]
