"""Kubernetes semantics, once: quantities, a pod's effective requests, selector / node-affinity / toleration matching,
and name syntax. Pure Python (no Django, no `kubernetes` client), tolerant of malformed input, shared by the sync
(inventory), the catalog (capacity, validation, feasibility, generator) and the portal (quota, chargeback). A rule
written twice disagrees with itself; add to these modules instead (tests/inventory/test_semantics.py holds every
caller to the same answers).
"""

from inventory.k8s.semantics.matching import (
    BLOCKING_TAINT_EFFECTS,
    comparisons_enabled,
    describe_requirement,
    label_selector_matches,
    labels_match,
    node_selector_matches,
    requirement_matches,
    taint_text,
    term_failures,
    term_matches,
    toleration_tolerates,
    untolerated_taints,
)
from inventory.k8s.semantics.names import (
    dns_label_problem,
    dns_subdomain_problem,
    is_dns_label,
    is_dns_subdomain,
    is_label_value,
    is_qualified_name,
    label_value_problem,
    qualified_name_problem,
)
from inventory.k8s.semantics.quantity import (
    MAX_QUANTITY,
    QuantityError,
    format_quantity,
    parse_quantity,
    quantity_or_none,
    scheduler_amount,
)
from inventory.k8s.semantics.requests import (
    IMPLICIT_EXTENDED_PREFIX,
    NATIVE_CONTAINER_RESOURCES,
    NATIVE_RESOURCES,
    PodResources,
    RequestProblem,
    is_extended_resource,
    is_native_container_resource,
    pod_resources,
)
from inventory.k8s.semantics.values import as_dict, as_int, as_list, as_str
from inventory.k8s.semantics.versions import kubernetes_version

__all__ = [
    "BLOCKING_TAINT_EFFECTS",
    "IMPLICIT_EXTENDED_PREFIX",
    "MAX_QUANTITY",
    "NATIVE_CONTAINER_RESOURCES",
    "NATIVE_RESOURCES",
    "PodResources",
    "QuantityError",
    "RequestProblem",
    "as_dict",
    "as_int",
    "as_list",
    "as_str",
    "comparisons_enabled",
    "describe_requirement",
    "dns_label_problem",
    "dns_subdomain_problem",
    "format_quantity",
    "is_dns_label",
    "is_dns_subdomain",
    "is_extended_resource",
    "is_label_value",
    "is_native_container_resource",
    "is_qualified_name",
    "kubernetes_version",
    "label_selector_matches",
    "label_value_problem",
    "labels_match",
    "node_selector_matches",
    "parse_quantity",
    "pod_resources",
    "qualified_name_problem",
    "quantity_or_none",
    "requirement_matches",
    "scheduler_amount",
    "taint_text",
    "term_failures",
    "term_matches",
    "toleration_tolerates",
    "untolerated_taints",
]
