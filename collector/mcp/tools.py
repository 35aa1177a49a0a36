"""What the MCP tools answer, over read-only SQL only: the same `rows(sql)` function the dashboard,
`ragpulse report` and `ragpulse check` run on (a database file opened read-only, the service's
store with the `sql:` limits of `/api/sql`, or a running server's `/api/sql`). Each tool returns a
JSON-ready dict; `collector/mcp/server.py` declares the tools' schemas and says each answer in a
line of text too.

A bad argument raises `BadArgument` naming it; the server turns it into a tool error."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from collector.config import Config
from collector.dashboard.data import BadParameter, UnknownSession, dashboard_data, scope_of, window_of
from collector.monitoring.check import CheckRequest, outcome_json, run_check
from collector.monitoring.gates import Gate, GateKind
from collector.monitoring.regression import Baseline, RegressionSettings
from collector.probes.report import UnknownRun
from collector.schema.tables import MEANINGS
from collector.schema.windows import parse_duration
from collector.store.reads import SqlRunner
from collector.store.reads.mcp import COLUMNS_SQL


class BadArgument(ValueError):
    """A tool argument that cannot be used; the message names it."""


@dataclass(frozen=True)
class Answer:
    """A tool's structured answer and the line of text said with it."""

    content: dict[str, Any]
    text: str


