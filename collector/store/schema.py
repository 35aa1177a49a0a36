"""Versioned schema migrations. Each entry runs once, in order, inside one transaction.

Append new migrations at the end; never edit one that has shipped (files in the field carry it).
"""

from __future__ import annotations

MIGRATIONS: list[tuple[int, str, str]] = [
    (
        1,
        "spans and span events",
        """
        CREATE TABLE spans (
            trace_id VARCHAR NOT NULL,
            span_id VARCHAR NOT NULL,
            parent_span_id VARCHAR,
            name VARCHAR,
            kind VARCHAR,
            service_name VARCHAR,
            start_time TIMESTAMP,
            end_time TIMESTAMP,
            duration_ms DOUBLE,
            status_code VARCHAR,
            status_message VARCHAR,
            attributes JSON,
            resource_attributes JSON,
            scope_name VARCHAR,
            scope_version VARCHAR,
            trace_state VARCHAR,
            links JSON,
            received_at TIMESTAMP
        );
        CREATE TABLE span_events (
            trace_id VARCHAR NOT NULL,
            span_id VARCHAR NOT NULL,
            time TIMESTAMP,
            name VARCHAR,
            attributes JSON,
            source VARCHAR
        );
        """,
    ),
]

LATEST_VERSION = MIGRATIONS[-1][0]
