#!/usr/bin/env python3
"""Redaction's CPU cost in the decoder: microseconds per span to decode the load generator's exports
with every redaction preset on, beside decoding them with redaction off, in one thread, no network.

Two loads: the standard one (no personal data) and `--pii` (every question names an email address,
the first document of every retrieval a phone number and a card number). The two ways alternate,
each timed `--repeat` times; the best of each is printed (the least disturbed by the machine).

    .venv/bin/python bench/redaction.py [--requests 5] [--repeat 15]
"""

from __future__ import annotations

import argparse
import timeit
from typing import Any

from load_generator import SPANS_PER_TRACE, build

from collector.otlp.batch import decode_request
from collector.processors.redaction import PRESETS, Redactor

TRACES_PER_REQUEST = 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=5, help="exports of 100 traces each")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    redactor = Redactor(PRESETS)
    spans = args.requests * TRACES_PER_REQUEST * SPANS_PER_TRACE
    for label, pii in (("standard load", False), ("personal data in every trace", True)):
        requests = [build(TRACES_PER_REQUEST, i, pii) for i in range(args.requests)]
        best_off, best_on = (
            min(timings) / spans * 1e6
            for timings in zip(*(time_both(requests, redactor) for _ in range(args.repeat)), strict=True)
        )
        print(
            f"{label}: decode {best_off:.2f} µs/span, with every preset {best_on:.2f} µs/span "
            f"(+{best_on - best_off:.2f})"
        )


def time_both(requests: list[Any], redactor: Redactor) -> tuple[float, float]:
    """Seconds to decode `requests` without redaction, then with `redactor`."""
    off = timeit.timeit(lambda: [decode_request(r) for r in requests], number=1)
    on = timeit.timeit(lambda: [decode_request(r, redactor=redactor) for r in requests], number=1)
    return off, on


if __name__ == "__main__":
    main()
