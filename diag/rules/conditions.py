"""Rule conditions: parsed with lark, evaluated by walking the tree (never ``eval``).

Arithmetic or comparison with ``null`` yields ``null`` and a ``null`` condition is false,
so a rule whose inputs the logs do not show simply does not fire.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from lark import Lark, Token, Tree

from diag.resources import grammar_text


class ConditionError(ValueError):
    """A condition that does not parse or names something unknown."""


@lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark(grammar_text("condition.lark"), parser="lalr")


@lru_cache(maxsize=512)
def compile_condition(text: str) -> Tree:  # type: ignore[type-arg]
    try:
        return _parser().parse(text)
    except Exception as exc:  # lark raises several error types; all mean "bad condition"
        raise ConditionError(f"cannot parse condition {text!r}: {exc}".splitlines()[0]) from None


def names_in(tree: Tree) -> set[str]:  # type: ignore[type-arg]
    out = set()
    for node in tree.iter_subtrees():
        if node.data == "var":
            out.add(".".join(str(t) for t in node.children))
    return out


def evaluate(text: str, env: Mapping[str, Any]) -> bool:
    try:
        return bool(_eval(compile_condition(text), env))
    except (TypeError, RecursionError) as exc:  # e.g. a threshold given as a string
        raise ConditionError(f"cannot evaluate {text!r}: {exc}") from None


def _lookup(env: Mapping[str, Any], dotted: str) -> Any:
    head, *rest = dotted.split(".")
    if head not in env:
        raise ConditionError(f"unknown name {dotted!r} in condition")
    value = env[head]
    for part in rest:
        if not isinstance(value, Mapping) or part not in value:
            raise ConditionError(f"unknown name {dotted!r} in condition")
        value = value[part]
    return value


def _eval(node: Any, env: Mapping[str, Any]) -> Any:  # noqa: C901 - one branch per node kind
    if isinstance(node, Token):
        return str(node)
    kind = node.data
    ch = node.children
    if kind == "number":
        v = float(ch[0])
        return int(v) if v.is_integer() else v
    if kind == "string":
        return str(ch[0])[1:-1]
    if kind == "null":
        return None
    if kind == "true":
        return True
    if kind == "false":
        return False
    if kind == "var":
        return _lookup(env, ".".join(str(t) for t in ch))
    if kind == "neg":
        v = _eval(ch[0], env)
        return None if v is None else -v
    if kind == "not_":
        v = _eval(ch[0], env)
        return None if v is None else not v
    if kind == "and_":
        result: Any = True
        for c in ch:
            v = _eval(c, env)
            if not v:
                return False
            result = v
        return bool(result)
    if kind == "or_":
        return any(bool(_eval(c, env)) for c in ch)
    if kind == "arith":
        acc = _eval(ch[0], env)
        for op, operand in zip(ch[1::2], ch[2::2], strict=True):
            rhs = _eval(operand, env)
            if acc is None or rhs is None:
                return None
            op = str(op)
            if op == "+":
                acc = acc + rhs
            elif op == "-":
                acc = acc - rhs
            elif op == "*":
                acc = acc * rhs
            else:
                acc = None if rhs == 0 else acc / rhs
        return acc
    if kind == "compare":
        if len(ch) == 1:
            return _eval(ch[0], env)
        lhs, op, rhs = _eval(ch[0], env), str(ch[1]), _eval(ch[2], env)
        if op == "==":
            return lhs == rhs
        if op == "!=":
            return lhs != rhs
        if lhs is None or rhs is None:
            return None
        return {">": lhs > rhs, "<": lhs < rhs, ">=": lhs >= rhs, "<=": lhs <= rhs}[op]
    if kind in ("in_", "not_in"):
        value = _eval(ch[0], env)
        items = [_eval(c, env) for c in ch[1].children if c is not None]
        found = value in items
        return found if kind == "in_" else not found
    if kind == "list":
        return [_eval(c, env) for c in ch if c is not None]
    raise ConditionError(f"unsupported construct {kind!r}")
