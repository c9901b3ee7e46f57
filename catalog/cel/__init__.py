"""Kubernetes DRA CEL selectors, compiled and evaluated with the C++ CEL runtime (cel-expr-python).

Selectors are the `spec.selectors[].cel.expression` of a DeviceClass and the `selectors` of a claim request. This
package reproduces the Kubernetes DRA CEL environment so the portal can tell which devices a selector picks:

- the `device` variable: `device.driver`, `device.attributes[<domain>].<name>`, `device.capacity[<domain>].<name>`
  (a Quantity) and `device.allowMultipleAllocations`;
- the Kubernetes `quantity()` and `semver()` libraries, the standard strings extension, `cel.bind`, optional values
  and `includes()`;
- a domain the device does not have reads as an empty map, a missing attribute is a runtime error;
- the 10 Ki length limit and a static cost estimate against `CELSelectorExpressionMaxCost` (docs/cel.md).

How it is built. Quantity and Semver are protobuf messages made at import time (the binding cannot return opaque
values from Python); their fields hold a canonical form so `==` is semantic equality. After type checking, the
checked AST (cel.expr.CheckedExpr) is decoded with a schema subset (protos), walked once for the cost estimate
and rewritten before it is loaded back: `device.attributes["d"]` becomes a variable of its own (so a missing domain
is an empty map without touching the key set of `device.attributes`); `quantity("40Gi")`/`semver("1.2.3")` with
literal arguments become message literals; Quantity/Semver comparisons become string comparisons of
order-preserving keys (no Python call per device); and `cel.bind` is made eager to avoid a cel-cpp bug
(rewrite._eager_binds). Each evaluation passes only the values the selector reads, which is also the memo key of
match_devices.

Threading: the environment is built once, under a lock. The binding holds the GIL while it compiles or evaluates,
so compiled selectors can be shared by threads (evaluations are serialized by the GIL, not run in parallel).

Modules, in dependency order: limits and errors; protos (compact protobuf schemas and the AST subset); values
(Quantity, Semver); library (the CEL functions); environment (the `device` variables and the shared Env); analysis
(cost estimate and rewrite plan); rewrite; devices (DeviceInput); evaluation (Selector, match_devices); compiler
(compile_selector). Callers import from `catalog.cel`.
"""

from catalog.cel.compiler import compile_selector
from catalog.cel.devices import DeviceInput, device_input
from catalog.cel.errors import CelCompileError, CelError, CelLimitError, CelRuntimeError
from catalog.cel.evaluation import MatchResult, Selector, match_devices
from catalog.cel.limits import MAX_COST, MAX_EXPRESSION_LENGTH
from catalog.cel.values import parse_quantity_strict, parse_semver

__all__ = [
    "MAX_COST",
    "MAX_EXPRESSION_LENGTH",
    "CelCompileError",
    "CelError",
    "CelLimitError",
    "CelRuntimeError",
    "DeviceInput",
    "MatchResult",
    "Selector",
    "compile_selector",
    "device_input",
    "match_devices",
    "parse_quantity_strict",
    "parse_semver",
]
