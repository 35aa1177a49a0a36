"""Prompt tokens as a real tokenizer counts them: tiktoken's `o200k_base` (GPT-4o's encoding).

Shared by bench/judge_cost.py (our judge) and bench/ragas_cost.py (RAGAS), so both sides of the
comparison are counted the same way: the tokens of every message's content, plus those of the JSON
schema when one is sent in `response_format` (providers turn it into prompt text). The few tokens of
chat framing per message are left out on both sides.

tiktoken downloads its vocabulary on first use, and nothing but PyPI is reachable from the
development machines; litellm's wheel ships the file, so, once:

    .venv/bin/pip install -e '.[bench]'   # tiktoken
    pip download --no-deps -d /tmp/litellm litellm && cd /tmp/litellm && unzip -q litellm-*.whl \
        'litellm/litellm_core_utils/tokenizers/*'
    export TIKTOKEN_CACHE_DIR=/tmp/litellm/litellm/litellm_core_utils/tokenizers

Without tiktoken or its vocabulary, `count` returns None and the benchmarks print characters only.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any

ENCODING = "o200k_base"


@cache
def _encoding() -> Any:
    try:
        import tiktoken

        return tiktoken.get_encoding(ENCODING)
    except Exception:  # not installed, or the vocabulary cannot be fetched: count nothing
        return None


def available() -> bool:
    """Whether tokens can be counted here."""
    return _encoding() is not None


def count(text: str) -> int | None:
    """The number of `o200k_base` tokens of `text`, or None when no tokenizer is available."""
    return count_all([text])


def count_all(texts: Iterable[str]) -> int | None:
    """The tokens of all `texts` together (each encoded on its own), or None without a tokenizer."""
    encoding = _encoding()
    if encoding is None:
        return None
    return sum(len(encoding.encode(text, disallowed_special=())) for text in texts)
