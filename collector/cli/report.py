"""`ragpulse report`: a self-contained HTML snapshot of a window (overview and worst traces)."""

from __future__ import annotations

from pathlib import Path

import click

from collector.cli.common import config_option, key_option, sql_runner, target, user_errors


@click.command()
@config_option
@key_option
@click.option("--db", type=click.Path(dir_okay=False), help="DuckDB file (default: store.path).")
@click.option("--server", help="URL of a running ragpulse (its HTTP port), e.g. http://127.0.0.1:4318.")
@click.option("--since", default="24h", show_default=True, help="Window length: 90s, 15m, 1h, 7d.")
@click.option("--until", help="Window end, ISO 8601 (default: now; times are UTC).")
@click.option("--service", help="Only this service (default: every service).")
@click.option(
    "--worst",
    type=click.IntRange(min=1, max=500),
    default=20,
    show_default=True,
    help="How many of the lowest-scored traces to include in full.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default="ragpulse-report.html",
    show_default=True,
    help="The HTML file to write.",
)
@click.pass_context
@user_errors
def report(
    ctx: click.Context,
    config_path: str | None,
    db: str | None,
    server: str | None,
    since: str,
    until: str | None,
    service: str | None,
    worst: int,
    out: Path,
) -> None:
    """Write the overview and the worst traces of a window as one HTML file that opens offline."""
    from collector.dashboard.data import BadParameter, dashboard_data
    from collector.dashboard.report import build_report, render_report

    config, url = target(ctx, config_path, server, db)
    params = {"since": since, "until": until or "", "service": service or ""}
    with sql_runner(config, url) as run:
        data = dashboard_data(lambda sql: run(sql, config.sql.max_rows)[0], config)
        source = f"server {url}" if url else f"database {config.store.path}"
        try:
            snapshot = build_report(data, params, worst, source)
        except BadParameter as exc:
            raise click.BadParameter(str(exc)) from None
    out.write_text(render_report(snapshot), encoding="utf-8")
    traces = snapshot["overview"]["totals"]["traces"]
    worst = len(snapshot["details"])
    click.echo(
        f"wrote {out}: {traces} traces, the {worst} worst {'trace' if worst == 1 else 'traces'} in full"
    )
