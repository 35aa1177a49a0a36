"""`semconv.parallel_trees`: one call described by two instrumentation libraries is one step.

The end-to-end case (OpenInference and OpenLLMetry on one LangChain chain) is in
tests/frameworks/test_conventions_real.py; these are the rules, case by case and as properties.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from semconv.mapping import CONVENTION_ORDER
from semconv.models import Document, Step
from semconv.parallel_trees import TOLERANCE_US, _same_call, merge_parallel_duplicates

T0 = 1_796_331_400_000_000


def step(span_id: str, kind: str, convention: str, start: int = 0, end: int = 1_500, **fields: Any) -> Step:
    return Step(
        span_id=span_id,
        kind=kind,
        convention=convention,
        start_us=T0 + start,
        end_us=T0 + end,
        span_ids=[span_id],
        **fields,
    )


def merged(*steps: Step) -> list[Step]:
    return merge_parallel_duplicates(
        sorted(steps, key=lambda s: (s.start_us or 0, s.span_id)), CONVENTION_ORDER
    )


DOCS = [Document(rank=1, id="refunds", content="Refunds within 30 days.")]


def test_twins_become_the_richer_step_with_both_span_ids_and_the_others_fields() -> None:
    lean = step("a", "retrieval", "openllmetry", 0, 1_500, query="refund window?")
    rich = step("b", "retrieval", "openinference", 110, 1_540, query="refund window?", documents=DOCS)
    llm_a = step("c", "llm", "openllmetry", 5_000, 15_000, model="gpt-4o-mini", input_tokens=812)
    llm_b = step("d", "llm", "openinference", 5_100, 15_150, model="gpt-4o-mini", output="30 days.")
    out = merged(lean, rich, llm_a, llm_b)
    assert [(s.span_id, s.span_ids) for s in out] == [("b", ["b", "a"]), ("d", ["d", "c"])]
    assert out[0].documents == DOCS
    # Equally rich: the mapper's precedence picks OpenInference; the other's tokens fill the gap.
    assert (out[1].output, out[1].input_tokens) == ("30 days.", 812)


def test_what_is_not_the_same_call_stays() -> None:
    base = step("a", "retrieval", "openinference", query="refund window?")
    cases = [
        step("b", "retrieval", "openinference", 100, 1_600, query="refund window?"),  # one library: two calls
        step("b", "retrieval", "openllmetry", 100, 1_600, query="shipping?"),  # another query
        step("b", "retrieval", "openllmetry", TOLERANCE_US + 1, 2 * TOLERANCE_US),  # later
        step("b", "retrieval", "openllmetry", 0, 1_500 + TOLERANCE_US + 1),  # ends much later
        step("b", "llm", "openllmetry", 0, 1_500),  # another kind
    ]
    for other in cases:
        assert [s.span_id for s in merged(base, other)] == ["a", "b"], other


def test_chain_steps_are_never_merged() -> None:
    chains = [step("a", "chain", "openinference"), step("b", "chain", "openllmetry", 50, 1_520)]
    assert [s.span_id for s in merged(*chains)] == ["a", "b"]


def test_three_libraries_on_one_call_are_one_step() -> None:
    steps = [
        step("a", "llm", "genai", 0, 9_000, model="m"),
        step("b", "llm", "openllmetry", 40, 9_020, model="m"),
        step("c", "llm", "openinference", 90, 9_060, model="m"),
    ]
    out = merged(*steps)
    assert (
        len(out) == 1 and out[0].convention == "openinference" and sorted(out[0].span_ids) == ["a", "b", "c"]
    )


CONVENTIONS = ["openinference", "openllmetry", "genai"]
steps_strategy = st.lists(
    st.builds(
        lambda i, kind, convention, start, length, query: step(
            f"s{i}", kind, convention, start, start + length, query=query
        ),
        st.integers(0, 10**6),
        st.sampled_from(["llm", "retrieval", "chain"]),
        st.sampled_from(CONVENTIONS),
        st.integers(0, 20_000),
        st.integers(0, 10_000),
        st.sampled_from([None, "q1", "q2"]),
    ),
    max_size=12,
    unique_by=lambda s: s.span_id,
)


@settings(max_examples=200, deadline=None)
@given(steps_strategy)
def test_merging_loses_no_span_and_leaves_no_twins(steps: list[Step]) -> None:
    before = {span_id for s in steps for span_id in s.span_ids}
    out = merged(*(s.model_copy(deep=True) for s in steps))
    assert len(out) <= len(steps)
    assert {span_id for s in out for span_id in s.span_ids} == before
    assert sum(len(s.span_ids) for s in out) == len(before)  # every span in exactly one step
    assert sum(s.kind == "chain" for s in out) == sum(s.kind == "chain" for s in steps)
    # One pass is enough: no two steps left are one call. (Filling empty fields from a twin only
    # narrows what agrees, so it never makes a new pair.)
    for i, a in enumerate(out):
        for b in out[i + 1 :]:
            assert not _same_call(a, b), (a, b)
