"""Scenario layer of kubesim: expand a declarative YAML scenario into Kubernetes objects.

``load_scenario("demo" | "large" | "empty" | "upstream" | "sharing" | "dra-sharing" | path | dict, seed=0)`` returns a
list of complete, JSON-able Kubernetes objects in creation order, deterministic for a given scenario and seed. The
format is documented in ``docs/kubesim-scenarios.md``. This package's public entry points are the names below.
"""

from .builder import BUILTIN_SCENARIOS, SCENARIO_DIR, ScenarioError, load_scenario, parse_quantity, scenario_api_profile

__all__ = ["BUILTIN_SCENARIOS", "SCENARIO_DIR", "ScenarioError", "load_scenario", "parse_quantity",
           "scenario_api_profile"]
