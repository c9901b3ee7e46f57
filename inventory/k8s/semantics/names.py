"""Names and label syntax, as `k8s.io/apimachinery/pkg/util/validation` defines them. Each `*_problem` returns ""
for a valid value, else what is wrong in words a user can act on; the `is_*` forms are the same rule as a bool.
Patterns are matched with `fullmatch` (a `^…$` pattern with `re.match` would accept a trailing newline)."""

from __future__ import annotations

import re

__all__ = [
    "dns_label_problem",
    "dns_subdomain_problem",
    "is_dns_label",
    "is_dns_subdomain",
    "is_label_value",
    "is_qualified_name",
    "label_value_problem",
    "qualified_name_problem",
]

DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253
_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME_PART = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")


def dns_label_problem(value: str) -> str:
    """RFC 1123 label: namespaces, most object names of one segment, Kubernetes node pool names."""
    if not value:
        return "must not be empty"
    if len(value) > DNS_LABEL_MAX:
        return f"must be no more than {DNS_LABEL_MAX} characters (it has {len(value)})"
    if not _DNS_LABEL.fullmatch(value):
        return "must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit"
    return ""


def dns_subdomain_problem(value: str) -> str:
    """RFC 1123 subdomain: most object names (service accounts, DeviceClasses, drivers)."""
    if not value:
        return "must not be empty"
    if len(value) > DNS_SUBDOMAIN_MAX:
        return f"must be no more than {DNS_SUBDOMAIN_MAX} characters (it has {len(value)})"
    if not _DNS_SUBDOMAIN.fullmatch(value):
        return ("must be a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', starting and ending with a "
                "letter or digit")
    return ""


def qualified_name_problem(value: str) -> str:
    """A label or annotation key: an optional DNS subdomain prefix and '/', then a name of at most 63 characters."""
    prefix, slash, name = value.rpartition("/") if "/" in value else ("", "", value)
    if slash and (problem := dns_subdomain_problem(prefix)):
        return f"has an invalid prefix: it {problem}"
    if not name:
        return "must have a name part"
    if len(name) > DNS_LABEL_MAX:
        return f"has a name part longer than {DNS_LABEL_MAX} characters ({len(name)})"
    if not _QUALIFIED_NAME_PART.fullmatch(name):
        return "must consist of alphanumerics, '-', '_' or '.', and start and end with an alphanumeric"
    return ""


def label_value_problem(value: str) -> str:
    """A label value: empty, or at most 63 alphanumerics, '-', '_' and '.', starting and ending alphanumeric."""
    if len(value) > DNS_LABEL_MAX:
        return f"must be no more than {DNS_LABEL_MAX} characters (it has {len(value)})"
    if value and not _QUALIFIED_NAME_PART.fullmatch(value):
        return "must be empty or consist of alphanumerics, '-', '_' or '.', and start and end with an alphanumeric"
    return ""


def is_dns_label(value: object) -> bool:
    return isinstance(value, str) and not dns_label_problem(value)


def is_dns_subdomain(value: object) -> bool:
    return isinstance(value, str) and not dns_subdomain_problem(value)


def is_qualified_name(value: object) -> bool:
    return isinstance(value, str) and not qualified_name_problem(value)


def is_label_value(value: object) -> bool:
    return isinstance(value, str) and not label_value_problem(value)
