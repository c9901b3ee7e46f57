"""The Pod Security Standards *baseline* profile: one table, a pure evaluator, and the CEL generated from the table.

"Needs a privileged exception" means "violates the baseline profile" (kubernetes.io/docs/concepts/security/
pod-security-standards, as the pod-security-admission library's `policy/check_*.go` implement it for v1.35). Every
user reads the same `RULES`: the validator's policy layer (catalog.validation.policy), the violation scan
(portal.enforcement.violations, which also derives its SQL prefilter from `prefilter_keys`) and the ValidatingAdmissionPolicy
(portal.enforcement.services, whose variables `cel_variables` writes). Nothing else may restate a control.

Upstream visits init containers (restartable sidecars included), containers and ephemeral containers for every
container control, so do we. allowPrivilegeEscalation belongs to the *restricted* profile and is not here.

Pure: no Django, no kubernetes client. Input is untrusted JSON (dicts and lists as the API sends them); nothing here
raises on a malformed pod, a field of the wrong type counts as "not set" unless the control forbids any value.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from typing import Any

import orjson

from inventory.k8s.semantics import as_dict as _dict
from inventory.k8s.semantics import as_list as _list

POLICY_VERSION = "v1.35"

# check_capabilities_baseline.go: capabilities_allowed_1_0 (exact, case-sensitive names without the CAP_ prefix).
ALLOWED_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
})
# check_sysctls.go: sysctlsAllowedV1Dot32 (in force from 1.32 through 1.36; 1.37 adds tcp_slow_start_after_idle and
# tcp_notsent_lowat).
ALLOWED_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start", "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
})
# check_seLinuxOptions.go: selinuxAllowedTypes1_31 ("" is an unset type).
ALLOWED_SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
# check_seccompProfile_baseline.go and check_appArmorProfile.go: allowed profile types (Unconfined is not).
ALLOWED_PROFILE_TYPES = frozenset({"RuntimeDefault", "Localhost"})
APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"
ALLOWED_APPARMOR_ANNOTATIONS = frozenset({"", "runtime/default"})
ALLOWED_APPARMOR_ANNOTATION_PREFIXES = ("localhost/",)

CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")  # upstream's visitContainers order


class Scope(StrEnum):
    """What a rule's path starts from."""

    POD = "pod"  # the pod spec
    CONTAINER = "container"  # every init, sidecar, regular and ephemeral container
    VOLUME = "volume"  # each of spec.volumes
    PORT = "port"  # each port of each container
    CAPABILITY = "capability"  # each added capability of each container (the element is the value)
    SYSCTL = "sysctl"  # each of spec.securityContext.sysctls
    ANNOTATION = "annotation"  # each pod annotation whose key starts with the rule's key_prefix (the value)


class Test(StrEnum):
    """When a rule's field violates."""

    TRUE = "true"  # the field is true
    SET = "set"  # the field is present at all
    NONEMPTY = "nonempty"  # a non-empty string
    NONZERO = "nonzero"  # a non-zero number
    OUTSIDE = "outside"  # the value is neither an allowed value nor starts with an allowed prefix


@dataclass(frozen=True)
class Control:
    """One baseline control; `id` is also the name of its CEL variable."""

    id: str
    title: str  # as the denial message and the findings name it
    upstream: str  # the pod-security-admission check ID
    fields: str  # for the docs: what it restricts
    allowed: str  # for the docs: what passes


@dataclass(frozen=True)
class Rule:
    """One restricted field. OUTSIDE rules apply once the first `anchor` segments of `path` exist (all of them when
    None); a missing remainder counts as the empty string (e.g. a seccompProfile without a type)."""

    control: str
    scope: Scope
    path: tuple[str, ...]
    test: Test
    allowed: frozenset[str] = frozenset()
    allowed_prefixes: tuple[str, ...] = ()
    anchor: int | None = None
    key_prefix: str = ""  # ANNOTATION scope only
    unless_user_namespace: bool = False  # allowed when spec.hostUsers is false (procMount, from 1.35)


