"""Offline evaluation suites for `ragpulse eval SUITE` (docs/scores.md, "Suites and calibration").

A suite is a YAML file in the seed-style format:

    name: refunds
    evaluators:                       # every case, unless the case lists its own
      - {name: retrieval.recall@5, min: 0.8}
      - {name: faithfulness}
    cases:
      - name: refund-window
        question: How long do I have to return an item?
        contexts:                     # the retrieved documents, in rank order
          - {id: returns-policy, text: "Items can be returned within 30 days.", score: 0.91}
        expected: You have 30 days.   # the reference answer (optional)
        expected_documents: [returns-policy]
        answer: You can return items within 30 days.

Each case becomes a `RagTrace` (one retrieval step holding the contexts, one LLM step holding the
answer) and every evaluator scores it, exactly as online. One difference (docs/scores.md, "Statuses and
reason codes"): a suite case *promises* its reference, so an evaluator that finds none (`no_expected_ids`,
`no_reference`) is an `error` here, where online it is `skipped`.

Results are plain data (`CaseResult`): `--json` writes `[{name, scores: [score records]}]`, JUnit XML
has one `<testcase>` per case (a `<failure>` when a score failed, an `<error>` when one errored), and
`compare` flags per-case, per-metric regressions against a saved `--json` file.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Self, TypeVar
from xml.etree import ElementTree

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from semconv.models import ConversationTurn, Document, RagTrace, Step

from .embeddings import Embed
from .parallel import map_in_order
from .scores import Score
from .textutil import unicode_words

# Skip reasons that mean "no reference" (or no retrieval to score): an error in a suite, whose cases
# promise one.
MISSING_REFERENCE = frozenset({"no_expected_ids", "no_reference", "no_retrieval"})
# A value drop smaller than this is float noise, not a regression.
REGRESSION_TOLERANCE = 1e-9


class SuiteError(ValueError):
    """A suite file that cannot be read; the message names the file and the key."""


class SuiteTurn(BaseModel):
    """An earlier turn of a case's conversation."""

    model_config = ConfigDict(extra="forbid")

    question: str | None = None
    answer: str | None = None


