"""The process-wide CEL environment of DRA selectors and the names of its `device` variables."""

from __future__ import annotations

import threading

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings

from catalog.cel.library import function_declarations
from catalog.cel.values import QUANTITY_TYPE, TYPES_POOL

DRIVER_VAR = "device.driver"
MULTI_VAR = "device.allowMultipleAllocations"
ATTRIBUTES_VAR = "device.attributes"
CAPACITY_VAR = "device.capacity"
ROOTS = {ATTRIBUTES_VAR: "attributes", CAPACITY_VAR: "capacity"}

_env_lock = threading.Lock()
_env: cel.Env | None = None


def selector_environment() -> cel.Env:
    """The process-wide CEL environment (built on first use). `device.x` are declared as qualified variables, which
    gives compile errors for unknown fields (`device.drivr`) like Kubernetes' object type does."""
    global _env
    with _env_lock:
        if _env is None:
            string = cel.Type.STRING
            _env = cel.NewEnv(
                TYPES_POOL,
                variables={
                    DRIVER_VAR: string,
                    MULTI_VAR: cel.Type.BOOL,
                    ATTRIBUTES_VAR: cel.Type.Map(string, cel.Type.Map(string, cel.Type.DYN)),
                    CAPACITY_VAR: cel.Type.Map(string, cel.Type.Map(string, QUANTITY_TYPE)),
                },
                extensions=[ext_strings.ExtStrings(), ext_bindings.ExtBindings(), ext_optional.ExtOptional()],
                functions=function_declarations(),
            )
        return _env


def domain_variable(root: str, domain: str) -> str:
    return f"@{root}:{domain}"  # `@` cannot appear in a CEL identifier, so no user variable can collide