CONTROLS = (
    Control("hostProcess", "Windows HostProcess", "windowsHostProcess",
            "`securityContext.windowsOptions.hostProcess` of the pod and every container", "unset, false"),
    Control("hostNamespaces", "host namespaces", "hostNamespaces", "`hostNetwork`, `hostPID`, `hostIPC`",
            "unset, false"),
    Control("privileged", "privileged", "privileged", "`securityContext.privileged` of every container",
            "unset, false"),
    Control("capabilities", "non-default capabilities", "capabilities_baseline",
            "`securityContext.capabilities.add` of every container",
            "only " + ", ".join(sorted(ALLOWED_CAPABILITIES)) + " (dropping is always allowed)"),
    Control("hostPath", "hostPath volumes", "hostPathVolumes", "`volumes[*].hostPath`", "unset (any host path)"),
    Control("hostPorts", "hostPort", "hostPorts", "`ports[*].hostPort` of every container", "unset, 0"),
    Control("hostProbes", "probe or lifecycle host", "hostProbesAndHostLifecycle",
            "`host` of the httpGet/tcpSocket liveness, readiness and startup probes and postStart/preStop handlers",
            "unset, empty"),
    Control("appArmor", "AppArmor profile", "appArmorProfile",
            "`securityContext.appArmorProfile.type` of the pod and every container; annotations "
            f"`{APPARMOR_ANNOTATION_PREFIX}*`",
            "type RuntimeDefault or Localhost; annotation empty, `runtime/default` or `localhost/*`"),
    Control("seLinux", "SELinux options", "seLinuxOptions",
            "`securityContext.seLinuxOptions` of the pod and every container",
            "type unset, " + ", ".join(sorted(t for t in ALLOWED_SELINUX_TYPES if t)) + "; user and role unset"),
    Control("procMount", "procMount", "procMount", "`securityContext.procMount` of every container",
            "unset, Default (any value when `hostUsers: false`)"),
    Control("seccomp", "seccomp profile", "seccompProfile_baseline",
            "`securityContext.seccompProfile.type` of the pod and every container", "unset, RuntimeDefault, Localhost"),
    Control("sysctls", "sysctls", "sysctls", "`securityContext.sysctls[*].name` of the pod",
            "unset, " + ", ".join(sorted(ALLOWED_SYSCTLS))),
)
CONTROL_BY_ID = {control.id: control for control in CONTROLS}

_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
_HANDLERS = (("lifecycle", "postStart"), ("lifecycle", "preStop"))
_SC = "securityContext"

