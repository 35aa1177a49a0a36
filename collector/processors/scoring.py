"""Online scoring of mapped traces: sampling, the deterministic evaluators, and the rows they make.

Pure logic over `RagTrace`s and `Score`s, run in the mapping worker right after mapping (the
deterministic evaluators) and by the judge stage (the judge evaluators). For each scored trace it
builds, column-wise:

- `scores` rows, each under its evaluated span (`evaluated_span`);
- the write-back: when scores are exported over OTLP, one `gen_ai.evaluation.result` event per
  score as an `evaluation_outbox` row (`event_attributes`). In the store, the same events are
  read from `span_events` (`source = 'ragpulse'`), a view that makes them from `scores`.

Which evaluator runs where: with a judge configured, a score name that has a judge variant is
scored by the judge, on judge-sampled traces only (unless its entry says `judge: false`); every
other name is scored deterministically on every sampled trace. So a name is one method in one
deployment, and `score_aggregates` never mixes a lexical proxy with a judge's verdicts.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from collector.processors.config import SamplingConfig
from collector.processors.sampler import Decision, TraceFacts, decide
from collector.schema.tables import (
    EVALUATION_EVENT,
    EVALUATION_OUTBOX,
    MAX_EVENT_ITEMS,
    MAX_EVENT_TEXT,
    SCORES,
)
from collector.schema.windows import floor_minute_us
from collector.telemetry import Metrics
from evaluators.metric import Evaluates, Evaluator
from evaluators.registry import build_evaluators, entry_version, evaluates, uses_judge
from evaluators.scores import Score
from semconv import RagTrace, SpanRecord


@dataclass
class ScoringSetup:
    """What the scoring stage needs, picklable for the mapping worker: the sampling config, the
    evaluator entries run deterministically and those left to the judge, and whether evaluation
    events are exported over OTLP (then they also go to the outbox)."""

    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    deterministic_entries: list[dict[str, Any]] = field(default_factory=list)
    judge_entries: list[dict[str, Any]] = field(default_factory=list)
    export_events: bool = False

    @classmethod
    def from_entries(
        cls,
        entries: Sequence[Mapping[str, Any]] | None,
        sampling: SamplingConfig,
        judge_configured: bool,
        export_events: bool,
    ) -> ScoringSetup:
        from evaluators.registry import DEFAULT_ENTRIES

        listed = list(DEFAULT_ENTRIES if entries is None else entries)
        deterministic = [dict(e) for e in listed if not uses_judge(e, judge_configured)]
        judged = [dict(e) for e in listed if uses_judge(e, judge_configured)]
        return cls(sampling, deterministic, judged, export_events)

    def build(self) -> list[Evaluator]:
        return build_evaluators(self.deterministic_entries)

    def versions(self) -> dict[str, str]:
        """Score name -> `evaluator_version` of the deterministic evaluators (`entry_version`)."""
        return {str(e["name"]): entry_version(e) for e in self.deterministic_entries}


@dataclass
class ScoredTrace:
    """One trace's sampling decision and its deterministic scores."""

    trace: RagTrace
    decision: Decision
    scores: list[Score]

    @property
    def judge_status(self) -> str | None:
        return "pending" if self.decision.judge else None


def sample(
    trace: RagTrace, spans: Sequence[SpanRecord], config: SamplingConfig, probe: str | None = None
) -> Decision:
    """The sampling decision of a mapped trace (spans give the rules their attributes; `probe`: the
    probe that sent it, from its slices)."""
    facts = TraceFacts(
        trace_id=trace.trace_id,
        service_name=trace.service_name,
        status=trace.status,
        duration_ms=trace.duration_ms,
        attributes=[span.attributes for span in spans],
        applicable=trace.convention != "unknown" and trace.mapping_error is None,
        probe=probe,
    )
    return decide(facts, config)


def score_trace(
    trace: RagTrace,
    spans: Sequence[SpanRecord],
    setup: ScoringSetup,
    evaluators: Sequence[Evaluator],
    probe: str | None = None,
) -> ScoredTrace:
    """Sample one trace (a probe's always) and run the deterministic evaluators when it is sampled."""
    decision = sample(trace, spans, setup.sampling, probe)
    if decision.judge and not setup.judge_entries:
        decision = Decision("deterministic", decision.reason)
    scores = [evaluate(trace) for evaluate in evaluators] if decision.deterministic else []
    return ScoredTrace(trace, decision, scores)


def evaluated_span(trace: RagTrace, name: str) -> str:
    """The span a score is written back under: the retrieval span for retrieval and context scores,
    the LLM span that wrote the answer for faithfulness and citations, the root span for scores of
    the answer as a whole. Falls back to the root span, then to the first step's span."""
    return _span_for(trace, _evaluates(name))


def _evaluates(name: str) -> Evaluates:
    """What a score evaluates, as its metric declares (`evaluators/metrics/`): `retrieval`,
    `generation` or `answer` (its evaluated span follows; a name no metric has: `answer`)."""
    return evaluates(name)


