"""An instrumented example RAG app: a shop assistant answering store-policy questions.

    python -m collector.shop_assistant --endpoint localhost:4317 --mode healthy --convention ragpulse

Everything is deterministic and offline: a BM25 retriever over `knowledge_base.yaml` and an
extractive "LLM". `cases.yaml` holds the questions with their expected documents and answers
(`ragpulse datasets load collector/shop_assistant/cases.yaml`).
"""

from collector.shop_assistant.app import CONVENTIONS, MODES, Answer, ShopAssistant
from collector.shop_assistant.knowledge import CASES_FILE, KNOWLEDGE_BASE_FILE, Case, KbDocument, load_cases
from collector.shop_assistant.runner import RunReport, run

__all__ = [
    "CASES_FILE",
    "CONVENTIONS",
    "KNOWLEDGE_BASE_FILE",
    "MODES",
    "Answer",
    "Case",
    "KbDocument",
    "RunReport",
    "ShopAssistant",
    "load_cases",
    "run",
]
