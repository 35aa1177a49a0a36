"""Build hook: the mapping (`semconv`) compiled with mypyc, pure Python where that cannot be done.

The modules in `COMPILED` are the mapping worker's hot path; mypyc compiles them, as they are typed,
to C extensions (the mapping then costs about a third less CPU: docs/architecture.md, "The compiled
mapping"). The `.py` files stay the source: without a C compiler, or with `RAGPULSE_PURE_PYTHON=1`,
the build skips the extensions and ragpulse runs the same code interpreted. `make compile` rebuilds
them in place after an edit (tests/conftest.py refuses to run against a stale build).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

COMPILED = [
    "semconv/values.py",
    "semconv/documents.py",
    "semconv/mapping.py",
    "semconv/fields.py",
    "semconv/parallel_trees.py",
    "semconv/tree.py",
    "semconv/tools.py",
    "semconv/agent_steps.py",
    "semconv/mappers/genai.py",
    "semconv/mappers/langfuse.py",
    "semconv/mappers/langsmith.py",
    "semconv/mappers/openinference.py",
    "semconv/mappers/openllmetry.py",
]


class OptionalBuildExt(build_ext):
    """build_ext that leaves a module interpreted when it cannot be compiled (no C compiler)."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # any build failure means: run as pure Python
            _skipped("the mapping", exc)

    def build_extension(self, ext: Any) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            _skipped(ext.name, exc)


def _skipped(what: str, exc: Exception) -> None:
    reason = f"{type(exc).__name__}: {str(exc)[:160]}"  # a compiler's failure names its whole command
    print(f"ragpulse: {what} not compiled ({reason}); it runs as pure Python", file=sys.stderr)


def ext_modules() -> list[Any]:
    if os.environ.get("RAGPULSE_PURE_PYTHON"):
        return []
    from mypyc.build import mypycify

    return mypycify(COMPILED, opt_level="3", group_name="ragpulse_semconv")


setup(ext_modules=ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