def _span_for(trace: RagTrace, target: str) -> str:
    if target == "retrieval":
        reranks = trace.steps_of("rerank")
        step = reranks[-1] if reranks else next(iter(trace.steps_of("retrieval")), None)
        if step is not None:
            return step.span_id
    elif target == "generation":
        llms = trace.steps_of("llm")
        if llms:
            return llms[-1].span_id
    if trace.root_span_id:
        return trace.root_span_id
    return trace.steps[0].span_id if trace.steps else ""


@dataclass
class ScoreRows:
    """The rows one batch of scores adds: `scores` (whose write-back events `span_events` shows)
    and, when events are exported, `evaluation_outbox`."""

    scores: pa.Table
    outbox: pa.Table

    @classmethod
    def empty(cls) -> ScoreRows:
        return cls(SCORES.arrow_schema().empty_table(), EVALUATION_OUTBOX.arrow_schema().empty_table())


def score_rows(
    scored: Iterable[tuple[RagTrace, int, Sequence[Score]]],
    evaluator: str,
    now_us: int,
    export_events: bool,
    versions: Mapping[str, str] | None = None,
    rescore_run: str | None = None,
) -> ScoreRows:
    """Rows for the scores of many traces: `(trace, revision, scores)` each, `evaluator` being
    `deterministic` or `judge`. Times are `now_us` (µs since the epoch). Each row's
    `evaluator_version`: from `versions` (score name -> version: the deterministic evaluators'), else
    a judge score's `model@prompt_version`; `rescore_run`: the run that gave them (None: online)."""
    # Built column by column (a row dict per score cost more than the evaluators that made them).
    trace_ids: list[str] = []
    span_ids: list[str] = []
    services: list[str | None] = []
    buckets: list[int] = []
    revisions: list[int] = []
    items_json: list[str] = []
    attributes: list[str] = []
    flat: list[Score] = []
    for trace, revision, scores in scored:
        n = len(scores)
        if not n:
            continue
        trace_ids += [trace.trace_id] * n
        services += [trace.service_name] * n
        buckets += [floor_minute_us(trace.start_us if trace.start_us is not None else now_us)] * n
        revisions += [revision] * n
        spans = _EvaluatedSpans(trace)
        for score in scores:
            span_ids.append(spans.of(score.name))
            if score.items:
                items = _items(score)
                text = orjson.dumps(items).decode()
            else:  # most scores (ten of the thirteen defaults): no list to build or encode
                items, text = [], _NO_ITEMS
            items_json.append(text)
            if export_events:
                attributes.append(event_attributes(score, evaluator, revision, items, items_json=text))
        flat.extend(scores)
    n = len(flat)
    columns: dict[str, list[Any]] = {
        "trace_id": trace_ids,
        "span_id": span_ids,
        **_score_columns(flat),
        "items": items_json,
        "created_at": [now_us] * n,
        "service_name": services,
        "bucket": buckets,
        "evaluator": [evaluator] * n,
        "revision": revisions,
        "evaluator_version": [_version(score, versions) for score in flat],
        "rescore_run": [rescore_run] * n,
    }
    outbox = EVALUATION_OUTBOX.arrow_schema().empty_table()
    if export_events and n:
        outbox = EVALUATION_OUTBOX.arrow_table(
            {
                "trace_id": trace_ids,
                "span_id": span_ids,
                "attributes": attributes,
                "event_id": [secrets.token_hex(16) for _ in range(n)],
                "time": [now_us] * n,
                "name": [EVALUATION_EVENT] * n,
                "evaluator": [evaluator] * n,
                "revision": revisions,
                "created_at": [now_us] * n,
            },
            n,
        )
    return ScoreRows(scores=SCORES.arrow_table(columns, n), outbox=outbox)


def _version(score: Score, versions: Mapping[str, str] | None) -> str | None:
    if versions is not None and score.name in versions:
        return versions[score.name]
    return score.judge_version


# `scores` columns stored as the score has them: column -> Score field.
_SCORE_FIELDS = {
    "name": "name",
    "value": "value",
    "status": "status",
    "threshold": "threshold",
    "label": "label",
    "explanation": "explanation",
    "judge_provider": "provider",
    "judge_model": "model",
    "judge_temperature": "temperature",
    "prompt_version": "prompt_version",
    "config_hash": "config_hash",
    "judge_input_tokens": "judge_input_tokens",
    "judge_output_tokens": "judge_output_tokens",
    "latency_ms": "latency_ms",
}
# Read from the model's `__dict__` (where pydantic keeps field values): a dict lookup per field costs
# about half an attribute lookup on the model, and this runs for every score the service makes.
_score_fields = itemgetter(*_SCORE_FIELDS.values())


def _score_columns(scores: list[Score]) -> dict[str, list[Any]]:
    """The `_SCORE_FIELDS` columns of `scores`. Each score is read once, all its fields together:
    a pass over the scores per field took three times as long (every score was fetched 14 times)."""
    if not scores:
        return {column: [] for column in _SCORE_FIELDS}
    values = (_score_fields(vars(score)) for score in scores)
    return dict(zip(_SCORE_FIELDS, map(list, zip(*values, strict=True)), strict=True))