RULES: tuple[Rule, ...] = (
    Rule("hostProcess", Scope.POD, (_SC, "windowsOptions", "hostProcess"), Test.TRUE),
    Rule("hostProcess", Scope.CONTAINER, (_SC, "windowsOptions", "hostProcess"), Test.TRUE),
    Rule("hostNamespaces", Scope.POD, ("hostNetwork",), Test.TRUE),
    Rule("hostNamespaces", Scope.POD, ("hostPID",), Test.TRUE),
    Rule("hostNamespaces", Scope.POD, ("hostIPC",), Test.TRUE),
    Rule("privileged", Scope.CONTAINER, (_SC, "privileged"), Test.TRUE),
    Rule("capabilities", Scope.CAPABILITY, (), Test.OUTSIDE, allowed=ALLOWED_CAPABILITIES),
    Rule("hostPath", Scope.VOLUME, ("hostPath",), Test.SET),
    Rule("hostPorts", Scope.PORT, ("hostPort",), Test.NONZERO),
    *(Rule("hostProbes", Scope.CONTAINER, (probe, handler, "host"), Test.NONEMPTY)
      for probe in _PROBES for handler in ("httpGet", "tcpSocket")),
    *(Rule("hostProbes", Scope.CONTAINER, (*hook, handler, "host"), Test.NONEMPTY)
      for hook in _HANDLERS for handler in ("httpGet", "tcpSocket")),
    *(Rule("appArmor", scope, (_SC, "appArmorProfile", "type"), Test.OUTSIDE, allowed=ALLOWED_PROFILE_TYPES,
           anchor=2) for scope in (Scope.POD, Scope.CONTAINER)),
    Rule("appArmor", Scope.ANNOTATION, (), Test.OUTSIDE, allowed=ALLOWED_APPARMOR_ANNOTATIONS,
         allowed_prefixes=ALLOWED_APPARMOR_ANNOTATION_PREFIXES, key_prefix=APPARMOR_ANNOTATION_PREFIX),
    *(Rule("seLinux", scope, (_SC, "seLinuxOptions", "type"), Test.OUTSIDE, allowed=ALLOWED_SELINUX_TYPES, anchor=2)
      for scope in (Scope.POD, Scope.CONTAINER)),
    *(Rule("seLinux", scope, (_SC, "seLinuxOptions", field), Test.NONEMPTY)
      for scope in (Scope.POD, Scope.CONTAINER) for field in ("user", "role")),
    Rule("procMount", Scope.CONTAINER, (_SC, "procMount"), Test.OUTSIDE, allowed=frozenset({"Default"}),
         unless_user_namespace=True),
    *(Rule("seccomp", scope, (_SC, "seccompProfile", "type"), Test.OUTSIDE, allowed=ALLOWED_PROFILE_TYPES, anchor=2)
      for scope in (Scope.POD, Scope.CONTAINER)),
    Rule("sysctls", Scope.SYSCTL, ("name",), Test.OUTSIDE, allowed=ALLOWED_SYSCTLS, anchor=0),
)

# List scopes: (the scope they live in, the path of the list from there, the CEL iteration variable).
_LISTS: dict[Scope, tuple[Scope, tuple[str, ...], str]] = {
    Scope.VOLUME: (Scope.POD, ("volumes",), "v"),
    Scope.PORT: (Scope.CONTAINER, ("ports",), "p"),
    Scope.CAPABILITY: (Scope.CONTAINER, (_SC, "capabilities", "add"), "x"),
    Scope.SYSCTL: (Scope.POD, (_SC, "sysctls"), "s"),
}


@dataclass(frozen=True)
class Violation:
    """One forbidden value: the control, which container (kind "pod" for pod-level fields and volumes), where
    (path segments from the pod object: ("spec", "containers", 0, "securityContext", "privileged")) and what."""

    control: str
    container_kind: str  # pod | init container | sidecar container | container | ephemeral container
    container: str
    path: tuple[str | int, ...]
    value: Any

    @property
    def title(self) -> str:
        return CONTROL_BY_ID[self.control].title

    @property
    def field(self) -> str:
        """The path as Kubernetes writes field paths: spec.containers[0].securityContext.privileged."""
        text = ""
        for segment in self.path:
            text += f"[{segment}]" if isinstance(segment, int) else (f".{segment}" if text else segment)
        return text


# ------------------------------------------------------------------------------------------------ evaluation






_MISSING = object()


def _get(base: Any, path: tuple[str, ...]) -> Any:
    for segment in path:
        if not isinstance(base, dict) or base.get(segment) is None:
            return _MISSING
        base = base[segment]
    return base


def _violates(rule: Rule, base: Any) -> tuple[bool, Any]:
    if rule.test is Test.OUTSIDE:
        anchor = len(rule.path) if rule.anchor is None else rule.anchor
        if _get(base, rule.path[:anchor]) is _MISSING:
            return False, None
        value = _get(base, rule.path)
        value = "" if value is _MISSING else value
        allowed = isinstance(value, str) and (value in rule.allowed or value.startswith(rule.allowed_prefixes))
        return not allowed, value
    value = _get(base, rule.path)
    if value is _MISSING:
        return False, None
    if rule.test is Test.TRUE:
        return value is True, value
    if rule.test is Test.NONEMPTY:
        return not (isinstance(value, str) and value == ""), value
    if rule.test is Test.NONZERO:
        return not (isinstance(value, int | float) and not isinstance(value, bool) and value == 0), value
    return True, value  # Test.SET


