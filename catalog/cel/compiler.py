"""Compiling a DRA selector: length and cost limits, type checking, analysis and rewriting."""

from __future__ import annotations

import functools
import re

from cel_expr_python import cel

from catalog.cel.analysis import Analysis
from catalog.cel.environment import (
    ATTRIBUTES_VAR,
    CAPACITY_VAR,
    DRIVER_VAR,
    MULTI_VAR,
    ROOTS,
    domain_variable,
    selector_environment,
)
from catalog.cel.errors import CelCompileError, CelLimitError, compile_error, source_position
from catalog.cel.evaluation import Feed, Selector
from catalog.cel.limits import MAX_COST, MAX_EXPRESSION_LENGTH
from catalog.cel.protos import CheckedExpr, ParsedExpr, ast_nodes, unpack
from catalog.cel.rewrite import rewrite_checked

_HAS_RE = re.compile(r"\bhas\s*\(")


def _reject_has_on_device_fields(env: cel.Env, expression: str) -> None:
    """`has(device.driver)` cannot work with `device.x` declared as qualified variables (the checker resolves the
    whole name and drops the presence test), so it is refused instead of silently returning the field's value."""
    try:
        parsed = unpack(env.compile(expression, disable_check=True).serialize(), ParsedExpr)
    except RuntimeError:
        return  # the checked compile reports the syntax error
    positions = dict(parsed.source_info.positions)
    for node in ast_nodes(parsed.expr):
        if node.WhichOneof("expr_kind") != "select_expr" or not node.select_expr.test_only:
            continue
        operand = node.select_expr.operand
        if operand.WhichOneof("expr_kind") == "ident_expr" and operand.ident_expr.name.lstrip(".") == "device":
            line, column = source_position(positions.get(int(node.id)), expression)
            raise CelCompileError(
                f"has(device.{node.select_expr.field}) is not supported: the fields of `device` always exist",
                expression=expression,
                line=line,
                column=column,
            )


@functools.lru_cache(maxsize=2048)
def compile_selector(expression: str) -> Selector:
    """Compile and check a DRA selector. Raises CelLimitError (length, cost) or CelCompileError."""
    if not isinstance(expression, str):
        raise CelCompileError("the expression must be a string")
    size = len(expression.encode())
    if size > MAX_EXPRESSION_LENGTH:
        raise CelLimitError(
            f"the expression is {size:,} bytes long; the limit is {MAX_EXPRESSION_LENGTH:,}", expression=expression
        )
    if not expression.strip():
        raise CelCompileError("the expression is empty", expression=expression)
    env = selector_environment()
    if _HAS_RE.search(expression):
        _reject_has_on_device_fields(env, expression)
    try:
        compiled = env.compile(expression)
    except RuntimeError as exc:
        raise compile_error(str(exc), expression) from None
    result_type = compiled.return_type()
    if result_type not in (cel.Type.BOOL, cel.Type.DYN):
        name = result_type.name() if result_type.is_message() else result_type.name().lower()
        raise CelCompileError(f"the selector must evaluate to bool, not {name}", expression=expression)

    analysis = Analysis(unpack(compiled.serialize(), CheckedExpr), expression)
    cost, _ = analysis.walk(analysis.checked.expr, {})
    if cost > MAX_COST:
        raise analysis.cost_error(cost)
    try:
        program = env.deserialize(rewrite_checked(analysis))
    except RuntimeError as exc:  # a rewrite the runtime refuses is our bug; report it as such, never crash a caller
        raise CelCompileError(f"internal error preparing the selector: {exc}", expression=expression) from None

    feeds = [Feed(variable) for variable in (DRIVER_VAR, MULTI_VAR) if variable in analysis.variables]
    feeds += [
        Feed(variable, root=ROOTS[variable])
        for variable in (ATTRIBUTES_VAR, CAPACITY_VAR)
        if variable in analysis.variables
    ]
    for root, domain in sorted({(root, domain) for _, root, domain in analysis.domain_nodes}):
        whole = (root, domain) in analysis.whole_domains
        names = None if whole else tuple(sorted(analysis.static_names.get((root, domain), ())))
        feeds.append(Feed(domain_variable(root, domain), root=root, domain=domain, names=names))
    domains = frozenset(domain for _, _, domain in analysis.domain_nodes)
    return Selector(expression, program, tuple(feeds), cost, domains)
