"""Kubeconfig validation: a kubeconfig is data, never a program.

The official client acts on much of what a kubeconfig names: it runs `users[].user.exec` commands and
`auth-provider` `cmd-path` commands, calls identity providers (`oidc`, `gcp`, `azure`), and reads `tokenFile`,
`client-certificate`, `client-key` and `certificate-authority` from the pod's filesystem (relative to the kubeconfig's
directory). A kubeconfig pasted into the admin or read from a mounted Secret must do none of that on the portal's
pods, so only inline credentials are accepted, field by field (an allow-list: a field the client learns in a later
release is refused until someone reads what it does).

Accepted (everything else is refused, with the entry and the field named and the value never echoed):
- top level: apiVersion (v1), kind (Config), clusters, contexts, users, current-context, preferences, extensions;
- clusters[].cluster: server (http/https URL), certificate-authority-data, insecure-skip-tls-verify, tls-server-name,
  disable-compression, extensions, and proxy-url only when the operator allow-listed that exact proxy;
- contexts[].context: cluster, user, namespace, extensions;
- users[].user: token, client-certificate-data + client-key-data, username + password, extensions.
Impersonation (`as`, `as-uid`, `as-groups`, `as-user-extra`) runs and reads nothing, but the Python client ignores
it: the portal would act with the full rights of the credentials while the kubeconfig says otherwise, so it is refused.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Collection, Mapping
from typing import Any, cast
from urllib.parse import urlsplit

from inventory.errors import ClusterConfigError
from inventory.untrusted_text import UntrustedTextError, load_documents

__all__ = ["MAX_KUBECONFIG_BYTES", "kubeconfig_parse", "kubeconfig_validate"]

MAX_KUBECONFIG_BYTES = 1024 * 1024  # a Kubernetes Secret holds at most 1 MiB; kubeconfigs are a few KiB
_MAX_PROBLEMS = 10

_TOP_LEVEL = {"apiVersion", "kind", "clusters", "contexts", "users", "current-context", "preferences", "extensions"}
_CLUSTER_FIELDS = {"server", "certificate-authority-data", "insecure-skip-tls-verify", "tls-server-name",
                   "disable-compression", "extensions"}
_CONTEXT_FIELDS = {"cluster", "user", "namespace", "extensions"}
_USER_FIELDS = {"token", "client-certificate-data", "client-key-data", "username", "password", "extensions"}

_INLINE = "kubeconfigs must carry inline credentials"
_IMPERSONATION = ("impersonation is not supported: the portal's client would ignore it and act with the full rights "
                  "of the credentials")
# Fields the official client turns into a command, a network call or a file read, with what to use instead.
_REFUSED_USER_FIELDS = {
    "exec": f"{_INLINE} (a command would run on the portal's pods)",
    "auth-provider": f"{_INLINE} (an auth-provider plugin would run a command or call an identity provider from the "
                     "portal's pods)",
    "tokenFile": f"{_INLINE} (it names a file on the portal's pods; put the token in \"token\")",
    "client-certificate": f"{_INLINE} (it names a file on the portal's pods; use \"client-certificate-data\")",
    "client-key": f"{_INLINE} (it names a file on the portal's pods; use \"client-key-data\")",
    "as": _IMPERSONATION,
    "as-uid": _IMPERSONATION,
    "as-groups": _IMPERSONATION,
    "as-user-extra": _IMPERSONATION,
}
_REFUSED_CLUSTER_FIELDS = {
    "certificate-authority": f"{_INLINE} (it names a file on the portal's pods; use \"certificate-authority-data\")",
}
_SECTIONS = (("clusters", "cluster"), ("contexts", "context"), ("users", "user"))
# A key is shown only when it reads like a field name (letters and single hyphens: "tokenFile", "as-user-extra"): a
# mis-indented kubeconfig can turn a credential into a key, and credentials carry digits or other characters.
_SHOWN_KEY = re.compile(r"(?=.{1,40}$)[A-Za-z]+(?:-[A-Za-z]+)*")
_SHOWN_NAME = re.compile(r"[\w.:/@+-]{1,100}")


def kubeconfig_parse(text: str, *, context: str = "", allowed_proxies: Collection[str] = ()) -> dict[str, Any]:
    """Parse kubeconfig YAML and validate it (`kubeconfig_validate`). Errors never echo the content."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_KUBECONFIG_BYTES:
        raise ClusterConfigError(f"kubeconfig is larger than {MAX_KUBECONFIG_BYTES // 1024} KiB")
    try:
        documents = load_documents(text, max_bytes=MAX_KUBECONFIG_BYTES, max_documents=1)
    except UntrustedTextError as exc:  # the hardened reader: no aliases, bounded depth; the message is not echoed
        reason = "is not valid YAML" if exc.code in ("yaml-syntax", "json-syntax", "not-text") else f"refused ({exc.code})"
        raise ClusterConfigError(f"kubeconfig {reason}") from None
    data = documents[0] if documents else None
    kubeconfig_validate(data, context=context, allowed_proxies=allowed_proxies)
    return cast(dict[str, Any], data)  # kubeconfig_validate refused anything but a mapping


