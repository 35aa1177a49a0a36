"""Keys resolved from their sources, and the one check every surface makes.

A presented key is hashed once and compared with every configured key's hash in constant time
(`hmac.compare_digest`, and no early exit), so the time taken says nothing about how close a guess
was or which key it matched. Keys are never logged: only key names are.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from collector.auth.config import AuthConfig, Scope

# Shorter keys are guessable. Make one with `openssl rand -hex 32`.
MIN_KEY_LENGTH = 16


class KeyringError(ValueError):
    """A key that cannot be used (missing variable, unreadable file, too short); names the key."""


class Decision(Enum):
    ALLOWED = "allowed"
    UNAUTHENTICATED = "unauthenticated"  # no key, or not one of ours: 401 / UNAUTHENTICATED
    FORBIDDEN = "forbidden"  # a good key without the scope: 403 / PERMISSION_DENIED


@dataclass(frozen=True)
class _Key:
    name: str
    digest: bytes
    scopes: frozenset[Scope]


class Keyring:
    """The configured keys; `enabled` is False when there are none (every request is allowed)."""

    def __init__(self, keys: list[_Key]) -> None:
        self._keys = keys

    @classmethod
    def from_config(cls, config: AuthConfig, environ: Mapping[str, str] | None = None) -> Keyring:
        environ = os.environ if environ is None else environ
        keys = []
        for i, entry in enumerate(config.keys):
            where = f"auth.keys[{i}] ({entry.name})"
            if entry.key_env is not None:
                secret = environ.get(entry.key_env)
                if secret is None:
                    raise KeyringError(f"{where}: the environment variable {entry.key_env} is not set")
            else:
                assert entry.key_file is not None
                try:
                    secret = Path(entry.key_file).read_text(encoding="utf-8")
                except OSError as exc:
                    raise KeyringError(
                        f"{where}: cannot read {entry.key_file}: {exc.strerror or exc}"
                    ) from None
            secret = secret.strip()
            if len(secret) < MIN_KEY_LENGTH:
                raise KeyringError(f"{where}: a key needs at least {MIN_KEY_LENGTH} characters")
            keys.append(_Key(entry.name, _digest(secret), frozenset(entry.scopes)))
        return cls(keys)

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def check(self, authorization: str | None, scope: Scope | tuple[Scope, ...]) -> Decision:
        """Whether the `Authorization` value (`Bearer <key>`, or `Basic` with the key as the
        password, as browsers send it) carries a key with `scope` (a tuple: any of them)."""
        wanted = scope if isinstance(scope, tuple) else (scope,)
        if not self._keys:
            return Decision.ALLOWED
        presented = key_of(authorization)
        if presented is None:
            return Decision.UNAUTHENTICATED
        digest = _digest(presented)
        found: _Key | None = None
        for key in self._keys:  # every key compared, match or not
            if hmac.compare_digest(digest, key.digest):
                found = key
        if found is None:
            return Decision.UNAUTHENTICATED
        return Decision.ALLOWED if found.scopes.intersection(wanted) else Decision.FORBIDDEN


def key_of(authorization: str | None) -> str | None:
    """The key in an `Authorization` value: `Bearer <key>`, or `Basic base64(user:key)`."""
    if not authorization:
        return None
    kind, _, value = authorization.strip().partition(" ")
    value = value.strip()
    if kind.lower() == "bearer":
        return value or None
    if kind.lower() == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return decoded.partition(":")[2] or None
    return None


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8")).digest()
