#!/usr/bin/env python3
"""Deterministic scoring benchmark: RagTraces scored per second by the full retrieval set.

The set is all six retrieval metrics (hit, recall, precision, mrr, ndcg, map) at k=5 and over the
whole list: 12 score records per trace, items and explanations included. Traces are built in memory
from the shop assistant's knowledge base ids (examples/shop_assistant/knowledge_base.yaml): one or
two retrieval steps of 3-8 documents (some ids repeated across steps, as hybrid retrievers do) and
1-3 expected ids taken from the golden cases or drawn at random. Building the traces is not timed;
only scoring is, in one thread (the figure is per core).

    .venv/bin/python bench/scoring.py                    # 20,000 traces
    .venv/bin/python bench/scoring.py --traces 50000 --repeat 5
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from evaluators.retrieval import METRICS, RetrievalEvaluator, make_retrieval_evaluator
from examples.shop_assistant.knowledge import load_cases, load_indexes
from semconv.models import Document, RagTrace, Step


def evaluator_set() -> list[RetrievalEvaluator]:
    """The full deterministic retrieval set; precision needs a `min`, the others use their defaults."""
    evaluators = []
    for metric in METRICS:
        for suffix in ("@5", ""):
            minimum = 0.2 if metric == "precision" else None
            evaluators.append(make_retrieval_evaluator(f"retrieval.{metric}{suffix}", minimum))
    return evaluators


def build_traces(n: int, seed: int) -> list[RagTrace]:
    rng = random.Random(seed)
    ids = [doc.id for docs in load_indexes().values() for doc in docs]
    cases = [list(case.expected_documents) for case in load_cases() if case.expected_documents]
    traces = []
    for i in range(n):
        steps = []
        for position in range(rng.choice((1, 1, 2))):
            picked = rng.sample(ids, rng.randint(3, 8))
            documents = [
                Document(rank=rank, id=doc_id, score=1.0 - rank / 10) for rank, doc_id in enumerate(picked, 1)
            ]
            steps.append(
                Step(
                    span_id=f"{i:x}-{position}",
                    kind="retrieval",
                    name="search",
                    position=position,
                    documents=documents,
                )
            )
        expected = rng.choice(cases) if rng.random() < 0.7 else rng.sample(ids, rng.randint(1, 3))
        traces.append(RagTrace(trace_id=f"{i:032x}", steps=steps, expected_documents=expected))
    return traces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--traces", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3, help="timed passes; the median is reported")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    evaluators = evaluator_set()
    traces = build_traces(args.traces, args.seed)
    statuses: dict[str, int] = {}
    for evaluator in evaluators:  # warm-up pass, also a sanity check of the statuses produced
        for trace in traces[:1000]:
            status = evaluator(trace).status
            statuses[status] = statuses.get(status, 0) + 1

    rates = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        for trace in traces:
            for evaluator in evaluators:
                evaluator(trace)
        rates.append(len(traces) / (time.perf_counter() - start))

    rate = statistics.median(rates)
    print(
        f"traces: {len(traces):,}, evaluators per trace: {len(evaluators)} "
        f"({', '.join(METRICS)}; @5 and whole list)"
    )
    print(f"warm-up statuses (first 1,000 traces): {dict(sorted(statuses.items()))}")
    print(f"passes: {', '.join(f'{r:,.0f}' for r in rates)} traces/s")
    print(
        f"deterministic retrieval set: {rate:,.0f} traces scored per second "
        f"({rate * len(evaluators):,.0f} scores/s)"
    )


if __name__ == "__main__":
    main()
