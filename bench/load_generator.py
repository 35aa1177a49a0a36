"""The shared OTLP load generator (`../shared/tools/otlp_load.py`), imported by path."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LOAD_TOOL = ROOT.parent / "shared" / "tools" / "otlp_load.py"


def load_tool(path: Path = DEFAULT_LOAD_TOOL) -> Any:
    """The generator module: `build(n_traces, seed)` gives one ExportTraceServiceRequest."""
    spec = importlib.util.spec_from_file_location("otlp_load", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