class SuiteContext(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    text: str
    score: float | None = None


class GenerationModel(BaseModel):
    """`model:`: generate each case's answer from its question and contexts (fixed-context test)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    base_url: str | None = None  # None: OPENAI_BASE_URL, else the OpenAI API
    temperature: float = Field(0.0, ge=0, le=2)
    timeout: float = Field(60.0, gt=0)
    system_prompt: str = (
        "Answer the user's question using only the numbered context passages. "
        "If the context does not contain the answer, say that you do not know."
    )


class SuiteCase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    question: str | None = None
    contexts: list[SuiteContext] = Field(default_factory=list)
    expected: str | None = None
    expected_documents: list[str] | None = None
    answer: str | None = None
    # A chat turn's earlier turns, oldest first ({question, answer} each): judged with them.
    conversation: list[SuiteTurn] | None = None
    # A captured OTLP file (path relative to the suite file) holding the trace to score instead.
    trace: str | None = None
    trace_id: str | None = None
    evaluators: list[dict[str, Any]] | None = None

    @model_validator(mode="after")
    def _has_inputs(self) -> Self:
        if self.trace is None and self.question is None:
            raise ValueError("a case needs `question` (with `contexts`, `answer`) or `trace`")
        if self.trace is not None and (self.contexts or self.answer is not None):
            raise ValueError("a `trace:` case takes its contexts and answer from the trace; drop them")
        return self


class Suite(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "suite"
    evaluators: list[dict[str, Any]] | None = None
    model: GenerationModel | None = None
    cases: list[SuiteCase] = Field(min_length=1)

    @model_validator(mode="after")
    def _answers_known(self) -> Self:
        if self.model is None:
            for index, case in enumerate(self.cases):
                if case.trace is None and case.answer is None:
                    raise ValueError(
                        f"cases[{index}] ({case.name}): no `answer`, and the suite has no `model:`"
                    )
        return self


class CaseResult(BaseModel):
    """One case's scores: the `--json` record of a case."""

    name: str
    scores: list[Score]
    # What the case produced, for snapshots; not part of the `--json` record.
    answer: str | None = Field(None, exclude=True)
    retrieved_ids: list[str] = Field(default_factory=list, exclude=True)

    @property
    def failed(self) -> bool:
        return any(score.status in ("fail", "error") for score in self.scores)


M = TypeVar("M", bound=BaseModel)


def read_yaml_model(path: Path, model: type[M]) -> M:
    """A YAML file validated as `model`; `SuiteError` naming the file and the key path on any mistake."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SuiteError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise SuiteError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise SuiteError(f"{path}: expected a mapping with `cases:` (and optionally `name`, `evaluators`)")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise SuiteError(f"{path}: {where}: {first['msg']}") from None


def load_suite(path: Path) -> Suite:
    """Read and validate a suite file; `SuiteError` naming the file and key path on any mistake."""
    suite = read_yaml_model(path, Suite)
    names = [case.name for case in suite.cases]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise SuiteError(f"{path}: cases: duplicate case name {duplicates[0]!r}")
    return suite


def case_trace(case: SuiteCase, answer: str | None = None) -> RagTrace:
    """The `RagTrace` an inline suite case stands for: a retrieval step with its contexts, an LLM step.
    `answer` (a generated one) replaces the case's."""
    answer = case.answer if answer is None else answer
    documents = [
        Document(rank=rank, id=context.id, content=context.text, score=context.score)
        for rank, context in enumerate(case.contexts, start=1)
    ]
    steps = [
        Step(span_id="retrieval", position=0, kind="retrieval", query=case.question, documents=documents),
        Step(span_id="llm", position=1, kind="llm", input=case.question, output=answer),
    ]
    return RagTrace(
        trace_id=f"case:{case.name}",
        question=case.question,
        answer=answer,
        convention="ragpulse",
        steps=steps,
        case_id=case.name,
        expected_documents=case.expected_documents,
        expected_answer=case.expected,
        conversation=_conversation(case),
    )


EvaluatorBuilder = Callable[[Sequence[dict[str, Any]] | None], Sequence[Callable[[RagTrace], Score]]]
# (path, trace id or None) -> the mapped trace; supplied by the caller, who can read OTLP files.
TraceLoader = Callable[[str, str | None], RagTrace]
Generator = Callable[[SuiteCase], str]


def run_suite(
    suite: Suite,
    build: EvaluatorBuilder,
    *,
    load_trace: TraceLoader | None = None,
    generate: Generator | None = None,
    workers: int = 1,
) -> list[CaseResult]:
    """Score every case with its evaluators (`build(entries)` turns config entries into evaluators).

    `trace:` cases are read with `load_trace`; with a suite `model:`, `generate(case)` writes the
    answer of each inline case that has none. The case's `expected` / `expected_documents` are the
    reference either way. `workers` cases are scored at once (`evaluators.parallel`), results in
    suite order.
    """
    shared = build(suite.evaluators)

    def score(case: SuiteCase) -> CaseResult:
        evaluators = shared if case.evaluators is None else build(case.evaluators)
        trace = _trace_of(case, load_trace, generate)
        scores = [_promised(evaluate(trace)) for evaluate in evaluators]
        retrieved = [doc_id for doc_id in trace.retrieved_ids if doc_id is not None]
        return CaseResult(name=case.name, scores=scores, answer=trace.answer, retrieved_ids=retrieved)

    return map_in_order(score, suite.cases, workers)


def _trace_of(case: SuiteCase, load_trace: TraceLoader | None, generate: Generator | None) -> RagTrace:
    if case.trace is None:
        answer = generate(case) if case.answer is None and generate is not None else None
        return case_trace(case, answer)
    if load_trace is None:
        raise SuiteError(f"case {case.name}: `trace:` cases need a trace reader")
    trace = load_trace(case.trace, case.trace_id)
    update: dict[str, Any] = {"case_id": case.name}
    if case.expected is not None:
        update["expected_answer"] = case.expected
    if case.expected_documents is not None:
        update["expected_documents"] = case.expected_documents
    if case.question is not None:
        update["question"] = case.question
    if case.conversation:
        update["conversation"] = _conversation(case)
    return trace.model_copy(update=update)


def _conversation(case: SuiteCase) -> list[ConversationTurn]:
    return [ConversationTurn(question=t.question, answer=t.answer) for t in case.conversation or []]


def generation_messages(model: GenerationModel, case: SuiteCase) -> list[dict[str, str]]:
    """The chat messages that ask `model` to answer `case` from its contexts alone."""
    passages = "\n\n".join(f"[{i}] {c.text}" for i, c in enumerate(case.contexts, start=1)) or "(no context)"
    return [
        {"role": "system", "content": model.system_prompt},
        {"role": "user", "content": f"Context:\n{passages}\n\nQuestion: {case.question}"},
    ]


def openai_generator(model: GenerationModel) -> Generator:
    """`generate(case)` with the `openai` client; a failed call is a `SuiteError` naming the case."""
    import openai

    client = openai.OpenAI(base_url=model.base_url, timeout=model.timeout, max_retries=2)

    def generate(case: SuiteCase) -> str:
        try:
            response = client.chat.completions.create(
                model=model.model,
                messages=generation_messages(model, case),  # type: ignore[arg-type]
                temperature=model.temperature,
            )
        except openai.OpenAIError as exc:
            raise SuiteError(f"case {case.name}: answer generation failed: {exc}") from None
        content = response.choices[0].message.content if response.choices else None
        if not content:
            raise SuiteError(f"case {case.name}: the model returned no answer")
        return content

    return generate


def _promised(score: Score) -> Score:
    """A suite case promises its reference: a missing one is an error, not a skip."""
    if score.status == "skipped" and score.label in MISSING_REFERENCE:
        what = "no retrieval step" if score.label == "no_retrieval" else "no reference"
        return Score.fail_error(
            score.name,
            score.label or "no_reference",
            f"the suite case gives {what} for {score.name} ({score.explanation})",
            threshold=score.threshold,
        )
    return score


# --------------------------------------------------------------------------- outputs


def results_json(results: Sequence[CaseResult]) -> str:
    """The `--json` document: a list of cases, each `{name, scores: [score records]}`."""
    return json.dumps([result.model_dump(mode="json") for result in results], indent=2)


def junit_xml(suite_name: str, results: Sequence[CaseResult]) -> str:
    """JUnit XML: one `<testcase>` per case, `<failure>` / `<error>` listing the scores concerned."""
    root = ElementTree.Element("testsuites")
    failures = sum(1 for r in results if _worst(r) == "fail")
    errors = sum(1 for r in results if _worst(r) == "error")
    suite = ElementTree.SubElement(
        root,
        "testsuite",
        name=suite_name,
        tests=str(len(results)),
        failures=str(failures),
        errors=str(errors),
        skipped="0",
    )
    for result in results:
        case = ElementTree.SubElement(suite, "testcase", classname=suite_name, name=result.name)
        worst = _worst(result)
        if worst in ("fail", "error"):
            bad = [s for s in result.scores if s.status in ("fail", "error")]
            element = ElementTree.SubElement(
                case,
                "failure" if worst == "fail" else "error",
                message="; ".join(f"{s.name} {s.status}" for s in bad),
                type=worst,
            )
            element.text = "\n".join(score_line(s) for s in bad)
        lines = [score_line(s) for s in result.scores]
        ElementTree.SubElement(case, "system-out").text = "\n".join(lines)
    ElementTree.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(root, encoding="unicode") + "\n"


def _worst(result: CaseResult) -> str:
    statuses = {score.status for score in result.scores}
    # An error outranks a failure: the case could not be judged at all.
    return "error" if "error" in statuses else "fail" if "fail" in statuses else "pass"


def score_line(score: Score) -> str:
    value = "-" if score.value is None else f"{score.value:.3f}"
    line = f"{score.name}: {score.status} {value}"
    if score.threshold is not None:
        line += f" (min {score.threshold:g})"
    if score.explanation:
        line += f" — {score.explanation}"
    for item in score.items:
        if not item.ok:
            line += f"\n    ✗ {item.text}" + (f" — {item.evidence}" if item.evidence else "")
    return line


# --------------------------------------------------------------------------- baseline


class Regression(BaseModel):
    """One case x metric that got worse than the baseline."""

    case: str
    name: str
    before_status: str | None
    after_status: str
    before: float | None
    after: float | None
    reason: str


def read_baseline(path: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """A saved `--json` file as `{case: {score name: score record}}`; `SuiteError` when unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SuiteError(f"{path}: cannot read baseline: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise SuiteError(f"{path}: baseline is not JSON: {exc}") from None
    if not isinstance(data, list) or not all(isinstance(c, dict) and "name" in c for c in data):
        raise SuiteError(f"{path}: baseline must be a `ragpulse eval --json` file (a list of cases)")
    baseline: dict[str, dict[str, dict[str, Any]]] = {}
    for case in data:
        scores = case.get("scores") or []
        baseline[str(case["name"])] = {str(s.get("name")): s for s in scores if isinstance(s, dict)}
    return baseline


def compare(
    results: Sequence[CaseResult], baseline: dict[str, dict[str, dict[str, Any]]]
) -> list[Regression]:
    """Per-case, per-metric regressions: a status that left `pass`, or a value that dropped.

    Cases or metrics absent from the baseline are new, not regressions.
    """
    regressions = []
    for result in results:
        before_scores = baseline.get(result.name, {})
        for score in result.scores:
            before = before_scores.get(score.name)
            if before is None:
                continue
            before_value = before.get("value")
            before_status = before.get("status")
            reason = None
            if before_status == "pass" and score.status != "pass":
                reason = f"was pass, now {score.status}"
            elif (
                isinstance(before_value, int | float)
                and score.value is not None
                and math.isfinite(before_value)
                and score.value < before_value - REGRESSION_TOLERANCE
            ):
                reason = f"value dropped {before_value:.3f} -> {score.value:.3f}"
            elif before_value is not None and score.value is None and score.status == "error":
                reason = "was scored, now an error"
            if reason:
                regressions.append(
                    Regression(
                        case=result.name,
                        name=score.name,
                        before_status=before_status,
                        after_status=score.status,
                        before=before_value,
                        after=score.value,
                        reason=reason,
                    )
                )
    return regressions


# --------------------------------------------------------------------------- snapshots


class SnapshotEntry(BaseModel):
    """What a case produced: its answer and its retrieved document ids in rank order."""

    answer: str
    retrieved_ids: list[str]


class SnapshotChange(BaseModel):
    """A case whose answer or retrieval moved away from its snapshot (listed for review)."""

    case: str
    answer_similarity: float
    retrieval_overlap: float
    reason: str


def snapshot_of(results: Sequence[CaseResult]) -> dict[str, SnapshotEntry]:
    """Each case's answer and retrieved ids (documents without an id are left out of the overlap)."""
    return {r.name: SnapshotEntry(answer=r.answer or "", retrieved_ids=r.retrieved_ids) for r in results}


def read_snapshot(path: Path) -> dict[str, SnapshotEntry]:
    """A snapshot file (`{case: {answer, retrieved_ids}}`); `SuiteError` when unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {str(name): SnapshotEntry.model_validate(entry) for name, entry in data.items()}
    except OSError as exc:
        raise SuiteError(f"{path}: cannot read snapshot: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, AttributeError, ValidationError) as exc:
        raise SuiteError(f"{path}: not a ragpulse snapshot file: {exc}") from None


def write_snapshot(path: Path, entries: dict[str, SnapshotEntry]) -> None:
    path.write_text(
        json.dumps({k: v.model_dump() for k, v in entries.items()}, indent=2) + "\n", encoding="utf-8"
    )


def answer_similarity(before: str, after: str) -> float:
    """Word-sequence similarity, 0..1: `difflib.SequenceMatcher.ratio()` over case-folded words
    (`textutil.unicode_words`; 2 x matching words / total words). 1 for the same wording; reordering
    and rewording lower it."""
    a, b = unicode_words(before), unicode_words(after)
    if not a and not b:
        return 1.0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def retrieval_overlap(before: Sequence[str], after: Sequence[str]) -> float:
    """Jaccard overlap of two retrieved-id sets (1 when both are empty)."""
    a, b = set(before), set(after)
    return 1.0 if not a and not b else len(a & b) / len(a | b)


PairSimilarity = Callable[[Sequence[tuple[str, str]]], list[float]]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors, clipped to 0..1 (0 for a zero vector)."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return max(0.0, min(1.0, dot / norm)) if norm else 0.0


def embedding_similarity(embed: Embed) -> PairSimilarity:
    """Answer similarity as the cosine of the two answers' embeddings, all pairs in one request.
    An empty answer is not embedded: two empty answers are 1, one empty answer 0."""

    def similarity(pairs: Sequence[tuple[str, str]]) -> list[float]:
        texts = sorted({text for pair in pairs for text in pair if text.strip()})
        vectors = dict(zip(texts, embed(texts), strict=True)) if texts else {}
        return [
            cosine(vectors[a], vectors[b])
            if a.strip() and b.strip()
            else float(not a.strip() and not b.strip())
            for a, b in pairs
        ]

    return similarity


def _lexical(pairs: Sequence[tuple[str, str]]) -> list[float]:
    return [answer_similarity(a, b) for a, b in pairs]


def compare_snapshot(
    snapshot: dict[str, SnapshotEntry],
    current: dict[str, SnapshotEntry],
    *,
    min_similarity: float = 0.9,
    min_overlap: float = 0.8,
    similarity: PairSimilarity = _lexical,
) -> list[SnapshotChange]:
    """Cases whose answer similarity < `min_similarity` or retrieval overlap < `min_overlap`;
    cases absent from the snapshot are listed as new. `similarity` scores (before, after) answer
    pairs in one batch: lexical (`answer_similarity`) by default, or `embedding_similarity`."""
    known = [name for name in current if name in snapshot]
    scores = dict(
        zip(known, similarity([(snapshot[n].answer, current[n].answer) for n in known]), strict=True)
    )
    changes = []
    for name, now in current.items():
        before = snapshot.get(name)
        if before is None:
            changes.append(
                SnapshotChange(case=name, answer_similarity=0, retrieval_overlap=0, reason="new case")
            )
            continue
        similarity_now = scores[name]
        overlap = retrieval_overlap(before.retrieved_ids, now.retrieved_ids)
        reasons = []
        if similarity_now < min_similarity:
            reasons.append(f"answer similarity {similarity_now:.2f} < {min_similarity:g}")
        if overlap < min_overlap:
            reasons.append(f"retrieval overlap {overlap:.2f} < {min_overlap:g}")
        if reasons:
            changes.append(
                SnapshotChange(
                    case=name,
                    answer_similarity=similarity_now,
                    retrieval_overlap=overlap,
                    reason="; ".join(reasons),
                )
            )
    return changes
