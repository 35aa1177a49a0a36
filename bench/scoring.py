#!/usr/bin/env python3
"""Deterministic scoring benchmark: RagTraces scored per second by the full deterministic set.

The retrieval set is all six retrieval metrics (hit, recall, precision, mrr, ndcg, map) at k=5 and
over the whole list: 12 score records per trace, items and explanations included. Traces are built
in memory from the shop assistant's knowledge base (collector/shop_assistant/knowledge_base.yaml):
one or two retrieval steps of 3-8 documents (some ids repeated across steps, as hybrid retrievers
do) and 1-3 expected ids taken from the golden cases or drawn at random. Building the traces is not
timed; only scoring is, in one thread (the figure is per core).

`--text` adds the eight no-judge text evaluators (evaluators/metrics/: faithfulness, context_recall,
context_entity_recall, citation, context_precision, context_relevance, answer_correctness,
answer_relevance, with their defaults), 20 score records per trace. The traces then also carry the
documents' text, a golden question and expected answer, and an answer made of 1-3 sentences of the
retrieved documents, sometimes with `[id]` markers and sometimes with an invented sentence holding a
per-trace number (so no two answers are the same text). Word sets of a text are cached by text
(`evaluators.textutil`, LRU), as documents of one knowledge base repeat across traces in production
too; `--cold` clears those caches (and the text evaluators' per-trace context memo) before every
trace, the worst case. Within one trace the evaluators share work as they do in production (one
reading of the retrieved ids for the twelve retrieval scores, one context for the text scores), and
scores and items are built without re-validation (evaluators.scores).

    .venv/bin/python bench/scoring.py                    # 20,000 traces, retrieval set
    .venv/bin/python bench/scoring.py --text             # full deterministic set
    .venv/bin/python bench/scoring.py --text --cold      # ... with no tokenizing cache
    .venv/bin/python bench/scoring.py --traces 50000 --repeat 5
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

from collector.shop_assistant.knowledge import load_cases, load_indexes
from evaluators import lexical, textutil
from evaluators.metrics import all_metrics, answer_correctness
from evaluators.metrics.retrieval import RetrievalEvaluator, make_retrieval_evaluator
from evaluators.retrieval import METRICS
from evaluators.scores import Score
from semconv.models import Document, RagTrace, Step

CACHED = (
    textutil._CONTENT,
    textutil._words,
    textutil.stem,
    textutil.content_words,
    textutil.content_word_list,
    textutil.numbers,
    textutil.number_list,
    textutil._sentences,
    textutil.entities,
    textutil.entity_index,
    lexical._claims,
    lexical.read_doc,
    answer_correctness._token_counts,
    lexical._stripped,
    lexical.context_memo,
)
TEXT_METRICS = [metric for metric in all_metrics() if not metric.family]  # all but retrieval.*


def evaluator_set() -> list[RetrievalEvaluator]:
    """The full deterministic retrieval set; precision needs a `min`, the others use their defaults."""
    evaluators = []
    for metric in METRICS:
        for suffix in ("@5", ""):
            minimum = 0.2 if metric == "precision" else None
            evaluators.append(make_retrieval_evaluator(f"retrieval.{metric}{suffix}", minimum))
    return evaluators


def text_evaluator_set() -> list[Callable[[RagTrace], Score]]:
    """Every no-judge text evaluator with its defaults."""
    return [metric.deterministic(metric.name, None, {}) for metric in TEXT_METRICS]


def build_traces(n: int, seed: int, text: bool = False) -> list[RagTrace]:
    rng = random.Random(seed)
    contents = {doc.id: doc.content for docs in load_indexes().values() for doc in docs}
    ids = list(contents)
    golden = [case for case in load_cases() if case.expected_documents]
    cases = [list(case.expected_documents) for case in golden]
    traces = []
    for i in range(n):
        steps = []
        for position in range(rng.choice((1, 1, 2))):
            picked = rng.sample(ids, rng.randint(3, 8))
            documents = [
                Document(
                    rank=rank,
                    id=doc_id,
                    score=1.0 - rank / 10,
                    content=contents[doc_id] if text else None,
                )
                for rank, doc_id in enumerate(picked, 1)
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
        trace = RagTrace(trace_id=f"{i:032x}", steps=steps, expected_documents=expected)
        if text:
            case = rng.choice(golden)
            retrieved = [d for step in steps for d in step.documents]
            pool = [(d.id, s) for d in retrieved for s in textutil.sentences(d.content or "")]
            chosen = rng.sample(pool, min(len(pool), rng.randint(1, 3)))
            parts = [f"{s[:-1]} [{doc_id}]." if rng.random() < 0.3 else s for doc_id, s in chosen]
            if rng.random() < 0.3:
                parts.append(f"Order {i} ships free within {rng.randint(2, 90)} days.")
            trace.question = case.question
            trace.expected_answer = case.expected_answer
            trace.answer = " ".join(parts)
        traces.append(trace)
    return traces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--traces", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3, help="timed passes; the median is reported")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--text", action="store_true", help="add the no-judge text evaluators")
    parser.add_argument("--cold", action="store_true", help="clear the tokenizing caches before every trace")
    args = parser.parse_args()

    evaluators: list[Callable[[RagTrace], Score]] = list(evaluator_set())
    if args.text:
        evaluators += text_evaluator_set()
    traces = build_traces(args.traces, args.seed, text=args.text)
    statuses: dict[str, int] = {}
    for evaluator in evaluators:  # warm-up pass, also a sanity check of the statuses produced
        for trace in traces[:1000]:
            status = evaluator(trace).status
            statuses[status] = statuses.get(status, 0) + 1

    rates = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        for trace in traces:
            if args.cold:
                for cached in CACHED:
                    cached.clear() if isinstance(cached, dict) else cached.cache_clear()
            for evaluator in evaluators:
                evaluator(trace)
        rates.append(len(traces) / (time.perf_counter() - start))

    rate = statistics.median(rates)
    described = f"{', '.join(METRICS)}; @5 and whole list"
    if args.text:
        described += f"; text: {', '.join(metric.name for metric in TEXT_METRICS)}"
    print(f"traces: {len(traces):,}, evaluators per trace: {len(evaluators)} ({described})")
    print(f"warm-up statuses (first 1,000 traces): {dict(sorted(statuses.items()))}")
    print(f"passes: {', '.join(f'{r:,.0f}' for r in rates)} traces/s")
    label = "full deterministic set" if args.text else "deterministic retrieval set"
    if args.text and args.cold:
        label += " (cold caches)"
    print(f"{label}: {rate:,.0f} traces scored per second ({rate * len(evaluators):,.0f} scores/s)")


if __name__ == "__main__":
    main()
