"""Python reprs of framework objects read as data, never run.

Frameworks record what a tool or a pipeline returned with `str()`: `[Document(id='refunds',
metadata={'source': 'policy.md'}, page_content='...')]` (LangChain), `NodeWithScore(node=TextNode(
id_='n1', text='...'), score=0.8)` (LlamaIndex), `ChatMessage(_role=<ChatRole.ASSISTANT: 'assistant'>,
...)` (Haystack). `parse_repr` reads such text with Python's parser into plain data: a call becomes a
dict of its keyword arguments (with `__type__`, the class name), literals become values, and an enum's
`<Class.NAME: 'value'>` becomes its value. Nothing is evaluated or imported, whatever the text says.
"""

from __future__ import annotations

import ast
import re
from typing import Any

MAX_REPR_CHARS = 100_000  # longer text is not parsed (ast's cost and recursion grow with it)
# `<ChatRole.ASSISTANT: 'assistant'>` -> `'assistant'`: an enum's repr is not Python syntax.
_ENUM_REPR = re.compile(r"<[A-Za-z_][\w.]*: ('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|-?[\w.]+)>")
# What an object repr starts with: a list or tuple of them, or `ClassName(`.
_REPR_START = re.compile(r"^\s*(?:[\[(]\s*)*[A-Za-z_][\w.]*\(")


class _Unreadable(Exception):
    """A node that is not plain data (a name, an operator, a lambda, ...)."""


def looks_like_repr(value: str) -> bool:
    """Whether text starts like an object's repr (`Name(...`, `[Name(...`)."""
    return bool(_REPR_START.match(value))


def parse_repr(value: str) -> Any:
    """The data in an object repr (see the module docstring); None when `value` is not one."""
    if len(value) > MAX_REPR_CHARS or not looks_like_repr(value):
        return None
    source = _ENUM_REPR.sub(lambda m: m.group(1), value.strip())
    try:
        tree = ast.parse(source, mode="eval")
        return _data(tree.body)
    except (SyntaxError, ValueError, RecursionError, MemoryError, _Unreadable):
        return None


def _data(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return [_data(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        return {_key(k): _data(v) for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, ast.Call):
        fields: dict[str, Any] = {"__type__": _name(node.func)}
        for keyword in node.keywords:
            if keyword.arg is None:
                raise _Unreadable("**kwargs")
            fields[keyword.arg] = _data(keyword.value)
        if node.args:
            fields["args"] = [_data(arg) for arg in node.args]
        return fields
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _data(node.operand)
        if isinstance(operand, int | float) and not isinstance(operand, bool):
            return -operand if isinstance(node.op, ast.USub) else operand
    raise _Unreadable(type(node).__name__)


def _key(node: ast.AST | None) -> Any:
    if node is None:
        raise _Unreadable("**mapping")
    key = _data(node)
    return key if isinstance(key, str | int | float | bool) or key is None else str(key)


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    raise _Unreadable("call of an expression")
