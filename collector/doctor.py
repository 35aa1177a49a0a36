"""`ragpulse doctor`: what in a configuration is unsafe to run beside production, and how to fix it.

Over the config, the environment the keys are read from and the free space on the store's disk: each
check gives a `Finding`
with a level (`ok`, `warn`: worth fixing before production, `unsafe`: data or access exposed now)
and a fix. See docs/security.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from collector.auth import Keyring, KeyringError
from collector.config import Config
from collector.processors.config import STAGES
from collector.receivers.config import host_is_loopback
from collector.receivers.tls import ServerTls, TlsError
from collector.store.disk import free_bytes

Level = Literal["ok", "warn", "unsafe"]


@dataclass(frozen=True)
class Finding:
    check: str
    level: Level
    detail: str
    fix: str = ""


def examine(config: Config, environ: Mapping[str, str] | None = None) -> list[Finding]:
    """Every check, in the order a reader fixes them."""
    local = config.receivers.loopback
    return [
        _bind(config, local),
        _keys(config, local, environ),
        _tls(config, local),
        _metrics(config, local),
        _redaction(config),
        _retention(config),
        _judge_transport(config),
        *([_catalog(config)] if config.store.backend == "ducklake" else []),
        *([_disk(config)] if _store_directory(config) is not None else []),
    ]


def _bind(config: Config, local: bool) -> Finding:
    host = config.receivers.host
    if local:
        return Finding("bind", "ok", f"listening on {host}: reachable from this machine only")
    return Finding(
        "bind",
        "warn",
        f"listening on {host}: reachable from the network",
        "fine behind keys and TLS (below); otherwise receivers.host: 127.0.0.1",
    )


def _keys(config: Config, local: bool, environ: Mapping[str, str] | None) -> Finding:
    if not config.auth.keys:
        if local:
            return Finding(
                "auth", "warn", "no API keys: anyone on this machine can send and read", "auth.keys"
            )
        return Finding(
            "auth",
            "unsafe",
            "no API keys on a network address: anyone who reaches the ports can send spans and "
            "read every trace through /api/sql and the dashboard",
            "auth.keys with key_env or key_file, scopes ingest / read / admin",
        )
    try:
        Keyring.from_config(config.auth, environ)
    except KeyringError as exc:
        return Finding("auth", "unsafe", f"a key cannot be read here: {exc}", "set the variable or the file")
    names = ", ".join(f"{k.name} ({'/'.join(k.scopes)})" for k in config.auth.keys)
    return Finding("auth", "ok", f"{len(config.auth.keys)} key(s): {names}")


def _tls(config: Config, local: bool) -> Finding:
    tls = config.tls
    if tls.enabled:
        try:
            ServerTls.from_config(tls)
        except TlsError as exc:
            return Finding("tls", "unsafe", f"serve would not start: {exc}", "fix the tls: files")
        mutual = ", clients need a certificate (mutual TLS)" if tls.client_ca_file else ""
        return Finding("tls", "ok", f"TLS on both ports{mutual}")
    if local:
        return Finding("tls", "ok", "plaintext, on loopback only")
    return Finding(
        "tls",
        "unsafe",
        "plaintext on a network address: keys and span text cross the network in clear",
        "tls.cert_file and tls.key_file (or a TLS-terminating proxy on the same host)",
    )


def _metrics(config: Config, local: bool) -> Finding:
    if config.auth.metrics == "open" and config.auth.keys and not local:
        return Finding(
            "metrics",
            "warn",
            "/metrics answers without a key on a network address (counts only, no span text)",
            "auth.metrics: read, if the scraper can send a key",
        )
    return Finding("metrics", "ok", f"/metrics is {config.auth.metrics}")


def _redaction(config: Config) -> Finding:
    redaction = config.redaction
    if not redaction.enabled:
        return Finding(
            "redaction",
            "warn",
            "off: personal data in span text is stored and sent to the judge as it came",
            "redaction.presets: [email, phone, credit_card, iban, ip_address, api_key]",
        )
    kinds = [*redaction.presets, *(p.name for p in redaction.patterns)]
    missing = [stage for stage in STAGES if stage not in redaction.apply_to]
    detail = f"{', '.join(kinds)} before {', '.join(redaction.apply_to) or 'nothing'}"
    if missing:
        return Finding(
            "redaction", "warn", f"{detail}; not before {', '.join(missing)}", "redaction.apply_to"
        )
    return Finding("redaction", "ok", detail)


def _retention(config: Config) -> Finding:
    retention = config.store.retention
    if not retention.enabled:
        return Finding(
            "retention",
            "warn",
            "none: the database keeps every trace and grows without bound",
            "store.retention.max_age_days and/or max_bytes",
        )
    limits = []
    if retention.max_age_days is not None:
        limits.append(f"traces older than {retention.max_age_days:g} days deleted")
    if retention.max_bytes is not None:
        limits.append(f"oldest traces deleted past {retention.max_bytes:,} bytes")
    return Finding("retention", "ok", "; ".join(limits))


def _catalog(config: Config) -> Finding:
    """The lake's PostgreSQL catalog (store.backend: ducklake): no password in the file, TLS off the host."""
    catalog = config.store.catalog or ""
    fields = dict(re.findall(r"(\w+)\s*=\s*(\S+)", catalog))
    if "password" in fields:
        return Finding(
            "catalog",
            "unsafe",
            "store.catalog holds the PostgreSQL password: anyone who reads the config file has the lake",
            "drop password= and set PGPASSWORD (or a ~/.pgpass file) for the service",
        )
    host = fields.get("host", "localhost")
    on_this_machine = host_is_loopback(host) or host == "localhost" or host.startswith("/")
    if not on_this_machine and fields.get("sslmode") not in ("require", "verify-ca", "verify-full"):
        return Finding(
            "catalog",
            "warn",
            f"the catalog at {host} is reached without TLS: trace ids and replica names cross in clear",
            "sslmode=verify-full in store.catalog (sslrootcert= for your CA)",
        )
    return Finding("catalog", "ok", f"catalog at {host}, data in {config.store.data_path}")


