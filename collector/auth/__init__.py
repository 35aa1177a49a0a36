"""Who may do what: API keys with scopes, checked on every surface (OTLP/gRPC, OTLP/HTTP, the API
and the dashboard). See docs/security.md."""

from collector.auth.config import AuthConfig, KeyConfig, Scope
from collector.auth.keys import Decision, Keyring, KeyringError

__all__ = ["AuthConfig", "Decision", "KeyConfig", "Keyring", "KeyringError", "Scope"]
