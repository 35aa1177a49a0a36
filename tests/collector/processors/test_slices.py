"""Slices (`monitoring.dimensions`): the pure parts (reading a trace's values, the cap on a
dimension's values, scopes as SQL), then a real service fed by the OpenTelemetry SDK whose traces,
scores and aggregates carry the dimensions, `ragpulse check --by` over its file, alerts that fire
per slice, and the dashboard API split by a dimension."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
import yaml
from opentelemetry.sdk.trace import TracerProvider
from pydantic import ValidationError

from collector.config import Config
from collector.monitoring.alerts import observe
from collector.monitoring.config import AlertRule, MonitoringConfig
from collector.processors.slices import Dimension, DimensionCap, trace_slices
from collector.schema.scope import Scope, parse_slices
from collector.schema.trace_rows import OTHER
from collector.schema.windows import utc_now
from collector.service import BackgroundService, Service
from collector.store.duckdb_store import DuckDBStore
from collector.store.reads.predicates import scope_sql
from semconv import SpanRecord
from tests.support.helpers import (
    emit_topic_request,
    fast_assembler,
    make_config,
    run_ragpulse,
    seed_scores,
    sql,
    versioned_provider,
    wait_for,
)

# ------------------------------------------------------------------------------------ pure parts


def _span(span_id: str, parent: str | None = None, **attributes: Any) -> SpanRecord:
    return SpanRecord(trace_id="t" * 32, span_id=span_id, parent_span_id=parent, attributes=attributes)


def test_a_trace_takes_the_root_spans_value_first_then_any_span_and_resources_by_span() -> None:
    spans = [
        _span("child", "root", **{"rag.category": "shipping", "rag.probe": "golden"}),
        _span("root", None, **{"rag.category": "refunds", "rag.probe.run": "run-1"}),
    ]
    dimensions = [
        Dimension("category", attribute="rag.category"),
        Dimension("tier", attribute="rag.tier"),
        Dimension("version", resource="service.version"),
    ]
    found = trace_slices("root", spans, dimensions, {"child": {"service.version": "1.4"}})
    assert found.values == {"category": "refunds", "tier": None, "version": "1.4"}
    assert (found.probe, found.probe_run) == ("golden", "run-1")
    numbers = trace_slices(
        "root",
        [_span("root", None, **{"rag.tier": 2, "rag.flag": True})],
        [
            Dimension("tier", attribute="rag.tier"),
            Dimension("flag", attribute="rag.flag"),
        ],
    )
    assert numbers.values == {"tier": "2", "flag": "true"}


def test_the_cap_admits_values_while_there_is_room_and_reranks_by_traffic() -> None:
    cap = DimensionCap(max_values=2, rerank_every=60, now=0.0, kept=["refunds"])
    first = cap.apply(pa.array(["refunds", "shipping", "account", None, "account"]), now=1.0)
    assert first.to_pylist() == ["refunds", "shipping", OTHER, None, OTHER]
    # A minute of traffic where `account` dominates: it takes the place of the least frequent.
    cap.apply(pa.array(["account"] * 50 + ["refunds"] * 10 + ["shipping"] * 2), now=30.0)
    ranked = cap.apply(pa.array(["account", "shipping", "refunds"]), now=61.0)
    assert ranked.to_pylist() == ["account", OTHER, "refunds"]
    assert cap.kept == {"account", "refunds"}


def test_scopes_keep_probe_traffic_apart_and_quote_dimensions() -> None:
    assert scope_sql(Scope()) == "probe IS NULL"
    scope = Scope.of("shop-bot", "golden", parse_slices(["category=refunds", "version=(none)"]))
    assert scope_sql(scope, "a") == (
        "a.probe = 'golden' AND a.service_name = 'shop-bot' AND a.\"category\" = 'refunds' "
        'AND a."version" IS NULL'
    )
    assert scope.slice_label == "category=refunds, version=(none)"
    assert scope_sql(Scope().with_slice("category", "it's")) == "probe IS NULL AND \"category\" = 'it''s'"
    with pytest.raises(ValueError, match="not a dimension name"):
        parse_slices(['cat" OR 1=1 --=x'])
    with pytest.raises(ValueError, match="DIMENSION=VALUE"):
        parse_slices(["category"])


def test_the_config_refuses_bad_dimensions_and_alerts_on_undeclared_ones() -> None:
    with pytest.raises(ValidationError, match="exactly one of attribute or resource"):
        MonitoringConfig.model_validate({"dimensions": [{"name": "category"}]})
    with pytest.raises(ValidationError, match="already a column"):
        MonitoringConfig.model_validate({"dimensions": [{"name": "status", "attribute": "x"}]})
    with pytest.raises(ValidationError, match=r"dimensions\.0\.name"):
        Config.model_validate({"monitoring": {"dimensions": [{"name": "Bad-Name", "attribute": "x"}]}})
    with pytest.raises(ValidationError, match="undeclared dimension"):
        MonitoringConfig.model_validate(
            {"alerts": [{"name": "a", "score": "faithfulness", "min": 0.5, "by": "category"}]}
        )
    with pytest.raises(ValidationError, match="needs probe"):
        AlertRule.model_validate({"name": "a", "max_missing_traces": 0})


# ------------------------------------------------------------------------------ a real service

QUESTIONS = {
    "refunds": "How long do I have to return an item?",
    "shipping": "How long does shipping take?",
    "account": "How do I reset my password?",
    "billing": "Why was I charged twice?",
}
DIMENSIONS = [
    {"name": "category", "attribute": "rag.category", "max_values": 3},
    {"name": "version", "resource": "service.version"},
]


def _send(provider: TracerProvider, category: str, right: bool) -> str:
    """A request of the category whose retrieval finds the expected document (`right`) or not."""
    return emit_topic_request(provider.get_tracer("shop"), QUESTIONS[category], category, category, right)


@pytest.fixture(scope="module")
def sliced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, dict[str, list[str]]]]:
    """A service with two dimensions, fed: refunds (right documents), shipping (wrong ones), account
    (right), then billing, past the cap of 3 values; versions 1.4 and 1.5."""
    tmp_path = tmp_path_factory.mktemp("slices")
    config = make_config(
        tmp_path,
        assembler=fast_assembler(),
        monitoring={
            "dimensions": DIMENSIONS,
            "min_samples": 3,
            "alerts": [
                {"name": "hit-by-category", "score": "retrieval.hit@5", "min": 0.5, "by": "category"},
                {
                    "name": "refunds-hit",
                    "score": "retrieval.hit@5",
                    "min": 0.5,
                    "slice": {"category": "refunds"},
                },
            ],
            "evaluate_every": 3600,
        },
    )
    sent: dict[str, list[str]] = {}
    with BackgroundService(config) as svc:
        old, new = versioned_provider(svc, "1.4"), versioned_provider(svc, "1.5")
        for category, right in (("refunds", True), ("shipping", False), ("account", True)):
            for i in range(4):
                sent.setdefault(category, []).append(_send(old if i % 2 else new, category, right))
        # A fourth value, past `max_values: 3`: counted as `other`.
        sent["billing"] = [_send(new, "billing", True) for _ in range(2)]
        old.shutdown()
        new.shutdown()
        every = [t for ids in sent.values() for t in ids]
        wait_for(
            lambda: sql(svc, "SELECT count(DISTINCT trace_id) AS n FROM scores")[0]["n"],
            lambda n: n == len(every),
            timeout=60,
            what="every trace scored",
        )
        yield svc, sent


def test_traces_scores_and_aggregates_carry_the_dimensions(
    sliced: tuple[Service, dict[str, list[str]]],
) -> None:
    svc, sent = sliced
    traces = sql(svc, "SELECT trace_id, category, version FROM traces")
    by_id = {r["trace_id"]: (r["category"], r["version"]) for r in traces}
    assert {by_id[t][0] for t in sent["refunds"]} == {"refunds"}
    assert {by_id[t][0] for t in sent["billing"]} == {OTHER}
    assert {by_id[t][1] for t in sent["shipping"]} == {"1.4", "1.5"}
    # Each score row has its trace's slice, and the aggregates sum to the scores, slice by slice.
    mismatched = sql(
        svc,
        "SELECT count(*) AS n FROM scores s JOIN traces t USING (trace_id) "
        "WHERE s.category IS DISTINCT FROM t.category OR s.version IS DISTINCT FROM t.version",
    )
    assert mismatched[0]["n"] == 0
    aggregates = sql(
        svc,
        "SELECT category, version, sum(n) AS n, sum(n_pass) AS n_pass FROM score_aggregates "
        "WHERE name = 'retrieval.hit@5' GROUP BY ALL ORDER BY ALL",
    )
    counted = sql(
        svc,
        "SELECT category, version, count(*) AS n, count(*) FILTER (status = 'pass') AS n_pass FROM scores "
        "WHERE name = 'retrieval.hit@5' GROUP BY ALL ORDER BY ALL",
    )
    assert aggregates == counted
    assert {(r["category"], r["n_pass"]) for r in aggregates if r["version"] == "1.5"} == {
        ("refunds", 2),
        ("shipping", 0),
        ("account", 2),
        (OTHER, 2),
    }


def _check(svc: Service, cwd: Path, *args: str) -> tuple[int, dict[str, Any]]:
    result = run_ragpulse("check", "--server", svc.http_url, "--json", "--min-samples", "2", *args, cwd=cwd)
    return result.returncode, yaml.safe_load(result.stdout)


def test_check_by_a_dimension_gates_every_slice_and_names_the_failing_one(
    sliced: tuple[Service, dict[str, list[str]]], tmp_path: Path
) -> None:
    svc, _ = sliced
    code, report = _check(svc, tmp_path, "--by", "category", "--min", "retrieval.hit@5=0.5")
    assert code == 1
    assert report["failing_slices"] == ["category=shipping"]
    assert {s["slice"]: s["gates"][0]["status"] for s in report["slices"]} == {
        "category=refunds": "pass",
        "category=shipping": "fail",
        "category=account": "pass",
        f"category={OTHER}": "pass",
    }
    code, report = _check(
        svc, tmp_path, "--slice", "category=refunds", "--by", "version", "--min", "retrieval.hit@5=0.5"
    )
    assert code == 0
    assert [s["gates"][0]["n"] for s in report["slices"]] == [2, 2]
    code, report = _check(svc, tmp_path, "--probe", "golden", "--min", "retrieval.hit@5=0.5")
    assert code == 2  # no probe traffic: too little data, not a pass
    table = run_ragpulse(
        *("check", "--server", svc.http_url, "--min-samples", "2", "--by", "category"),
        *("--min", "retrieval.hit@5=0.5"),
        cwd=tmp_path,
    )
    assert table.returncode == 1
    assert "failing slices: category=shipping" in table.stdout
    bad = run_ragpulse(
        "check", "--server", svc.http_url, "--by", "Bad Name", "--min", "retrieval.hit@5=0.5", cwd=tmp_path
    )
    assert bad.returncode == 1 and "not a dimension name" in bad.stderr


def test_alerts_fire_per_slice_and_on_a_named_slice(sliced: tuple[Service, dict[str, list[str]]]) -> None:
    svc, _ = sliced
    assert svc.alert_evaluator is not None
    svc.alert_evaluator.evaluate_once()
    rows = sql(svc, "SELECT alert, slice, state FROM alerts ORDER BY alert, slice")
    assert {(r["alert"], r["slice"], r["state"]) for r in rows} == {
        # `other` has 2 scores, under monitoring.min_samples (3): no state, neither ok nor firing.
        ("hit-by-category", "category=account", "ok"),
        ("hit-by-category", "category=refunds", "ok"),
        ("hit-by-category", "category=shipping", "firing"),
        ("refunds-hit", None, "ok"),
    }
    events = sql(svc, "SELECT alert, slice, message FROM alert_events WHERE state = 'firing'")
    assert [(e["alert"], e["slice"]) for e in events] == [("hit-by-category", "category=shipping")]
    assert "slice category=shipping" in events[0]["message"]
    # A second round changes nothing: the same slices, the same states, no new event.
    svc.alert_evaluator.evaluate_once()
    assert sql(svc, "SELECT count(*) AS n FROM alert_events")[0]["n"] == 1


def test_an_alert_rule_observes_only_its_slice(sliced: tuple[Service, dict[str, list[str]]]) -> None:
    svc, _ = sliced
    rule = AlertRule.model_validate(
        {
            "name": "x",
            "score": "retrieval.hit@5",
            "min": 0.5,
            "slice": {"category": "shipping"},
            "min_samples": 2,
        }
    )

    def query(text: str) -> list[dict[str, Any]]:
        return sql(svc, text)

    (seen,) = observe(rule, query, utc_now(), MonitoringConfig())
    assert (seen.status, seen.value, seen.n) == ("firing", 0.0, 4)


def test_the_dashboard_api_filters_and_splits_by_a_dimension(
    sliced: tuple[Service, dict[str, list[str]]],
) -> None:
    svc, _ = sliced
    overview = httpx.get(f"{svc.http_url}/api/overview", params={"by": "category"}).json()
    assert set(overview["dimensions"]) == {"category", "version"}
    assert overview["dimensions"]["category"] == ["account", "refunds", "shipping", OTHER]
    hits = {r["slice"]: r["mean"] for r in overview["slice_scores"] if r["name"] == "retrieval.hit@5"}
    assert hits == {"refunds": 1.0, "shipping": 0.0, "account": 1.0, OTHER: 1.0}
    assert {r["slice"] for r in overview["slice_series"]} == set(hits)
    refunds = httpx.get(f"{svc.http_url}/api/overview", params={"slice": "category=shipping"}).json()
    assert refunds["totals"]["traces"] == 4
    assert {r["name"]: r["mean"] for r in refunds["scores"]}["retrieval.hit@5"] == 0.0
    page = httpx.get(f"{svc.http_url}/api/traces", params={"slice": "version=1.4"}).json()
    assert len(page["traces"]) == 6
    bad = httpx.get(f"{svc.http_url}/api/overview", params={"by": "colour"})
    assert bad.status_code == 400 and "not a declared dimension" in bad.text


def test_the_store_ranks_a_dimensions_values_for_the_cap_after_a_restart(
    sliced: tuple[Service, dict[str, list[str]]],
) -> None:
    svc, _ = sliced
    assert svc.store is not None
    assert svc.store.dimensions == ("category", "version")
    # Equal traffic: ties by name; `other` is never a value to keep.
    assert svc.store.top_dimension_values("category", 10) == ["account", "refunds", "shipping"]
    assert svc.store.top_dimension_values("category", 2) == ["account", "refunds"]
    assert svc.store.top_dimension_values("colour", 2) == []


def test_check_by_a_dimension_finds_the_regression_of_one_slice(tmp_path: Path) -> None:
    """Faithfulness held in both categories yesterday; today it fell in `shipping` only: the
    regression is found in that slice, and only there."""
    db = tmp_path / "sliced.duckdb"
    now = utc_now().replace(tzinfo=None)
    rows: list[tuple[datetime, str, float]] = []
    for days in (1, 0):
        for i in range(40):
            moment = now - timedelta(days=days, minutes=1 + i % 30)
            rows += [(moment, "refunds", 1.0), (moment, "shipping", 1.0 if days else 0.0)]
    with DuckDBStore(db) as store:
        store.add_dimensions(["category"])
        seed_scores(
            store,
            [r[0] for r in rows],
            ["faithfulness"] * len(rows),
            [r[2] for r in rows],
            trace_ids=[f"{i:032x}" for i in range(len(rows))],
            slices={"category": [r[1] for r in rows]},
        )
    result = run_ragpulse(
        "check", "--db", str(db), "--since", "1h", "--regression", "--by", "category", "--json", cwd=tmp_path
    )
    assert result.returncode == 1, result.stdout + result.stderr
    comparisons = json.loads(result.stdout)["regression"]["comparisons"]
    assert {c["slice"] for c in comparisons} == {"category=refunds", "category=shipping"}
    regressed = {(c["slice"], c["metric"]) for c in comparisons if c["status"] == "regressed"}
    assert regressed == {("category=shipping", "mean"), ("category=shipping", "pass_rate")}
    table = run_ragpulse(
        "check", "--db", str(db), "--since", "1h", "--regression", "--by", "category", cwd=tmp_path
    )
    assert table.returncode == 1 and "category=shipping" in table.stdout