def _store_directory(config: Config) -> Path | None:
    """The local directory the store writes in (the file's, or the lake's data path), or its
    nearest existing parent; None for a lake on object storage."""
    store = config.store
    where = store.path if store.backend == "duckdb" else store.data_path
    if not where or "://" in where:
        return None
    directory = Path(where).expanduser().absolute()
    directory = directory if store.backend == "ducklake" else directory.parent
    while not directory.exists():
        directory = directory.parent
    return directory


def _disk(config: Config) -> Finding:
    """Free space beside the store: under `store.min_free_mb`, commits may soon fail (exports are
    then refused until space returns), and retention's size cap should fit on the disk."""
    directory = _store_directory(config)
    assert directory is not None
    free = free_bytes(directory)
    wanted = config.store.min_free_mb * 1_000_000
    detail = f"{free / 1e9:.1f} GB free on {directory}"
    if free < wanted:
        return Finding(
            "disk",
            "warn",
            f"{detail}, under store.min_free_mb ({config.store.min_free_mb:,} MB): commits fail on a "
            "full disk and exports are refused until space returns",
            "free space or grow the volume; store.retention.max_bytes keeps the database under a cap",
        )
    cap = config.store.retention.max_bytes
    if cap is not None and config.store.backend == "duckdb":
        used = sum(
            f.stat().st_size for f in directory.glob(f"{Path(config.store.path).name}*") if f.is_file()
        )
        if cap > used + free:
            return Finding(
                "disk",
                "warn",
                f"{detail}: store.retention.max_bytes ({cap / 1e9:.1f} GB) is more than the disk holds",
                "lower store.retention.max_bytes below the free space plus the database's size",
            )
    return Finding("disk", "ok", detail)


def _judge_transport(config: Config) -> Finding:
    judge = config.judge
    if not judge.model or not judge.base_url:
        return Finding("judge", "ok", "no judge, or the provider's default HTTPS endpoint")
    url = urlsplit(judge.base_url)
    if url.scheme == "http" and not host_is_loopback(url.hostname or ""):
        return Finding(
            "judge",
            "unsafe",
            f"the judge is reached over plain HTTP at {url.hostname}: span text and its key cross the "
            "network in clear",
            "an https:// judge.base_url",
        )
    return Finding("judge", "ok", f"judge at {url.scheme}://{url.hostname}")
