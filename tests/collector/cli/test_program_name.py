"""How commands ragpulse prints for a user to run next write ragpulse (`program_name`): the bare
name only when that name on PATH is this program; after `make install` (on no PATH), the path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from collector.cli.common import program_name
from collector.demo import sql_to_try


def _executable(directory: Path) -> Path:
    directory.mkdir(parents=True)
    program = directory / "ragpulse"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    return program


def test_the_path_it_was_started_by_when_ragpulse_is_on_no_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _executable(tmp_path / ".venv" / "bin")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert program_name(".venv/bin/ragpulse") == os.path.join(".venv", "bin", "ragpulse")
    # Started from elsewhere: an absolute path, never a `../..` to puzzle over.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert program_name(str(tmp_path / ".venv" / "bin" / "ragpulse")) == str(
        tmp_path / ".venv" / "bin" / "ragpulse"
    )


def test_the_bare_name_when_that_name_on_path_is_this_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    program = _executable(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin")
    assert program_name(str(program)) == "ragpulse"
    # Another ragpulse first on PATH: this one is named by its path.
    other = _executable(tmp_path / "other")
    monkeypatch.setenv("PATH", f"{tmp_path / 'other'}:{tmp_path / 'bin'}")
    monkeypatch.chdir(tmp_path)
    assert program_name(str(program)) == os.path.join("bin", "ragpulse")
    assert program_name(str(other)) == "ragpulse"
    # Not started as the ragpulse script (python -m, a test runner): the documented name.
    assert program_name("/usr/lib/python3/pytest") == "ragpulse"


def test_the_demo_writes_its_commands_with_that_name() -> None:
    lines = sql_to_try("demo.duckdb", ".venv/bin/ragpulse")
    commands = [line for line in lines if not line.startswith("#")]
    assert commands and all(c.startswith('.venv/bin/ragpulse sql "') for c in commands)
    assert all(c.endswith(" --db demo.duckdb") for c in commands)