def _containers(spec: dict[str, Any]) -> Iterator[tuple[dict[str, Any], tuple[str | int, ...], str, str]]:
    for field in CONTAINER_LISTS:
        for position, container in enumerate(_list(spec.get(field))):
            if not isinstance(container, dict):
                continue
            if field == "initContainers":
                kind = "sidecar container" if container.get("restartPolicy") == "Always" else "init container"
            else:
                kind = "ephemeral container" if field == "ephemeralContainers" else "container"
            yield container, ("spec", field, position), kind, str(container.get("name") or "")


def _items(scope: Scope, metadata: dict[str, Any], spec: dict[str, Any],
           key_prefix: str) -> Iterator[tuple[Any, tuple[str | int, ...], str, str]]:
    """(base, path of base, container kind, container name) for every place a rule of the scope looks at."""
    if scope is Scope.POD:
        yield spec, ("spec",), "pod", ""
    elif scope is Scope.CONTAINER:
        yield from _containers(spec)
    elif scope is Scope.ANNOTATION:
        for key, value in sorted(_dict(metadata.get("annotations")).items()):
            if isinstance(key, str) and key.startswith(key_prefix):
                yield value, ("metadata", "annotations", key), "pod", key[len(key_prefix):]
    else:
        parent, list_path, _ = _LISTS[scope]
        for base, base_path, kind, name in _items(parent, metadata, spec, key_prefix):
            for position, item in enumerate(_list(_get(base, list_path))):
                yield item, (*base_path, *list_path, position), kind, name


def baseline_violations(metadata: Any, spec: Any) -> list[Violation]:
    """Every baseline violation of a pod (or pod template) given its metadata and spec, in table order."""
    metadata, spec = _dict(metadata), _dict(spec)
    user_namespace = spec.get("hostUsers") is False
    found = []
    for rule in RULES:
        if rule.unless_user_namespace and user_namespace:
            continue
        for base, base_path, kind, name in _items(rule.scope, metadata, spec, rule.key_prefix):
            violates, value = _violates(rule, base)
            if violates:
                found.append(Violation(rule.control, kind, name, (*base_path, *rule.path), value))
    return found


def pod_violations(pod: Any) -> list[Violation]:
    pod = _dict(pod)
    return baseline_violations(pod.get("metadata"), pod.get("spec"))


def prefilter_keys() -> list[str]:
    """JSON text that every violating pod contains (a quoted key, or an annotation key prefix): a pod whose JSON has
    none of them cannot violate, so a text search for them is a superset prefilter."""
    keys = []
    for rule in RULES:
        if rule.scope is Scope.ANNOTATION:
            key = f'"{rule.key_prefix}'
        else:
            anchor = len(rule.path) if rule.anchor is None else rule.anchor
            key = f'"{rule.path[anchor - 1] if anchor else _LISTS[rule.scope][1][-1]}"'
        if key not in keys:
            keys.append(key)
    return keys


@cache
def _prefilter() -> re.Pattern[bytes]:
    return re.compile("|".join(re.escape(key) for key in prefilter_keys()).encode())


def pod_violates_baseline(pod: Any) -> bool:
    """Whether the pod has any baseline violation (`pod_violations` is not empty), quickly: a pod whose JSON contains
    no prefilter key cannot violate, so most pods are answered by one search of their serialized text (~30 µs on
    `large`'s pods) instead of walking every rule over every container (~90 µs). The sync classifies every pod it
    stores with it."""
    try:
        text = orjson.dumps(pod)
    except TypeError:  # not JSON (never from a cluster): no shortcut
        return bool(pod_violations(pod))
    return _prefilter().search(text) is not None and bool(pod_violations(pod))


