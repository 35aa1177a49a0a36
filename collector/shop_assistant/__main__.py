"""`python -m collector.shop_assistant --endpoint localhost:4317 --mode healthy --convention ragpulse`"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from collector.shop_assistant.app import CONVENTIONS, MODES
from collector.shop_assistant.knowledge import CASES_FILE, load_cases
from collector.shop_assistant.runner import run
from collector.shop_assistant.telemetry import PROTOCOLS


def main(argv: list[str] | None = None) -> int:
    """Send one trace per question of the case file; exit 1 when the collector did not take them all."""
    parser = argparse.ArgumentParser(prog="python -m collector.shop_assistant", description=__doc__)
    parser.add_argument("--endpoint", default="localhost:4317", help="OTLP endpoint (default %(default)s)")
    parser.add_argument("--protocol", choices=PROTOCOLS, default="grpc")
    parser.add_argument("--mode", choices=MODES, default="healthy")
    parser.add_argument("--convention", choices=CONVENTIONS, default="ragpulse")
    parser.add_argument("--cases", default=str(CASES_FILE), help="question set (default: the bundled cases)")
    parser.add_argument(
        "--labels", action="store_true", help="also put expected documents/answer on the root span"
    )
    parser.add_argument("--latency", type=float, default=1.0, help="scale of simulated latency (0: none)")
    parser.add_argument("--service-name", default="shop-assistant")
    parser.add_argument("--service-version", default="1.0", help="the service.version resource attribute")
    parser.add_argument("--timeout", type=float, default=10.0, help="export timeout in seconds")
    args = parser.parse_args(argv)

    try:
        cases = load_cases(Path(args.cases))
    except (OSError, KeyError, TypeError, ValueError) as exc:
        print(f"error: cannot read cases from {args.cases}: {exc}", file=sys.stderr)
        return 2
    report = run(
        args.endpoint,
        mode=args.mode,
        convention=args.convention,
        protocol=args.protocol,
        cases=cases,
        labels=args.labels,
        latency=args.latency,
        service_name=args.service_name,
        timeout=args.timeout,
        service_version=args.service_version,
    )
    for answer in report.answers:
        print(f"{answer.trace_id}  {answer.case_id or '-':<26} {answer.text[:80]}")
    print(
        f"{len(report.answers)} trace(s), mode={args.mode}, convention={args.convention}: "
        f"{report.spans_exported} span(s) acknowledged by {args.endpoint}, {report.spans_failed} failed"
    )
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