class Tools:
    """The tools' answers over `run` (read-only SQL within the `sql:` limits of `config`)."""

    def __init__(self, run: SqlRunner, config: Config) -> None:
        self._run = run
        self._config = config
        self._max_rows = config.sql.max_rows
        self._data = dashboard_data(self.rows, config)

    def rows(self, sql: str) -> list[dict[str, Any]]:
        """The rows of one of ragpulse's own reads (`collector.store.reads`)."""
        return self._run(sql, self._max_rows)[0]

    # ------------------------------------------------------------------ SQL

    def query_sql(self, query: str, max_rows: int | None = None) -> Answer:
        """One read-only query through the guard of `/api/sql`: its refusals, row cap, timeout."""
        if not query.strip():
            raise BadArgument("query: a SELECT statement")
        cap = self._max_rows if max_rows is None else min(max_rows, self._max_rows)
        if cap < 1:
            raise BadArgument("max_rows: at least 1")
        rows, truncated = self._run(query, cap)
        columns = list(rows[0]) if rows else []
        text = f"{len(rows)} row(s)"
        if truncated:
            text += f", cut at the row cap ({cap}): more rows match; narrow the query or aggregate"
        return Answer({"columns": columns, "rows": rows, "truncated": truncated}, text)

    def describe_tables(self) -> Answer:
        """Every table and view users query, with its columns and types and what a row is."""
        tables: dict[str, dict[str, Any]] = {}
        for row in self.rows(COLUMNS_SQL):
            name = row["table_name"]
            if name not in MEANINGS:  # a view or table of DuckDB's or an extension's, not ours
                continue
            table = tables.setdefault(name, {"name": name, "meaning": MEANINGS[name], "columns": []})
            table["columns"].append({"name": row["column_name"], "type": row["data_type"]})
        found = sorted(tables.values(), key=lambda t: list(MEANINGS).index(t["name"]))
        return Answer({"tables": found}, f"{len(found)} tables: " + ", ".join(t["name"] for t in found))

    # ------------------------------------------------------------------ traces

    def list_traces(self, filters: Mapping[str, Any]) -> Answer:
        """One page of traces, with the filters of `GET /api/traces`."""
        page = _parameters(self._data.traces, filters)
        shown, total = len(page["traces"]), page["total"]
        text = f"{shown} of {total} trace(s) from {page['window']['start']} to {page['window']['end']} UTC"
        return Answer(page, text)

    def get_trace(self, trace_id: str) -> Answer:
        """One trace: question, answer, steps, documents, and every score with its items, failing
        ones first, and its judge's provenance."""
        found = _parameters(lambda p: self._data.trace(p["trace_id"]), {"trace_id": trace_id})
        if found is None:
            raise BadArgument(f"trace_id: no assembled trace {trace_id.lower()}")
        trace = found["trace"]
        scores = [_score(s) for s in found["scores"]]
        failing = [s["name"] for s in scores if s["status"] in ("fail", "error")]
        content = {
            "trace_id": trace["trace_id"],
            "service": trace.get("service_name"),
            "start_time": trace.get("start_time"),
            "status": trace.get("status"),
            "question": trace.get("question"),
            "answer": trace.get("answer"),
            "trace": trace,
            "steps": found["steps"],
            "documents": found["documents"],
            "scores": scores,
        }
        text = f"trace {trace['trace_id']}: {len(scores)} score(s)"
        text += f", failing: {', '.join(failing)}" if failing else ", none failing"
        return Answer(content, text)

    # ------------------------------------------------------------------ sessions

    def list_sessions(self, filters: Mapping[str, Any]) -> Answer:
        """One page of sessions, with the filters of `GET /api/sessions` (worst first by default)."""
        page = _parameters(self._data.sessions, filters)
        shown, total = len(page["sessions"]), page["total"]
        window = page["window"]
        text = f"{shown} of {total} session(s) active from {window['start']} to {window['end']} UTC"
        failing = [s["session_id"] for s in page["sessions"] if s["failed_turns"]]
        if failing:
            text += f"; with failed turns: {', '.join(failing[:5])}" + (" ..." if len(failing) > 5 else "")
        return Answer(page, text)

    def get_session(self, session_id: str, service: str | None) -> Answer:
        """One session: its figures and its turns in order, each with its question, answer and scores."""
        try:
            found = _parameters(lambda p: self._data.session(session_id, p), {"service": service})
        except UnknownSession as exc:
            raise BadArgument(f"session_id: {exc}") from None
        session, turns = found["session"], found["turns"]
        failed = [t["turn"] for t in turns if any(s["ours"] and s["status"] == "fail" for s in t["scores"])]
        text = f"session {session['session_id']} ({session['service_name']}, {session['status']})"
        text += f": {len(turns)} turn(s)"
        text += f", failed: {', '.join(map(str, failed))}" if failed else ", none failed"
        return Answer(found, text)

    # ------------------------------------------------------------------ monitoring

    def check_quality(
        self,
        gates: Mapping[GateKind, Mapping[str, float] | float | None],
        window: Mapping[str, Any],
        by: str | None = None,
    ) -> Answer:
        """The gates of `ragpulse check` over a window: each with value, n, interval and verdict,
        and the overall `pass | fail | insufficient`."""
        parsed = [gate for kind, values in gates.items() for gate in _gates(kind, values)]
        if not parsed:
            raise BadArgument("min, min_pass_rate, max_error_rate: give at least one gate")
        request = self._request(window, by, parsed, baseline=None)
        outcome = run_check(self.rows, request)
        answer = outcome_json(outcome)
        return Answer(answer, f"{outcome.verdict}: " + _gate_summary(answer))

    def find_regressions(self, window: Mapping[str, Any], baseline: str | None, by: str | None) -> Answer:
        """The tests of `ragpulse check --regression`: each score against the same window
        `baseline` earlier (default: the window's own length)."""
        since = _window_seconds(window)
        shift = since if baseline is None else _duration("baseline", baseline)
        if shift < since:
            raise BadArgument("baseline: at least the window's length (the two windows must not overlap)")
        request = self._request(window, by, [], baseline=Baseline(shift=shift))
        outcome = run_check(self.rows, request)
        answer = outcome_json(outcome)
        comparisons = answer["regression"]["comparisons"]
        regressed = [
            f"{c['score']} ({c['service'] or 'all'})" for c in comparisons if c["status"] == "regressed"
        ]
        text = f"{outcome.verdict}: {len(comparisons)} comparison(s)"
        text += f", regressed: {', '.join(regressed)}" if regressed else ", none regressed"
        return Answer(answer, text)

    def list_alerts(self) -> Answer:
        """Alert states and their latest events."""
        found = self._data.alerts()
        firing = [a["alert"] for a in found["alerts"] if a.get("state") == "firing"]
        text = f"{len(found['alerts'])} alert state(s)"
        text += f", firing: {', '.join(firing)}" if firing else ", none firing"
        return Answer(found, text)

    def get_probe_run(self, run_id: str | None, probe: str | None) -> Answer:
        """A probe run case by case: `run_id`, or the latest run (of `probe` when given)."""
        params = {"probe": probe or ""}
        try:
            found = _parameters(lambda p: self._data.probe_run(run_id or "latest", p), params)
        except UnknownRun as exc:
            raise BadArgument(f"run_id: {exc}") from None
        run = found.get("run", found)
        text = f"probe run {run.get('run_id')} of {run.get('probe')}: {run.get('status')}"
        return Answer(found, text)

    def _request(
        self, window: Mapping[str, Any], by: str | None, gates: list[Gate], baseline: Baseline | None
    ) -> CheckRequest:
        monitoring = self._config.monitoring
        dimensions = [d.name for d in monitoring.dimensions]
        params = _strings(window)
        if by is not None and by not in dimensions:
            raise BadArgument(f"by: not a declared dimension ({', '.join(dimensions) or 'none declared'})")
        try:
            scope, span = scope_of(params, dimensions), window_of(params)
        except BadParameter as exc:
            raise BadArgument(str(exc)) from None
        return CheckRequest(
            gates=gates,
            window=span,
            scope=scope,
            min_samples=monitoring.min_samples,
            confidence=monitoring.confidence,
            by=by,
            baseline=baseline,
            regression=RegressionSettings(monitoring.alpha, monitoring.min_effect, monitoring.min_samples),
        )