def kubeconfig_validate(data: Any, *, context: str = "", allowed_proxies: Collection[str] = ()) -> None:
    """Refuse a kubeconfig that would make the client run a command, read a file or reach an unlisted proxy.

    `context` is the context the cluster is registered with (empty: current-context); it must exist.
    `allowed_proxies` are the exact `proxy-url` values the operator allows. Raises ClusterConfigError naming every
    offending entry and field (up to ten), never a value.
    """
    if not isinstance(data, dict):
        raise ClusterConfigError("kubeconfig is not a YAML mapping")
    problems = _Problems()
    _check_top_level(data, problems)

    names: dict[str, set[str]] = {}
    for section, body_key in _SECTIONS:
        names[section] = _section(data, section, body_key, problems)
    if not data.get("clusters"):
        problems.add("there are no clusters")
    if not data.get("contexts"):
        problems.add("there are no contexts")

    allowed = {p for p in allowed_proxies if p}
    for where, cluster in _bodies(data, "clusters", "cluster"):
        _check_cluster(where, cluster, allowed, problems)
    for where, user in _bodies(data, "users", "user"):
        _check_user(where, user, problems)
    for where, body in _bodies(data, "contexts", "context"):
        _check_context(where, body, names, problems)

    _check_active_context(data, context, names["contexts"], problems)
    problems.raise_if_any()


def _check_top_level(data: dict[Any, Any], problems: _Problems) -> None:
    """Only the known top-level fields, apiVersion v1, kind Config, and the right shapes for the optional ones."""
    for key in data:
        if key not in _TOP_LEVEL:
            problems.add(f"{_field(key)} is not allowed at the top level")
    if data.get("apiVersion") not in (None, "", "v1"):
        problems.add('field "apiVersion" must be v1')
    if data.get("kind") not in (None, "", "Config"):
        problems.add('field "kind" must be Config')
    for key, kind in (("preferences", dict), ("extensions", list)):
        if data.get(key) is not None and not isinstance(data[key], kind):
            problems.add(f'field "{key}" must be a {"mapping" if kind is dict else "list"}')


def _check_active_context(data: dict[Any, Any], context: str, contexts: set[str], problems: _Problems) -> None:
    """current-context, if set, names a context; and the context the client will use (`context` or the current
    one) exists."""
    current = data.get("current-context")
    if current is not None and not isinstance(current, str):
        problems.add('field "current-context" must be a string')
    elif current and contexts and current not in contexts:
        problems.add('"current-context" names a context that is not in the kubeconfig')
    active = context or (current if isinstance(current, str) else "")
    if not active:
        problems.add("there is no current-context: set one, or register the cluster with a context")
    elif context and contexts and context not in contexts:
        problems.add(f"context {_name(context) or '(given)'} is not in the kubeconfig")


class _Problems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, message: str) -> None:
        self.items.append(message)

    def raise_if_any(self) -> None:
        if not self.items:
            return
        shown = "; ".join(self.items[:_MAX_PROBLEMS])
        more = len(self.items) - _MAX_PROBLEMS
        raise ClusterConfigError(f"kubeconfig refused: {shown}" + (f"; and {more} more" if more > 0 else ""))


def _field(key: object) -> str:
    """A field's name for an error message: shown when it looks like a field name, never arbitrary text."""
    return f'field "{key}"' if isinstance(key, str) and _SHOWN_KEY.fullmatch(key) else "a field (name not shown)"


def _name(name: object) -> str:
    return f'"{name}"' if isinstance(name, str) and _SHOWN_NAME.fullmatch(name) else ""


def _where(section: str, index: int, entry: object) -> str:
    name = _name(entry.get("name")) if isinstance(entry, dict) else ""
    return f"{section}[{index}]" + (f" {name}" if name else "")


def _section(data: dict[str, Any], section: str, body_key: str, problems: _Problems) -> set[str]:
    """Check a list of named entries; return the names."""
    entries = data.get(section)
    if entries is None:
        return set()
    if not isinstance(entries, list):
        problems.add(f'field "{section}" must be a list')
        return set()
    names: set[str] = set()
    for index, entry in enumerate(entries):
        where = _where(section, index, entry)
        if not isinstance(entry, dict):
            problems.add(f"{where} must be a mapping with a name and a {body_key}")
            continue
        for key in entry:
            if key not in ("name", body_key):
                problems.add(f"{where}: {_field(key)} is not allowed")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            problems.add(f'{where}: field "name" must be a non-empty string')
        elif name in names:
            problems.add(f"{where}: the name is used twice in {section}")
        else:
            names.add(name)
        if not isinstance(entry.get(body_key), dict):
            problems.add(f'{where}: field "{body_key}" must be a mapping')
    return names


