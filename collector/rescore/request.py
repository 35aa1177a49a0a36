"""What a rescore is asked to do (`ragpulse rescore`'s options, `POST /api/rescore`'s body), checked
at the boundary, and the scope it resolves to when a run starts."""

from __future__ import annotations

from datetime import datetime, timedelta

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator

from collector.schema.windows import Window, parse_duration, parse_time, utc_now
from collector.store.base import RescoreScope


class RescoreRequest(BaseModel):
    """One rescore: the traces started in the window `since` before `until` (default now), of
    `service`, with the slice `slice` (`dimension=value`); the score names `evaluators` (default:
    every configured evaluator); the judge on `judge_rate` of the traces (default: the traces it
    judged before); `dry_run`: count and estimate, write nothing."""

    model_config = ConfigDict(extra="forbid")

    since: str = "7d"
    until: str | None = None
    service: str | None = None
    slice: str | None = None
    evaluators: list[str] = Field(default_factory=list)
    judge_rate: float | None = Field(None, ge=0.0, le=1.0)
    dry_run: bool = False

    @field_validator("since")
    @classmethod
    def _duration(cls, value: str) -> str:
        seconds = parse_duration(value)
        if seconds <= 0:
            raise ValueError("a duration such as 1h, 7d or 30d")
        try:
            utc_now() - timedelta(seconds=seconds)
        except OverflowError:
            raise ValueError(f"{value} reaches before the year 1") from None
        return value

    @field_validator("until")
    @classmethod
    def _time(cls, value: str | None) -> str | None:
        if value is not None:
            parse_time(value)
        return value

    @field_validator("slice")
    @classmethod
    def _slice(cls, value: str | None) -> str | None:
        if value is not None and ("=" not in value or not value.split("=", 1)[0].strip()):
            raise ValueError("dimension=value, e.g. tenant=acme")
        return value

    def identity(self) -> str:
        """The request as a run stores it (canonical JSON, without `dry_run`): a rerun of the same
        request goes on with the run it left unfinished."""
        fields = self.model_dump(exclude={"dry_run"})
        fields["evaluators"] = sorted(set(fields["evaluators"]))
        return orjson.dumps(fields, option=orjson.OPT_SORT_KEYS).decode()

    def scope(self, now: datetime | None = None) -> RescoreScope:
        """The traces this request names, its window resolved now (naive UTC)."""
        window = Window.ending(
            parse_time(self.until) if self.until else (now or utc_now()), parse_duration(self.since)
        )
        dimension = None
        if self.slice is not None:
            name, value = self.slice.split("=", 1)
            dimension = (name.strip(), value.strip())
        return RescoreScope(window.start, window.end, self.service, dimension)
