"""Layered validation of Pod / Job / ResourceClaim / ResourceClaimTemplate manifests (docs/validation.md).

parse → schema → semantics → policy → quota → feasibility → dry-run; each finding carries its layer, a severity,
the path in the manifest, a message, a fix and a stable code. Validation never creates or writes anything.
"""

from catalog.validation.context import ValidationContext, context_for_cluster, context_from_objects
from catalog.validation.engine import validate_documents, validate_manifest
from catalog.validation.findings import LAYERS, SEVERITIES, ValidationFinding, ValidationReport, format_text
from catalog.validation.parse import MAX_BYTES, MAX_DEPTH, MAX_DOCUMENTS, parse_manifest

__all__ = [
    "LAYERS",
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_DOCUMENTS",
    "SEVERITIES",
    "ValidationContext",
    "ValidationFinding",
    "ValidationReport",
    "context_for_cluster",
    "context_from_objects",
    "format_text",
    "parse_manifest",
    "validate_documents",
    "validate_manifest",
]