def _parameters(answer: Callable[[dict[str, str]], Any], arguments: Mapping[str, Any]) -> Any:
    """Call one of the dashboard's answers with the arguments as its query parameters; a bad one
    is a `BadArgument` naming it."""
    try:
        return answer(_strings(arguments))
    except BadParameter as exc:
        raise BadArgument(str(exc)) from None


def _strings(arguments: Mapping[str, Any]) -> dict[str, str]:
    """Arguments as the query parameters the dashboard reads (None: not given)."""
    found = {}
    for name, value in arguments.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        found[name] = str(value)
    return found


def _window_seconds(window: Mapping[str, Any]) -> float:
    since = window.get("since")
    return 86400.0 if since is None else _duration("since", since)


def _duration(name: str, text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise BadArgument(f"{name}: {exc}") from None


def _gates(kind: GateKind, values: Mapping[str, float] | float | None) -> list[Gate]:
    """`{score: threshold}` (or, for the error rate, one threshold for every score together)."""
    if values is None:
        return []
    texts = [str(values)] if isinstance(values, int | float) else [f"{k}={v}" for k, v in values.items()]
    try:
        return [Gate.parse(kind, text) for text in texts]
    except ValueError as exc:
        raise BadArgument(f"{kind}: {exc}") from None


def _gate_summary(answer: Mapping[str, Any]) -> str:
    gates = answer.get("gates")
    if gates is None:  # by a dimension
        failing = answer.get("failing_slices") or []
        return f"{len(answer['slices'])} slice(s)" + (f", failing: {'; '.join(failing)}" if failing else "")
    return "; ".join(f"{g['gate']}: {g['status']} (n={g['n']})" for g in gates)


def _score(row: Mapping[str, Any]) -> dict[str, Any]:
    """A score as an agent reads it: its items failing first, its judge's provenance together."""
    items = row.get("items") or []
    items = sorted(items, key=lambda item: bool(item.get("ok")))  # stable: in order within each
    judge = None
    if row.get("judge_model") is not None:  # a judge was called (some judge scores are decided before)
        judge = {
            "provider": row.get("judge_provider"),
            "model": row.get("judge_model"),
            "prompt_version": row.get("prompt_version"),
            "config_hash": row.get("config_hash"),
            "input_tokens": row.get("judge_input_tokens"),
            "output_tokens": row.get("judge_output_tokens"),
        }
    return {
        "name": row["name"],
        "span_id": row.get("span_id"),
        "status": row.get("status"),
        "value": row.get("value"),
        "threshold": row.get("threshold"),
        "label": row.get("label"),
        "explanation": row.get("explanation"),
        "evaluator": row.get("evaluator"),
        "items": items,
        "judge": judge,
        "latency_ms": row.get("latency_ms"),
        "created_at": row.get("created_at"),
    }
