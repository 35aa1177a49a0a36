"""The `probes:` config section: golden questions sent to the production app on a schedule.

```yaml
probes:
  - name: shop-bot-golden
    cases: cases.yaml            # a cases file (`ragpulse datasets load`'s format); null: the loaded cases
    every: 3600                  # seconds between runs (the first at start-up)
    request: {url: "https://shop.example.com/api/ask", method: POST, json: {question: "{question}"},
              headers: {Authorization: "Bearer ${SHOP_PROBE_TOKEN}"}, timeout: 30}
    concurrency: 4
    service: null                # service.name of ragpulse's client span (default: the probe's name)
    wait: 120                    # seconds to wait after the last request for the traces
```
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, field_validator, model_validator

from collector.config_base import Section

# Headers ragpulse sets on every probe request itself (the trace context); a config may not set them.
RESERVED_HEADERS = frozenset({"traceparent", "tracestate", "baggage"})


class ProbeRequest(Section):
    """The HTTP request sent for each case. `{question}` and `{case_id}` are replaced in the url
    (percent-encoded) and in the string values of `json` (recursively); `${VAR}` in header values is
    read from the environment when a run starts."""

    url: str = Field(min_length=1)
    method: Literal["GET", "POST", "PUT", "PATCH"] = "POST"
    json_body: Any = Field(None, alias="json")
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: float = Field(30.0, gt=0)

    @field_validator("method", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"an http:// or https:// URL, got {value!r}")
        if not parts.hostname:
            raise ValueError(f"a URL with a host, got {value!r}")
        return value

    @field_validator("headers")
    @classmethod
    def _not_reserved(cls, value: dict[str, str]) -> dict[str, str]:
        reserved = sorted(name for name in value if name.lower() in RESERVED_HEADERS)
        if reserved:
            raise ValueError(
                f"{', '.join(reserved)}: set by ragpulse on every probe request (the trace context)"
            )
        return value


class ProbeConfig(Section):
    """One probe: which questions, where to send them, how often."""

    name: str = Field(min_length=1, max_length=200)
    # A cases file (YAML or JSONL, `ragpulse datasets load`'s format), read at each run; None: the
    # cases loaded into the store.
    cases: str | None = Field(None, min_length=1)
    every: float = Field(3600.0, gt=0)
    request: ProbeRequest
    concurrency: int = Field(4, ge=1, le=256)
    # service.name of ragpulse's client span, the root of each probe trace (None: the probe's name).
    service: str | None = Field(None, min_length=1)
    # Seconds to wait, after the last request, for the traces to be assembled and scored.
    wait: float = Field(120.0, ge=0)

    @model_validator(mode="after")
    def _printable_name(self) -> Self:
        if any(not c.isprintable() for c in self.name):
            raise ValueError("name: printable characters only")
        return self

    @property
    def service_name(self) -> str:
        return self.service or self.name


def _unique_names(probes: list[ProbeConfig]) -> list[ProbeConfig]:
    names = [p.name for p in probes]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"probe names must be unique; repeated: {', '.join(repeated)}")
    return probes


# The `probes:` list of `Config`.
Probes = Annotated[list[ProbeConfig], AfterValidator(_unique_names)]