class _EvaluatedSpans:
    """`evaluated_span` for the scores of one trace: the span depends only on what a score evaluates
    (`_evaluates`), so each one's step lookup is done once per trace."""

    __slots__ = ("_by_kind", "_trace")

    def __init__(self, trace: RagTrace) -> None:
        self._trace = trace
        self._by_kind: dict[str, str] = {}

    def of(self, name: str) -> str:
        target = _evaluates(name)
        span_id = self._by_kind.get(target)
        if span_id is None:
            span_id = self._by_kind[target] = _span_for(self._trace, target)
        return span_id


_NO_ITEMS = "[]"


def _items(score: Score) -> list[dict[str, Any]]:
    return [{"text": i.text, "ok": i.ok, "evidence": i.evidence} for i in score.items]


def event_attributes(
    score: Score,
    evaluator: str,
    revision: int,
    items: list[dict[str, Any]],
    items_json: str | None = None,
) -> str:
    """The `gen_ai.evaluation.result` event of a score, as JSON attributes: the OpenTelemetry GenAI
    evaluation attributes plus `ragpulse.*` extras (status, threshold, judge, revision, and the
    first claims or documents behind the score, failing first). `items_json`, when given, is the
    JSON of `items` already made for the score row: reused when no item has to be cut."""
    attributes: dict[str, Any] = {
        "gen_ai.evaluation.name": score.name,
        "gen_ai.evaluation.score.label": score.label or score.status,
        "ragpulse.status": score.status,
        "ragpulse.evaluator": evaluator,
        "ragpulse.revision": revision,
    }
    if score.value is not None:
        attributes["gen_ai.evaluation.score.value"] = float(score.value)
    if score.explanation:
        attributes["gen_ai.evaluation.explanation"] = _clip(score.explanation)
    if score.status == "error":
        attributes["error.type"] = score.label or "error"
    if score.threshold is not None:
        attributes["ragpulse.threshold"] = float(score.threshold)
    if score.model:
        attributes["ragpulse.judge.model"] = score.model
    if score.prompt_version:
        attributes["ragpulse.prompt_version"] = score.prompt_version
    if items:
        if items_json is None or not _fits(items):
            shown = [
                {**item, "text": _clip(item["text"]), "evidence": _clip(item["evidence"])}
                for item in items[:MAX_EVENT_ITEMS]
            ]
            items_json = orjson.dumps(shown).decode()
        attributes["ragpulse.items"] = items_json
    return orjson.dumps(attributes).decode()


def _fits(items: list[dict[str, Any]]) -> bool:
    """Whether the event shows `items` as they are: no more than it keeps, no text it would cut."""
    if len(items) > MAX_EVENT_ITEMS:
        return False
    for item in items:
        text, evidence = item["text"], item["evidence"]
        if (text is not None and len(text) > MAX_EVENT_TEXT) or (
            evidence is not None and len(evidence) > MAX_EVENT_TEXT
        ):
            return False
    return True


def _clip(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_EVENT_TEXT:
        return text
    return text[: MAX_EVENT_TEXT - 1] + "…"


def record_metrics(
    metrics: Metrics,
    scores: pa.Table | None,
    evaluator: str,
    now_us: int,
    decisions: pa.Table | None = None,
    received_us: Sequence[int | None] = (),
) -> None:
    """Count stored scores by name and status, sampling decisions by decision and reason (a
    `traces` table), and observe the scoring lag of each scored trace (its last span received).

    A `judge` decision is not counted here: the judge stage counts it when the budget lets it
    stand, or counts `deterministic` with `throttled` / `over_budget` when not, so each trace's
    decision is counted once."""
    if scores is not None and scores.num_rows:
        # By each row's own evaluator: an assembly's rows hold the app's external scores too.
        grouped = scores.group_by(["name", "status", "evaluator"]).aggregate([("name", "count")])
        for row in grouped.to_pylist():
            metrics.scores.labels(row["name"], row["status"] or "none", row["evaluator"]).inc(
                row["name_count"]
            )
    if decisions is not None and decisions.num_rows:
        grouped = decisions.group_by(["sample_decision", "sample_reason"]).aggregate([("trace_id", "count")])
        for row in grouped.to_pylist():
            if row["sample_decision"] not in (None, "judge"):
                metrics.sampling_decisions.labels(row["sample_decision"], row["sample_reason"]).inc(
                    row["trace_id_count"]
                )
    lag = metrics.scoring_lag_seconds.labels(evaluator)
    for received in received_us:
        if received is not None:
            lag.observe(max(0.0, (now_us - received) / 1e6))


def scored_received_times(traces: pa.Table) -> list[int | None]:
    """`last_received_at` (µs) of the traces of a `traces` table that were scored in this round."""
    scored = traces.filter(pc.is_valid(traces["scored_at"]))
    received = pc.cast(pc.cast(scored["last_received_at"], pa.timestamp("us")), pa.int64())
    return received.to_pylist()
