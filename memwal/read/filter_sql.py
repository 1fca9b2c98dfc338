"""A Lance filter read with sqlglot: the literals each column must take, the columns it names.

The one place memwal parses SQL (:mod:`memwal.read.pruning` says what the literals are for and
which filters constrain nothing). Imported only when a read has a filter: sqlglot's import is
some 170 ms, more than a scan of a 35,000-row table, and a read without a filter never needs it.

Lance's filter syntax as observed in pylance 14.0.2 (the dialect follows it): single and double
quotes both delimit strings (``"id" = 1`` compares a string), backticks quote identifiers,
``''`` is the only string escape.
"""

from __future__ import annotations

import re
from typing import TypeAlias

import sqlglot
from sqlglot import exp, tokens
from sqlglot.dialects.dialect import Dialect

#: A literal a filter compares a column with.
LiteralValue: TypeAlias = int | str | bool
#: A literal with its kind: ``(bool, True)`` and ``(int, 1)`` must stay apart (``True == 1``).
_Lit = tuple[type[int] | type[str] | type[bool], LiteralValue]
#: Column -> the literals it may take; a column absent from the dict is unconstrained.
_Constraints = dict[str, frozenset[_Lit]]


class _LanceFilterDialect(Dialect):
    """sqlglot dialect with Lance's quoting (see the module docstring)."""

    class Tokenizer(tokens.Tokenizer):
        QUOTES = ["'", '"']
        IDENTIFIERS = ["`"]
        STRING_ESCAPES = ["'"]


def filter_literals(expr: str) -> dict[str, list[LiteralValue]]:
    """Column -> literals (int, str or bool) every row matching ``expr`` has in that column.

    A column not in the answer is unconstrained; an empty list means no row can match. A
    filter sqlglot cannot parse constrains nothing (Lance reports it when it scans).
    """
    try:
        tree = sqlglot.parse_one(expr, dialect=_LanceFilterDialect)
    except Exception:  # any parser failure only means "prune nothing", never a failed read
        return {}
    try:
        constraints = _constraints(tree)
    except RecursionError:
        return {}
    return {col: [v for _, v in sorted(lits, key=repr)] for col, lits in constraints.items()}


def filter_columns(expr: str) -> set[str] | None:
    """The column names a filter mentions; None when sqlglot cannot tell (the caller then
    assumes any column)."""
    try:
        tree = sqlglot.parse_one(expr, dialect=_LanceFilterDialect)
        return {c.name for c in tree.find_all(exp.Column)}
    except Exception:  # noqa: BLE001 - any parser failure only means "unknown"
        return None


def _constraints(node: exp.Expr) -> _Constraints:
    """Necessary conditions ``column IN literals`` implied by ``node`` being true."""
    if isinstance(node, exp.Paren):
        return _constraints(node.this)
    if isinstance(node, exp.And):
        return _conjoin(_constraints(node.left), _constraints(node.right))
    if isinstance(node, exp.Or):
        left, right = _constraints(node.left), _constraints(node.right)
        return {col: left[col] | right[col] for col in left.keys() & right.keys()}
    if isinstance(node, exp.EQ):
        for col_node, lit_node in ((node.left, node.right), (node.right, node.left)):
            col, lit = _column_name(col_node), _literal(lit_node)
            if col is not None and lit is not None:
                return {col: frozenset([lit])}
        return {}
    if isinstance(node, exp.In) and {k for k, v in node.args.items() if v} == {"this", "expressions"}:
        col = _column_name(node.this)
        lits = [lit for e in node.expressions if (lit := _literal(e)) is not None]
        if col is not None and lits and len(lits) == len(node.expressions):
            return {col: frozenset(lits)}
    return {}


def _conjoin(left: _Constraints, right: _Constraints) -> _Constraints:
    """AND: intersect a column's literals when both sides agree on their kind.

    Literals of different kinds are not intersected (SQL coercion is not ours to guess):
    the left side alone is still a necessary condition.
    """
    out = dict(left)
    for col, lits in right.items():
        if col not in out:
            out[col] = lits
        elif {k for k, _ in out[col]} == {k for k, _ in lits} and len({k for k, _ in lits}) == 1:
            out[col] = out[col] & lits
    return out


def _column_name(node: exp.Expr) -> str | None:
    """A plain (unqualified) column reference's name, else None."""
    if isinstance(node, exp.Column) and not node.table and isinstance(node.this, exp.Identifier):
        return node.this.name
    return None


def _literal(node: exp.Expr) -> _Lit | None:
    """An integer, string or boolean literal, else None (floats, NULL, expressions...)."""
    negate = False
    if isinstance(node, exp.Neg):
        negate, node = True, node.this
    if isinstance(node, exp.Boolean) and not negate:
        return (bool, bool(node.this))
    if not isinstance(node, exp.Literal):
        return None
    if node.is_string:
        return None if negate else (str, node.this)
    if re.fullmatch(r"[0-9]+", node.this) is None:
        return None
    value = int(node.this)
    return (int, -value if negate else value)


__all__ = ["LiteralValue", "filter_columns", "filter_literals"]