# ------------------------------------------------------------------------------------------------ CEL


def _cel_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _has_chain(base: str, path: tuple[str, ...]) -> list[str]:
    return [f"has({base}.{'.'.join(path[:depth])})" for depth in range(1, len(path) + 1)]


def _rule_cel(rule: Rule, base: str) -> str:
    """The rule's violation as CEL over `base` (a CEL expression for the object the path starts from)."""
    leaf = f"{base}.{'.'.join(rule.path)}" if rule.path else base
    if rule.test is Test.OUTSIDE:
        anchor = len(rule.path) if rule.anchor is None else rule.anchor
        terms = _has_chain(base, rule.path[:anchor])
        value = leaf
        if anchor < len(rule.path):
            value = f"({' && '.join(_has_chain(base, rule.path)[anchor:])} ? {leaf} : '')"
        allowed = [f"{value} in [{', '.join(_cel_string(v) for v in sorted(rule.allowed))}]"]
        allowed += [f"{value}.startsWith({_cel_string(prefix)})" for prefix in rule.allowed_prefixes]
        terms.append(f"!({' || '.join(allowed)})")
    else:
        terms = _has_chain(base, rule.path)
        terms += {Test.TRUE: [f"{leaf} == true"], Test.NONEMPTY: [f"{leaf} != ''"],
                  Test.NONZERO: [f"{leaf} != 0"], Test.SET: []}[rule.test]
    if rule.unless_user_namespace:
        terms.insert(0, "!(has(object.spec.hostUsers) && object.spec.hostUsers == false)")
    return " && ".join(terms) if terms else "true"


def _scope_cel(scope: Scope, rules: list[Rule]) -> str:
    """The rules of one scope, ORed inside one traversal of it."""
    if scope is Scope.ANNOTATION:  # the value is looked up by the key the traversal binds
        value = "object.metadata.annotations[k]"
        return " || ".join(
            f"has(object.metadata.annotations) && object.metadata.annotations.exists(k, "
            f"k.startsWith({_cel_string(rule.key_prefix)}) && {_rule_cel(rule, value)})" for rule in rules)
    base = {Scope.POD: "object.spec", Scope.CONTAINER: "c"}.get(scope) or _LISTS[scope][2]
    conditions = [_rule_cel(rule, base) for rule in rules]
    body = conditions[0] if len(conditions) == 1 else " || ".join(f"({c})" for c in conditions)
    if scope is Scope.POD:
        return body
    if scope is Scope.CONTAINER:
        return f"variables.containers.exists(c, {body})"
    parent, list_path, var = _LISTS[scope]
    outer = "c" if parent is Scope.CONTAINER else "object.spec"
    inner = " && ".join([*_has_chain(outer, list_path), f"{outer}.{'.'.join(list_path)}.exists({var}, {body})"])
    return inner if parent is Scope.POD else f"variables.containers.exists(c, {inner})"


def cel_variables() -> list[dict[str, str]]:
    """ValidatingAdmissionPolicy variables over `object` (a Pod): `containers`, one boolean per control (named by its
    id) and `baselineViolations`, the titles of the violated controls (empty: the pod meets the baseline)."""
    variables = [{"name": "containers", "expression": " + ".join(
        f"(has(object.spec.{field}) ? object.spec.{field} : [])" for field in CONTAINER_LISTS)}]
    for control in CONTROLS:
        by_scope: dict[Scope, list[Rule]] = {}
        for rule in RULES:
            if rule.control == control.id:
                by_scope.setdefault(rule.scope, []).append(rule)
        variables.append({"name": control.id, "expression": " || ".join(
            f"({_scope_cel(scope, rules)})" if len(by_scope) > 1 else _scope_cel(scope, rules)
            for scope, rules in by_scope.items())})
    variables.append({"name": "baselineViolations", "expression": " + ".join(
        f"(variables.{control.id} ? [{_cel_string(control.title)}] : [])" for control in CONTROLS)})
    return variables
