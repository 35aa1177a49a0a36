"""`ragpulse doctor`: the installed command over real config files, keys in the environment and
certificates made in the test; exit 0 unless a finding is unsafe (3), or with `--strict` a warning."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from collector.service import BackgroundService
from tests.support.certificates import make_pki
from tests.support.helpers import clean_env, make_config, run_ragpulse

KEY = "k" * 32


def doctor(
    tmp_path: Path, config: dict[str, Any], *options: str, **env: str
) -> tuple[int, dict[str, dict[str, str]]]:
    """Run `ragpulse doctor --json` on `config`; (exit status, findings by check)."""
    path = tmp_path / "ragpulse.yaml"
    path.write_text(yaml.safe_dump(config))
    command = ("doctor", "--config", str(path), "--json", *options)
    result = run_ragpulse(*command, cwd=tmp_path, env=clean_env(**env))
    assert result.returncode in (0, 3), result.stderr
    return result.returncode, {f["check"]: f for f in json.loads(result.stdout)}


def levels(findings: dict[str, dict[str, str]]) -> dict[str, str]:
    return {check: f["level"] for check, f in findings.items()}


def test_the_defaults_are_safe_on_loopback_but_not_ready_for_production(tmp_path: Path) -> None:
    status, findings = doctor(tmp_path, {})
    assert status == 0  # warnings are advice: a CI step on the default config stays green
    assert doctor(tmp_path, {}, "--strict")[0] == 3
    assert levels(findings) == {
        "bind": "ok",
        "auth": "warn",
        "tls": "ok",
        "metrics": "ok",
        "redaction": "warn",
        "retention": "warn",
        "judge": "ok",
        "disk": "ok",
    }
    assert "redaction.presets" in findings["redaction"]["fix"]


def test_a_network_address_without_keys_or_tls_is_unsafe(tmp_path: Path) -> None:
    status, findings = doctor(
        tmp_path,
        {
            "receivers": {"host": "0.0.0.0"},
            "judge": {"model": "m", "base_url": "http://judge.internal:8000/v1"},
        },
    )
    assert status == 3
    assert {c for c, level in levels(findings).items() if level == "unsafe"} == {"auth", "tls", "judge"}
    assert "read every trace" in findings["auth"]["detail"]


def test_a_key_that_cannot_be_read_here_is_unsafe(tmp_path: Path) -> None:
    config = {"auth": {"keys": [{"name": "app", "key_env": "RAGPULSE_KEY_APP", "scopes": ["ingest"]}]}}
    _, missing = doctor(tmp_path, config)
    assert missing["auth"]["level"] == "unsafe"
    assert "RAGPULSE_KEY_APP is not set" in missing["auth"]["detail"]
    _, present = doctor(tmp_path, config, RAGPULSE_KEY_APP=KEY)
    assert present["auth"]["level"] == "ok"


def test_a_production_setup_passes(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    config = {
        "receivers": {"host": "0.0.0.0"},
        "auth": {
            "keys": [{"name": "ops", "key_env": "RAGPULSE_KEY_OPS", "scopes": ["ingest", "read", "admin"]}],
            "metrics": "read",
        },
        "tls": {"cert_file": str(pki.server_cert), "key_file": str(pki.server_key)},
        "redaction": {"presets": ["email", "phone", "credit_card", "iban", "ip_address", "api_key"]},
        "store": {"retention": {"max_age_days": 30, "max_bytes": 20_000_000_000}},
        "judge": {"model": "m", "base_url": "https://judge.example.com/v1"},
    }
    status, findings = doctor(tmp_path, config, RAGPULSE_KEY_OPS=KEY)
    assert set(levels(findings).values()) - {"ok"} == {"warn"}  # the network bind is worth a look
    assert levels(findings)["bind"] == "warn" and status == 0
    assert doctor(tmp_path, config, "--strict", RAGPULSE_KEY_OPS=KEY)[0] == 3

    config["receivers"] = {"host": "127.0.0.1"}
    status, findings = doctor(tmp_path, config, "--strict", RAGPULSE_KEY_OPS=KEY)
    assert status == 0, findings
    assert "30 days" in findings["retention"]["detail"]


def test_unusable_tls_files_and_partial_redaction_are_flagged(tmp_path: Path) -> None:
    config = {
        "tls": {"cert_file": str(tmp_path / "missing.pem"), "key_file": str(tmp_path / "missing.key")},
        "redaction": {"presets": ["email"], "apply_to": ["storage"]},
    }
    _, findings = doctor(tmp_path, config)
    assert findings["tls"]["level"] == "unsafe" and "no such file" in findings["tls"]["detail"]
    assert findings["redaction"]["level"] == "warn"
    assert "not before judge, export" in findings["redaction"]["detail"]


def test_the_table_names_what_to_fix_and_fits_80_columns(tmp_path: Path) -> None:
    result = run_ragpulse("doctor", cwd=tmp_path, env=clean_env(COLUMNS="80"))
    assert result.returncode == 0
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    flat = " ".join(line.strip("│ ") for line in result.stdout.splitlines())
    # Every fix whole (the presets are text, not markup; nothing cut with an ellipsis).
    assert "redaction.presets: [email, phone, credit_card," in flat and "ip_address, api_key]" in flat
    assert "store.retention.max_age_days and/or max_bytes" in flat and "…" not in result.stdout
    assert "3 warning(s) worth fixing before production, nothing unsafe now" in result.stderr
    unsafe = tmp_path / "open.yaml"
    unsafe.write_text("receivers: {host: 0.0.0.0}\n")
    flagged = run_ragpulse("doctor", "--config", str(unsafe), cwd=tmp_path, env=clean_env(COLUMNS="80"))
    assert flagged.returncode == 3
    assert flagged.stderr.startswith("2 unsafe now, ")
    assert run_ragpulse("doctor", "--config", str(tmp_path / "missing.yaml"), cwd=tmp_path).returncode == 1


def test_serve_logs_what_doctor_finds_unsafe(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = make_config(tmp_path, receivers={"host": "0.0.0.0"})
    with caplog.at_level(logging.WARNING, logger="collector.service"), BackgroundService(config):
        pass
    unsafe = [r.getMessage() for r in caplog.records if r.getMessage().startswith("unsafe setup")]
    assert [m.split(")")[0] for m in unsafe] == ["unsafe setup (auth", "unsafe setup (tls"]
    assert "auth.keys" in unsafe[0] and "tls.cert_file" in unsafe[1]

    caplog.clear()
    with (
        caplog.at_level(logging.WARNING, logger="collector.service"),
        BackgroundService(make_config(tmp_path)),
    ):
        pass
    assert not [r for r in caplog.records if r.getMessage().startswith("unsafe setup")]


def test_the_lake_catalog_keeps_its_password_out_and_uses_tls_off_the_host(tmp_path: Path) -> None:
    lake = {"backend": "ducklake", "data_path": "/shared/lake/"}
    _, plain = doctor(tmp_path, {"store": {**lake, "catalog": "postgres:dbname=rp host=pg.internal user=rp"}})
    _, with_password = doctor(
        tmp_path, {"store": {**lake, "catalog": "postgres:dbname=rp host=127.0.0.1 user=rp password=hunter2"}}
    )
    _, safe = doctor(
        tmp_path,
        {"store": {**lake, "catalog": "postgres:dbname=rp host=pg.internal user=rp sslmode=verify-full"}},
    )
    _, embedded = doctor(tmp_path, {})
    assert plain["catalog"]["level"] == "warn" and "sslmode=verify-full" in plain["catalog"]["fix"]
    assert with_password["catalog"]["level"] == "unsafe" and "PGPASSWORD" in with_password["catalog"]["fix"]
    assert "hunter2" not in json.dumps(with_password)
    assert safe["catalog"]["level"] == "ok"
    assert "catalog" not in embedded


def test_little_free_space_beside_the_store_is_a_warning(tmp_path: Path) -> None:
    free_mb = shutil.disk_usage(tmp_path).free // 1_000_000
    _, roomy = doctor(tmp_path, {"store": {"path": str(tmp_path / "data" / "rp.duckdb")}})
    assert roomy["disk"]["level"] == "ok" and str(tmp_path) in roomy["disk"]["detail"]
    status, short = doctor(tmp_path, {"store": {"min_free_mb": free_mb * 2}})
    assert status == 0
    assert short["disk"]["level"] == "warn"
    assert "under store.min_free_mb" in short["disk"]["detail"]
    _, capped = doctor(tmp_path, {"store": {"retention": {"max_bytes": free_mb * 2_000_000}}})
    assert capped["disk"]["level"] == "warn"
    assert "more than the disk holds" in capped["disk"]["detail"]
