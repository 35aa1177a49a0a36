"""The soak's report (bench/soak.py): the summary's checks as (check, expected, observed, ok) rows and
the markdown table of them, with the judge bins and the scoring lag windows after it."""

from __future__ import annotations

import json
from typing import Any


def checks(summary: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    """(check, expected, observed, ok) rows of the report table."""
    rows: list[tuple[str, str, str, bool | None]] = []
    a = summary.get("analysis")
    svc = summary["service"]
    if a:
        sp, tr, ju, no = a["spans"], a["traces"], a["judge"], a["notifications"]
        rows.append(
            (
                "spans acked / stored",
                "every acked span stored",
                f"{sp['acked']:,} acked, {sp['acked_and_stored']:,} of them stored, {sp['lost']} lost "
                f"(offered {sp['offered']:,}; {sp['unacked_batches']} batches never acked)",
                sp["lost"] == 0,
            )
        )
        rows.append(
            (
                "duplicate span rows",
                "allowed (at-least-once)",
                f"{sp['duplicate_rows']:,}; stored but not acked {sp['stored_not_acked']:,}",
                None,
            )
        )
        not_assembled = ", ".join(
            f"acked at {k}: {v}" for k, v in tr["acked_not_assembled_by_ack_time_bin"].items()
        )
        rows.append(
            (
                "acked traces assembled",
                "all",
                f"{tr['acked'] - tr['acked_not_assembled']:,} of {tr['acked']:,}; "
                f"judge pending at end {tr['judge_pending_at_end']}"
                + (f"; never assembled, by ack time: {not_assembled}" if not_assembled else ""),
                tr["acked_not_assembled"] == 0,
            )
        )
        outages_ok = all(o["errors_in_outage_bins"] > 0 for o in ju["outages"])
        judge_rows = []
        judge_rows.append(
            (
                "judge errors during outages",
                "every outage has error scores",
                "; ".join(
                    f"{o['mode']} {o['outage_s'][0]:.0f}-{o['outage_s'][1]:.0f}s: "
                    f"{o['errors_in_outage_bins']} errors"
                    for o in ju["outages"]
                ),
                outages_ok,
            )
        )
        after_ok = all(
            o["first_clean_bin_after"]
            and o["first_clean_bin_after"]["error"] == 0
            and o["first_clean_bin_after"]["pass"] + o["first_clean_bin_after"]["fail"] > 0
            for o in ju["outages"]
        )
        judge_rows.append(
            (
                "judge back after outages",
                "pass/fail, no error in the first clean bin",
                "; ".join(f"{o['first_clean_bin_after']}" for o in ju["outages"]),
                after_ok,
            )
        )
        if ju["outages"]:
            rows += judge_rows
        rows.append(
            (
                "judge errors outside outages",
                "0",
                f"{ju['errors_in_clean_bins']} (bins of {ju['bin_seconds']:.0f} s, "
                f"grace {ju['grace_seconds']:.0f} s)",
                ju["errors_in_clean_bins"] == 0,
            )
        )
        rows.append(
            (
                "notifications lost",
                "0",
                f"{len(no['delivered_not_received'])} delivered-not-received of {no['delivered_in_table']} "
                f"delivered; {no['pending_in_table_at_end']} pending at end; "
                f"{no['received_distinct']} received",
                not no["delivered_not_received"] and not no["pending_in_table_at_end"],
            )
        )
        rows.append(
            (
                "notifications in order",
                "same order as the table; firing/resolved alternate",
                f"order {'same' if no['same_order_as_table'] else 'DIFFERENT'} "
                f"{json.dumps(no['order_mismatch']) if no['order_mismatch'] else ''}; "
                f"alternation broken for {list(no['alternation_broken']) or 'none'}; "
                f"received twice {len(no['received_twice'])}; unknown {len(no['received_not_in_table'])}",
                no["same_order_as_table"]
                and not no["alternation_broken"]
                and not no["received_not_in_table"],
            )
        )
        rows.append(
            (
                "notifications flowed",
                "several firing and resolved",
                f"{no['by_alert_state']}; refused attempts {no['refused_attempts']}",
                no["received_distinct"] >= 2,
            )
        )
        for series in a["rss"]["series"]:
            rows.append(
                (
                    f"RSS slope, {series['reason']}",
                    "flat",
                    f"{series['rss_slope_mib_per_hour']} MiB/h service "
                    f"({series['rss_mib_first_last']} MiB first/last, {series['samples']} samples, "
                    f"{series['from_s']}-{series['to_s']} s); with workers "
                    f"{series['service_plus_workers_slope_mib_per_hour']} MiB/h; without DuckDB's buffer "
                    f"pool {series['rss_without_duckdb_buffer_slope_mib_per_hour']} MiB/h (the pool "
                    f"{series['duckdb_buffer_mib_first_last']} MiB first/last)",
                    None,
                )
            )
        for kind in ("deterministic", "judge"):
            rows.append(
                (
                    f"scoring lag, {kind} (p50/p95 per window)",
                    "flat",
                    ", ".join(f"{w['start_s']:.0f}s: {w['p50_s']}/{w['p95_s']}" for w in a["lag"][kind]),
                    None,
                )
            )
    if a:
        tr = a["traces"]
        left = tr.get("failed_on_full_disk_left_for_restart")
        rows.append(
            (
                "traces received before the disk was freed but assembled only after the restart",
                "0 (assembled once the disk frees)",
                ("no disk fault before the kill" if left is None else f"{left:,}")
                + f"; in flight at the kill (received >15 s before it, recovered at the restart): "
                f"{tr['recovered_received_before_kill_minus_15s']:,}; recovery by received time: "
                + ", ".join(
                    f"{r['bin_start_s']:.0f}s: {r['traces']}" for r in tr["recovery_by_received_bin"]
                ),
                None if left is None else left == 0,
            )
        )
    kill = svc.get("kill")
    if kill:
        rows.append(
            (
                "SIGKILL restart",
                "ready again",
                f"restarted {kill.get('restarted')}, ready "
                f"{kill.get('restart_ready_s')} s after the kill; workers alive 2 s after the kill: "
                f"{kill.get('workers_alive_after_2s')}",
                kill.get("restarted"),
            )
        )
    rows.append(
        ("unexpected service exits", "0", str(len(svc["unexpected_exits"])), not svc["unexpected_exits"])
    )
    final = svc.get("final_stop") or {}
    rows.append(
        (
            "final SIGTERM",
            "exit 0",
            f"exit {final.get('exit_code')} in {final.get('stop_seconds')} s",
            final.get("exit_code") == 0,
        )
    )
    health = dict(summary.get("health") or {})
    transitions = health.pop("disk_transitions_s", None)
    if transitions:
        rows.append(
            (
                "disk full: /healthz/ready and store_writable",
                "503 / 0 while full, back after",
                json.dumps(transitions),
                None,
            )
        )
    cpu = summary.get("cpu") or {}
    if cpu:
        rows.append(
            (
                "CPU cores (service + workers; soak script)",
                "—",
                "; ".join(
                    f"pid {c['pid']}: {c['service_cores']} + {c['workers_cores']}" for c in cpu["service"]
                )
                + f"; script {cpu['soak_script_cores']}",
                None,
            )
        )
    for phase, entry in health.items():
        rows.append(
            (
                f"/healthz, /healthz/ready, store_writable ({phase})",
                "recorded",
                f"{entry['healthz']}; ready {entry['ready']}; writable {entry['store_writable']}",
                None,
            )
        )
    return rows


def markdown(summary: dict[str, Any]) -> str:
    """The report: the checks as a table, then the judge bins and the scoring lag."""
    lines = ["| check | expected | observed | ok |", "|---|---|---|---|"]
    for name, want, seen, ok in checks(summary):
        mark = "—" if ok is None else ("yes" if ok else "**NO**")
        lines.append(f"| {name} | {want} | {seen.replace('|', '/')} | {mark} |")
    a = summary.get("analysis")
    if a:
        lines += [
            "",
            f"Judge scores per {a['judge']['bin_seconds']:.0f} s bin (`scores.created_at`):",
            "",
            "| from s | kind | pass | fail | error | error labels |",
            "|---|---|---|---|---|---|",
        ]
        for b in a["judge"]["bins"]:
            lines.append(
                f"| {b['start_s']:.0f} | {b['kind']} | {b['pass']} | {b['fail']} | {b['error']} | "
                f"{b['error_labels'] or ''} |"
            )
        lines += [
            "",
            f"Scoring lag per {a['lag']['window_seconds']:.0f} s window (s): {a['lag']['columns']}",
            "",
            "| from s | deterministic traces | p50 | p95 | max | judged traces | p50 | p95 | max |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        judged = {w["window"]: w for w in a["lag"]["judge"]}
        for w in a["lag"]["deterministic"]:
            j = judged.get(w["window"], {})
            lines.append(
                f"| {w['start_s']:.0f} | {w['traces']} | {w['p50_s']} | {w['p95_s']} | {w['max_s']} | "
                f"{j.get('traces', '')} | {j.get('p50_s', '')} | {j.get('p95_s', '')} | "
                f"{j.get('max_s', '')} |"
            )
    return "\n".join(lines)
