"""The `ragpulse` command line (DESIGN section 3).

User mistakes (bad config, unreadable file, invalid SQL, server unreachable) end with one line on
stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import functools
import io
import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click
import httpx
import orjson
from rich.console import Console
from rich.table import Table

from collector.config import Config, ConfigError, load_config
from collector.datasets import Case, DatasetError, cases_table, read_cases, write_cases
from collector.replay import ReplayError, replay_to_server, replay_to_store
from collector.service import Service, running_server_url
from collector.sql import QueryError, run_query
from collector.store.duckdb_store import Store, StoreError, StoreLocked, connect
from evaluators.suite import SuiteError

F = TypeVar("F", bound=Callable[..., Any])
USER_ERRORS = (SuiteError, ConfigError, StoreError, QueryError, ReplayError, DatasetError, OSError)


def _user_errors(func: F) -> F:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except USER_ERRORS as exc:
            raise click.ClickException(str(exc)) from None

    return wrapper  # type: ignore[return-value]


def _config_option(func: F) -> F:
    """`--config` is accepted before or after the subcommand; the later one wins."""
    return click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False),
        default=None,
        expose_value=True,
        help="Config file (default: ./ragpulse.yaml when present).",
    )(func)


def _load(ctx: click.Context, config_path: str | None) -> Config:
    return load_config(config_path or ctx.obj.get("config_path"))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@_config_option
@click.pass_context
def main(ctx: click.Context, config_path: str | None) -> None:
    """ragpulse: OTLP in, RAG quality scores out, everything in DuckDB."""
    ctx.ensure_object(dict)
    ctx.obj["config_path"] = config_path


@main.command()
@_config_option
@click.option("--db", type=click.Path(dir_okay=False), help="DuckDB file (store.path).")
@click.option("--host", help="Address to listen on (receivers.host).")
@click.option("--grpc-port", type=int, help="OTLP/gRPC port (receivers.grpc_port, default 4317).")
@click.option("--http-port", type=int, help="OTLP/HTTP and API port (receivers.http_port, default 4318).")
@click.option("--forward-to", help="Also forward every received span to this OTLP endpoint.")
@click.pass_context
@_user_errors
def serve(
    ctx: click.Context,
    config_path: str | None,
    db: str | None,
    host: str | None,
    grpc_port: int | None,
    http_port: int | None,
    forward_to: str | None,
) -> None:
    """Run the service: OTLP receivers, the store and the API."""
    config = _load(ctx, config_path)
    try:
        if db:
            config.store.path = db
        if host:
            config.receivers.host = host
        if grpc_port is not None:
            config.receivers.grpc_port = grpc_port
        if http_port is not None:
            config.receivers.http_port = http_port
        if forward_to:
            config.exporters.otlp.endpoint = forward_to
            config.exporters.forward_spans = True
    except ValueError as exc:
        raise click.BadParameter(str(exc).splitlines()[-1]) from None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    service = Service(config)
    try:
        asyncio.run(service.run())
    except StoreLocked as exc:
        raise StoreError(f"{exc}; is another `ragpulse serve` running on it?") from None


@main.command()
@click.argument("query")
@_config_option
@click.option("--db", type=click.Path(dir_okay=False), help="DuckDB file (default: store.path).")
@click.option("--server", help="URL of a running ragpulse (its HTTP port), e.g. http://127.0.0.1:4318.")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    show_default=True,
)
@click.option(
    "--max-rows", type=click.IntRange(min=1), default=None, help="Row limit (default: sql.max_rows)."
)
@click.pass_context
@_user_errors
def sql(
    ctx: click.Context,
    query: str,
    config_path: str | None,
    db: str | None,
    server: str | None,
    output_format: str,
    max_rows: int | None,
) -> None:
    """Run one read-only SQL query: through the running server that holds the file, else on the file."""
    config = _load(ctx, config_path)
    limit = max_rows or config.sql.max_rows
    db_path = db or config.store.path
    url = server or running_server_url(db_path)
    if url:
        records, truncated = _query_server(url, query, limit)
    else:
        records, truncated = _query_file(db_path, query, limit, config.sql.timeout)
    _print_records(records, output_format)
    if truncated:
        click.echo(f"(stopped at {limit} rows; raise --max-rows or add LIMIT)", err=True)


def _query_server(url: str, query: str, max_rows: int) -> tuple[list[dict[str, Any]], bool]:
    try:
        response = httpx.post(
            url.rstrip("/") + "/api/sql", json={"query": query, "max_rows": max_rows}, timeout=120
        )
    except httpx.HTTPError as exc:
        raise QueryError(f"cannot reach ragpulse at {url}: {exc}") from None
    try:
        payload = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        raise QueryError(f"unexpected answer from {url} ({response.status_code})") from None
    if response.status_code != 200:
        raise QueryError(payload.get("error", response.text) if isinstance(payload, dict) else response.text)
    return payload, response.headers.get("x-ragpulse-truncated") == "true"


def _query_file(db_path: str, query: str, max_rows: int, timeout: float) -> tuple[list[dict[str, Any]], bool]:
    try:
        con = connect(db_path, read_only=True)
    except StoreLocked:
        raise StoreError(
            f"{db_path} is held by another process and no running ragpulse advertises it; pass --server URL"
        ) from None
    try:
        result = run_query(con, query, max_rows, timeout)
    finally:
        con.close()
    return result.records(), result.truncated


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return orjson.dumps(value).decode()
    return str(value)


def _print_records(records: list[dict[str, Any]], output_format: str) -> None:
    if output_format == "json":
        sys.stdout.write(orjson.dumps(records).decode() + "\n")
        return
    columns = list(records[0]) if records else []
    if output_format == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([_cell(r[c]) for c in columns] for r in records)
        sys.stdout.write(buffer.getvalue())
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(show_lines=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    for record in records:
        table.add_row(*(_cell(record[c]) for c in columns))
    console = Console()
    console.print(table)
    console.print(f"{len(records)} row(s)", style="dim")


def _target(
    ctx: click.Context, config_path: str | None, server: str | None, db: str | None
) -> tuple[Config, str | None]:
    """The config (with `--db` applied) and the URL of the server to go through, if any: `--server`,
    or the running server that holds the database file."""
    config = _load(ctx, config_path)
    if server and db:
        raise click.UsageError("give --server or --db, not both")
    if db:
        config.store.path = db
    return config, server or running_server_url(config.store.path)


@contextlib.contextmanager
def _writable(config: Config) -> Iterator[None]:
    """Opening the database for writing: a file held by another process is a one-line error."""
    try:
        yield
    except StoreLocked:
        raise StoreError(f"{config.store.path} is held by another process; pass --server URL") from None


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@_config_option
@click.option("--server", help="URL of a running ragpulse to send to (its HTTP port).")
@click.option("--db", type=click.Path(dir_okay=False), help="Write straight into this DuckDB file.")
@click.pass_context
@_user_errors
def replay(
    ctx: click.Context, files: tuple[Path, ...], config_path: str | None, server: str | None, db: str | None
) -> None:
    """Load captured OTLP traffic (.json, .jsonl, protobuf; optionally .gz)."""
    for path in files:
        if not path.is_file():
            raise ReplayError(f"no such file: {path}")
    config, url = _target(ctx, config_path, server, db)
    if url:
        report = replay_to_server(list(files), url)
        where = url
    else:
        with _writable(config):
            report = replay_to_store(list(files), config)
        where = config.store.path
    assembled = f", {report.traces} trace(s) assembled" if report.traces is not None else ""
    click.echo(
        f"replayed {report.requests} request(s) into {where}: "
        f"{report.accepted} span(s) stored, {report.rejected} rejected{assembled}"
    )
    for message in report.errors:
        click.echo(f"  rejected: {message}", err=True)


@main.group()
def datasets() -> None:
    """Golden cases: question -> expected document ids / expected answer."""


@datasets.command("load")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@_config_option
@click.option("--server", help="URL of a running ragpulse (its HTTP port).")
@click.option("--db", type=click.Path(dir_okay=False), help="DuckDB file (store.path).")
@click.pass_context
@_user_errors
def datasets_load(
    ctx: click.Context, file: Path, config_path: str | None, server: str | None, db: str | None
) -> None:
    """Load golden cases from YAML (`cases: [...]`) or JSONL; replaces cases with the same id.

    Traces match a case by `rag.case.id`, else by normalized question, when they are assembled.
    """
    cases = read_cases(file)
    config, url = _target(ctx, config_path, server, db)
    if url:
        _post_cases(url, cases, str(file))
        where = url
    else:
        with _writable(config):
            store = Store(config.store.path, config.store)
        try:
            cursor = store.read_cursor()
            write_cases(cursor, cases_table(cases, str(file)))
            cursor.close()
        finally:
            store.close()
        where = config.store.path
    click.echo(f"loaded {len(cases)} case(s) from {file} into {where}")


def _post_cases(url: str, cases: list[Case], source: str) -> None:
    body = {"source": source, "cases": [c.model_dump(by_alias=False) for c in cases]}
    try:
        response = httpx.post(f"{url.rstrip('/')}/api/cases", content=orjson.dumps(body), timeout=60)
    except httpx.HTTPError as exc:
        raise OSError(f"cannot reach ragpulse at {url}: {exc}") from None
    if response.status_code != 200:
        try:
            message = orjson.loads(response.content).get("error", response.text)
        except (orjson.JSONDecodeError, AttributeError):
            message = f"unexpected answer from {url} ({response.status_code})"
        raise DatasetError(message)


@main.command()
@_config_option
@click.option(
    "--db",
    type=click.Path(dir_okay=False, path_type=Path),
    default="ragpulse-demo.duckdb",
    show_default=True,
    help="Demo database file; a previous demo file there is replaced.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=30.0,
    show_default=True,
    help="Seconds to wait for the traces to be assembled.",
)
@click.pass_context
@_user_errors
def demo(ctx: click.Context, config_path: str | None, db: Path, timeout: float) -> None:
    """The guided first run: collector + example RAG app in three modes, a summary and SQL to try."""
    # Imported here: the demo pulls in the example app and the OTel SDK exporters.
    from collector.demo import DemoError, run_demo

    config = _load(ctx, config_path)
    try:
        run_demo(config, db, timeout=timeout)
    except DemoError as exc:
        raise click.ClickException(str(exc)) from None


@main.command("eval")
@click.argument("suite_file", metavar="SUITE", type=click.Path(dir_okay=False, path_type=Path))
@_config_option
@click.option(
    "--junit", "junit_path", type=click.Path(dir_okay=False, path_type=Path), help="Write JUnit XML here."
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the results as JSON here.",
)
@click.option(
    "--baseline",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A saved --json file; per-case, per-metric regressions against it are listed.",
)
@click.option(
    "--snapshot",
    "snapshot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Snapshot of each case's answer and retrieved ids; changed cases are listed (created if missing).",
)
@click.option("--update-snapshot", is_flag=True, help="Accept the current outputs into the --snapshot file.")
@click.option(
    "--min-similarity",
    type=click.FloatRange(0, 1),
    default=0.9,
    show_default=True,
    help="Snapshot answer similarity.",
)
@click.option(
    "--min-overlap",
    type=click.FloatRange(0, 1),
    default=0.8,
    show_default=True,
    help="Snapshot retrieval overlap.",
)
@click.option(
    "--embedding-model",
    help="Snapshot answer similarity by this embedding model's cosine (default: embeddings.model, "
    "else lexical).",
)
@click.pass_context
@_user_errors
def eval_suite(
    ctx: click.Context,
    suite_file: Path,
    config_path: str | None,
    junit_path: Path | None,
    json_path: Path | None,
    baseline: Path | None,
    snapshot_path: Path | None,
    update_snapshot: bool,
    min_similarity: float,
    min_overlap: float,
    embedding_model: str | None,
) -> None:
    """Score a suite of cases offline; exit 1 when any score fails or errors.

    Snapshot changes are listed for review and never fail the run.
    """
    from collector.replay import read_trace
    from evaluators.registry import build_evaluators
    from evaluators.suite import (
        compare,
        junit_xml,
        load_suite,
        openai_generator,
        read_baseline,
        results_json,
        run_suite,
    )

    config = _load(ctx, config_path)
    suite = load_suite(suite_file)
    previous = read_baseline(baseline) if baseline else None
    judge = _judge_client(config) if config.judge.model else None
    try:
        results = run_suite(
            suite,
            functools.partial(build_evaluators, judge=judge),
            load_trace=lambda path, trace_id: read_trace(suite_file.parent / path, trace_id),
            generate=openai_generator(suite.model) if suite.model else None,
            # Models are waited on, so cases go at once; deterministic scoring gains nothing.
            workers=config.judge.max_concurrency if judge or suite.model else 1,
        )
    except ValueError as exc:
        raise click.ClickException(f"{suite_file}: {exc}") from None
    finally:
        _close_judge(judge)
    if json_path:
        json_path.write_text(results_json(results), encoding="utf-8")
    if junit_path:
        junit_path.write_text(junit_xml(suite.name, results), encoding="utf-8")
    _print_eval_report(suite.name, results)
    if previous is not None:
        regressions = compare(results, previous)
        click.echo(f"\nagainst baseline {baseline}: {len(regressions)} regression(s)")
        for r in regressions:
            click.echo(f"  {r.case} / {r.name}: {r.reason}")
    if snapshot_path:
        embeddings = config.embeddings
        if embedding_model:
            embeddings = embeddings.model_copy(update={"model": embedding_model})
        _check_snapshot(results, snapshot_path, update_snapshot, min_similarity, min_overlap, embeddings)
    elif update_snapshot:
        raise click.UsageError("--update-snapshot needs --snapshot FILE")
    if any(result.failed for result in results):
        sys.exit(1)


def _judge_client(
    config: Config, model: str | None = None, *, persistent_cache: bool = True, **overrides: Any
) -> Any:
    """The configured judge (`judge:` keys, `model` overriding judge.model), after its pre-run check.

    With `persistent_cache` (the default) and `judge.verdict_store` set, the client keeps its verdicts
    in that DuckDB file (`DuckDBVerdictStore`), so a later run reuses them; `_close_judge` closes both.
    """
    from evaluators.judge import (
        DuckDBVerdictStore,
        JudgeCheckError,
        JudgeClient,
        JudgeSettings,
        VerdictStoreError,
    )

    # judge.verdict_store is wiring, not a client setting: the store is handed to the client.
    settings = JudgeSettings.model_validate(
        {**config.judge.model_dump(exclude={"verdict_store"}), **overrides}
    )
    if model:
        settings.model = model
    if not settings.model:
        raise click.ClickException("no judge model: set judge.model in the config or pass --judge MODEL")
    store = None
    if persistent_cache and config.judge.verdict_store:
        try:
            store = DuckDBVerdictStore(config.judge.verdict_store)
        except VerdictStoreError as exc:
            raise click.ClickException(f"judge.verdict_store: {exc}") from None
    client = JudgeClient(settings, store=store)
    try:
        client.check()
    except JudgeCheckError as exc:
        _close_judge(client)
        raise click.ClickException(str(exc)) from None
    return client


def _close_judge(judge: Any) -> None:
    """Close the judge client and, when it has one, its verdict store."""
    if judge is None:
        return
    try:
        judge.close()
    finally:
        if judge.store is not None:
            judge.store.close()


@main.command()
@click.argument("cases_file", metavar="CASES", type=click.Path(dir_okay=False, path_type=Path))
@_config_option
@click.option("--judge", "judge_model", help="Judge model (default: judge.model).")
@click.option("--base-url", help="Judge endpoint (default: judge.base_url, else OPENAI_BASE_URL).")
@click.option("--repeats", type=click.IntRange(1, 20), default=1, show_default=True, help="Runs per case.")
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Write the report as JSON."
)
@click.pass_context
@_user_errors
def calibrate(
    ctx: click.Context,
    cases_file: Path,
    config_path: str | None,
    judge_model: str | None,
    base_url: str | None,
    repeats: int,
    json_path: Path | None,
) -> None:
    """Measure the judge on cases with known verdicts: accuracy per evaluator and mode, false
    passes and fails, errors, disagreement across repeats, and robustness to prompt injection.

    Every run asks the judge: the in-memory cache is off (cache_size 0) and judge.verdict_store is
    not used either, so calibration measures the model, never verdicts remembered from earlier runs.
    """
    from evaluators.calibration import load_calibration, run_calibration, tag_counts
    from evaluators.registry import build_evaluator

    config = _load(ctx, config_path)
    calibration = load_calibration(cases_file)
    # Repeats must reach the judge: no in-memory cache and no persistent verdict store.
    overrides: dict[str, Any] = {"cache_size": 0}
    if base_url:
        overrides["base_url"] = base_url
    judge = _judge_client(config, judge_model, persistent_cache=False, **overrides)
    try:
        reports = run_calibration(
            calibration,
            functools.partial(build_evaluator, judge=judge),
            repeats=repeats,
            workers=judge.settings.max_concurrency,
        )
    finally:
        _close_judge(judge)
    tags = ", ".join(f"{tag} {n}" for tag, n in tag_counts(calibration).items())
    click.echo(
        f"{calibration.name}: {len(calibration.cases)} case(s) ({tags}); "
        f"judge {judge.model}, {repeats} run(s)"
    )
    table = Table(
        "evaluator",
        "mode",
        "runs",
        "accuracy",
        "false pass",
        "false fail",
        "errors",
        "timeouts",
        "disagree",
        "injection ok",
        "injection false pass",
    )
    for r in reports:
        if r.unavailable:
            table.add_row(r.evaluator, r.mode or "-", "-", "no judge", *["-"] * 7)
            continue
        accuracy = "-" if r.accuracy is None else f"{r.accuracy:.0%}"
        injection = "-" if r.injection_accuracy is None else f"{r.injection_correct}/{r.injection_runs}"
        table.add_row(
            r.evaluator,
            r.mode or "-",
            str(r.runs),
            accuracy,
            str(r.false_passes),
            str(r.false_fails),
            str(r.errors),
            str(r.timeouts),
            str(r.disagreements),
            injection,
            str(r.injection_false_passes),
        )
    Console(width=160).print(table)
    for r in reports:
        if r.false_pass_cases:
            click.echo(
                f"false passes, {r.evaluator} {r.mode or ''}: {', '.join(sorted(set(r.false_pass_cases)))}"
            )
    if json_path:
        report = {
            "name": calibration.name,
            "judge": judge.model,
            "repeats": repeats,
            "evaluators": [r.as_dict() for r in reports],
        }
        json_path.write_text(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode(), encoding="utf-8")


def _check_snapshot(
    results: list[Any],
    path: Path,
    update: bool,
    min_similarity: float,
    min_overlap: float,
    embeddings: Any,
) -> None:
    from evaluators.suite import (
        compare_snapshot,
        embedding_similarity,
        openai_embedder,
        read_snapshot,
        snapshot_of,
        write_snapshot,
    )

    current = snapshot_of(results)
    if update or not path.exists():
        write_snapshot(path, current)
        click.echo(f"\nsnapshot {path}: {'updated' if update else 'created'} with {len(current)} case(s)")
        return
    options: dict[str, Any] = {"min_similarity": min_similarity, "min_overlap": min_overlap}
    measure = "lexical"
    if embeddings.model:
        embed = openai_embedder(
            embeddings.model,
            base_url=embeddings.base_url,
            timeout=embeddings.timeout,
            dimensions=embeddings.dimensions,
        )
        options["similarity"] = embedding_similarity(embed)
        measure = f"embedding cosine, {embeddings.model}"
    changes = compare_snapshot(read_snapshot(path), current, **options)
    click.echo(
        f"\nagainst snapshot {path} (answer similarity: {measure}): {len(changes)} changed case(s) to review"
    )
    for change in changes:
        click.echo(f"  {change.case}: {change.reason}")


def _print_eval_report(suite_name: str, results: list[Any]) -> None:
    """Failures first, each failing score with its failing items as evidence; then a summary."""
    from evaluators.suite import score_line

    ordered = sorted(results, key=lambda r: not r.failed)
    for result in ordered:
        mark = "FAIL" if result.failed else "ok  "
        click.echo(f"{mark} {result.name}")
        if result.failed:
            for score in result.scores:
                if score.status in ("fail", "error"):
                    click.echo("     " + score_line(score).replace("\n", "\n     "))
    failed = sum(1 for r in results if r.failed)
    click.echo(f"\n{suite_name}: {len(results) - failed}/{len(results)} case(s) passed, {failed} failed")


if __name__ == "__main__":
    main()
