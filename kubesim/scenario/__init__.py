"""Scenario layer of kubesim: expand a declarative YAML scenario into Kubernetes objects.

``load_scenario("demo" | "large" | "empty" | "upstream" | "sharing" | "dra-sharing" | path | dict, seed=0)`` returns a
list of complete, JSON-able Kubernetes objects in creation order, deterministic for a given scenario and seed. The
format is documented in ``docs/kubesim-scenarios.md``. This package's public entry points are the names below.

One module per concern: ``spec`` reads and validates the document, ``quantities`` parses quantities and consumable
capacity, ``gpus`` models cards and MIG, ``nodes`` and ``slices`` publish nodes and ResourceSlices, ``claims`` and
``allocator`` declare and allocate ResourceClaims, ``workloads``, ``scheduler``, ``pods`` and ``events`` expand
workloads into placed pods, ``quotas`` computes ResourceQuota usage, and ``builder`` runs them in order.
"""

from .builder import load_scenario
from .common import BUILTIN_SCENARIOS, SCENARIO_DIR, ScenarioError
from .quantities import parse_quantity
from .spec import scenario_api_profile

__all__ = ["BUILTIN_SCENARIOS", "SCENARIO_DIR", "ScenarioError", "load_scenario", "parse_quantity",
           "scenario_api_profile"]