def _bodies(data: dict[str, Any], section: str, body_key: str) -> list[tuple[str, dict[str, Any]]]:
    entries = data.get(section)
    if not isinstance(entries, list):
        return []
    return [(_where(section, i, e), e[body_key]) for i, e in enumerate(entries)
            if isinstance(e, dict) and isinstance(e.get(body_key), dict)]


def _check_cluster(where: str, cluster: Mapping[str, Any], allowed_proxies: set[str], problems: _Problems) -> None:
    for key, value in cluster.items():
        if key in _REFUSED_CLUSTER_FIELDS:
            problems.add(f'{where}: field "{key}" is not allowed: {_REFUSED_CLUSTER_FIELDS[key]}')
        elif key == "proxy-url":
            if not isinstance(value, str) or value not in allowed_proxies:
                problems.add(f'{where}: field "proxy-url" is not allowed: the proxy is not in the operator\'s '
                             "allow-list (PORTAL_KUBECONFIG_ALLOWED_PROXIES)")
        elif key not in _CLUSTER_FIELDS:
            problems.add(f"{where}: {_field(key)} is not allowed (unknown cluster field)")
    server = cluster.get("server")
    if server is None:
        problems.add(f'{where}: field "server" is missing')
    elif not _is_server_url(server):
        problems.add(f'{where}: field "server" must be an http:// or https:// URL with a host and no credentials')
    if "certificate-authority-data" in cluster:
        _check_base64(where, cluster, "certificate-authority-data", problems)
    for key in ("insecure-skip-tls-verify", "disable-compression"):
        if key in cluster and not isinstance(cluster[key], bool):
            problems.add(f'{where}: field "{key}" must be true or false')
    if "tls-server-name" in cluster and not isinstance(cluster["tls-server-name"], str):
        problems.add(f'{where}: field "tls-server-name" must be a string')
    _check_extensions(where, cluster, problems)


def _check_user(where: str, user: Mapping[str, Any], problems: _Problems) -> None:
    for key in user:
        if key in _REFUSED_USER_FIELDS:
            problems.add(f'{where}: field "{key}" is not allowed: {_REFUSED_USER_FIELDS[key]}')
        elif key not in _USER_FIELDS:
            problems.add(f"{where}: {_field(key)} is not allowed (unknown user field; {_INLINE})")
    for key in ("token", "username", "password"):
        if key in user and (not isinstance(user[key], str) or not user[key]):
            problems.add(f'{where}: field "{key}" must be a non-empty string')
    for key in ("client-certificate-data", "client-key-data"):
        if key in user:
            _check_base64(where, user, key, problems)
    for first, second in (("client-certificate-data", "client-key-data"), ("username", "password")):
        if (first in user) != (second in user):
            problems.add(f'{where}: fields "{first}" and "{second}" go together')
    _check_extensions(where, user, problems)


def _check_context(where: str, body: Mapping[str, Any], names: dict[str, set[str]], problems: _Problems) -> None:
    for key in body:
        if key not in _CONTEXT_FIELDS:
            problems.add(f"{where}: {_field(key)} is not allowed (unknown context field)")
    cluster, user = body.get("cluster"), body.get("user")
    if not isinstance(cluster, str) or not cluster:
        problems.add(f'{where}: field "cluster" must name a cluster')
    elif names["clusters"] and cluster not in names["clusters"]:
        problems.add(f'{where}: field "cluster" names a cluster that is not in the kubeconfig')
    if user is not None and (not isinstance(user, str) or (user and user not in names["users"])):
        problems.add(f'{where}: field "user" names a user that is not in the kubeconfig')
    if "namespace" in body and not isinstance(body["namespace"], str):
        problems.add(f'{where}: field "namespace" must be a string')
    _check_extensions(where, body, problems)


def _check_extensions(where: str, body: Mapping[str, Any], problems: _Problems) -> None:
    # Extensions are opaque to the client (it never reads them); only their shape is checked.
    if body.get("extensions") is not None and not isinstance(body["extensions"], list):
        problems.add(f'{where}: field "extensions" must be a list')


def _check_base64(where: str, body: Mapping[str, Any], key: str, problems: _Problems) -> None:
    value = body[key]
    try:
        ok = isinstance(value, str) and bool(value) and bool(base64.b64decode("".join(value.split()), validate=True))
    except (binascii.Error, ValueError):
        ok = False
    if not ok:
        problems.add(f'{where}: field "{key}" must be non-empty base64')


def _is_server_url(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a malformed port
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and not parts.username and not parts.password
