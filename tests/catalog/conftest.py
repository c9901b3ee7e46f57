"""Catalog test helpers: reading a validation report."""

from __future__ import annotations

from catalog.validation import ValidationFinding, ValidationReport


def codes(report: ValidationReport, layer: str | None = None, severity: str | None = None) -> list[str]:
    return [f.code for f in report.findings
            if (layer is None or f.layer == layer) and (severity is None or f.severity == severity)]


def only(report: ValidationReport, code: str) -> ValidationFinding:
    found = [f for f in report.findings if f.code == code]
    assert len(found) == 1, (code, report.findings)
    return found[0]
