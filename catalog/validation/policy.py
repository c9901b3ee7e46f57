"""Layer 3: the platform's security and hygiene policy for pod specs (Pods and Job templates, all containers).

Errors are what bypasses device isolation or the node: every violation of the baseline Pod Security Standard
(inventory.k8s.podsecurity, the same definition the admission policy and the violation scan use: privileged, host
namespaces, any hostPath, added capabilities, …), and hand-set *_VISIBLE_DEVICES. Warnings are risky but sometimes
intended; info is advice. A pod that violates the baseline needs an approved exception in the portal, not a
manifest edit.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from catalog.validation.context import ValidationContext
from catalog.validation.findings import ValidationFinding, join, plain, show
from catalog.validation.objects import PodHolder, containers
from inventory.k8s.podsecurity import ALLOWED_CAPABILITIES, CONTROL_BY_ID, Violation, baseline_violations
from inventory.k8s.semantics import as_dict, as_list, as_str, is_extended_resource

VISIBLE_DEVICES_VARIABLES = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
DANGEROUS_CAPABILITIES = {"SYS_ADMIN", "CAP_SYS_ADMIN", "ALL"}


def _finding(severity: str, path: str, message: str, code: str, fix: str = "") -> ValidationFinding:
    return ValidationFinding("policy", severity, path, message, fix, code)


def check_policy(holder: PodHolder, context: ValidationContext) -> list[ValidationFinding]:
    spec, spec_path = holder.spec, holder.spec_path
    findings = _baseline(holder)
    for what, container, path in containers(spec, spec_path):
        findings += _privilege_escalation(what, container, path)
        findings += _devices(what, container, path)
        if what != "ephemeral container":  # ephemeral containers may not set resources at all
            findings += _requests(what, container, path)
        findings += _image(container, path)
    findings += _tolerations(spec, spec_path, context)
    return findings


def _baseline(holder: PodHolder) -> list[ValidationFinding]:
    """Every baseline Pod Security Standard violation (inventory.k8s.podsecurity, the definition the admission
    policy and the violation scan use) is an error: the pod is refused without a privileged exception."""
    findings = []
    for violation in baseline_violations(holder.metadata, holder.spec):
        root, *rest = violation.path
        path = join(holder.spec_path if root == "spec" else holder.metadata_path, *rest)
        findings.append(_BASELINE[violation.control](violation, path))
    return findings


def _error(path: str, message: str, code: str, fix: str) -> ValidationFinding:
    return _finding("error", path, message, code, fix + EXCEPTION_HINT)


def _in(violation: Violation) -> str:
    return f"the {violation.container_kind} {show(violation.container)}" if violation.container else "the pod"


def _privileged(v: Violation, path: str) -> ValidationFinding:
    return _error(path, f"{_in(v)} is privileged: it sees every device of the node and bypasses GPU isolation",
                  "privileged", "remove privileged")


def _capability(v: Violation, path: str) -> ValidationFinding:
    if isinstance(v.value, str) and v.value.upper() in DANGEROUS_CAPABILITIES:
        return _error(path, f"capability {show(v.value)} grants SYS_ADMIN, which is close to privileged (mounts, "
                      "devices)", "capability-sys-admin", "drop it; add only the narrow capability the program needs")
    return _error(path, f"capability {show(v.value)} of {_in(v)} is not in the default set the baseline allows "
                  f"({', '.join(sorted(ALLOWED_CAPABILITIES))})", "capability",
                  "drop it; add only capabilities of the default set")


def _host_path(v: Violation, path: str) -> ValidationFinding:
    host_path = as_dict(v.value)
    raw = as_str(host_path.get("path"))
    normalized = posixpath.normpath(re.sub(r"^/+", "/", raw)) if raw else ""
    path = join(path, "path")
    if normalized == "/dev" or normalized.startswith("/dev/") or host_path.get("type") in ("CharDevice", "BlockDevice"):
        return _error(path, f"hostPath {show(raw)} mounts host devices into the pod, around the device plugin / DRA "
                      "driver", "hostpath-device", "request the devices through an extended resource or a ResourceClaim")
    if normalized == "/":
        return _error(path, f"hostPath {show(raw)} mounts the node's root filesystem, /dev included",
                      "hostpath-device", "remove the hostPath volume")
    return _error(path, f"hostPath {show(raw)} gives the pod the node's filesystem (through /proc a node path "
                  "reaches the node's root, through a runtime socket every container, through the kubelet's directory "
                  "every pod's secrets)", "hostpath", "use a PersistentVolumeClaim, ConfigMap or emptyDir instead")


def _host_namespace(v: Violation, path: str) -> ValidationFinding:
    name = str(v.path[-1])
    return _error(path, f"{name}: true shares the node's namespace with the pod", "host-namespace", f"remove {name}")


def _simple(code: str, message: str, fix: str) -> Any:
    def finding(v: Violation, path: str) -> ValidationFinding:
        return _error(path, message.format(where=_in(v), value=show(v.value)), code, fix)
    return finding


EXCEPTION_HINT = "; if a tool truly needs it, request a privileged exception in the portal"
_BASELINE: dict[str, Any] = {
    "privileged": _privileged,
    "capabilities": _capability,
    "hostPath": _host_path,
    "hostNamespaces": _host_namespace,
    "hostPorts": _simple("host-port", "{where} binds hostPort {value} on the node's network", "remove hostPort; "
                         "expose the port through a Service"),
    "hostProbes": _simple("probe-host", "{where} probes or hooks the host {value}: the kubelet would connect to "
                          "another machine on the pod's behalf", "remove host (the pod's IP is the default)"),
    "appArmor": _simple("apparmor", "{where} sets the AppArmor profile {value}; the baseline allows only "
                        "RuntimeDefault and Localhost profiles", "remove it or use RuntimeDefault"),
    "seLinux": _simple("selinux", "{where} sets the SELinux option {value}; the baseline allows only the container "
                       "types and no user or role", "remove the seLinuxOptions"),
    "procMount": _simple("proc-mount", "{where} sets procMount {value}: an unmasked /proc exposes the node's "
                         "kernel interfaces", "remove procMount (or run the pod with hostUsers: false)"),
    "seccomp": _simple("seccomp", "{where} sets the seccomp profile {value}: Unconfined turns off syscall "
                       "filtering", "use RuntimeDefault"),
    "sysctls": _simple("sysctl", "{where} sets the sysctl {value}, which is not in the baseline's safe set",
                       "remove it, or set it on the node"),
    "hostProcess": _simple("host-process", "{where} runs as a Windows HostProcess, with the node's privileges",
                           "remove windowsOptions.hostProcess"),
}
if set(_BASELINE) != set(CONTROL_BY_ID):  # a control added to the table must get its finding here
    raise ImportError(f"catalog.validation.policy has no finding for {sorted(set(CONTROL_BY_ID) - set(_BASELINE))}")


def _privilege_escalation(what: str, container: dict[str, Any], path: str) -> list[ValidationFinding]:
    """allowPrivilegeEscalation is a control of the *restricted* profile, not the baseline: a warning, no exception
    needed."""
    security = as_dict(container.get("securityContext"))
    if security.get("allowPrivilegeEscalation") is not True or security.get("privileged") is True:
        return []
    return [_finding("warning", join(path, "securityContext", "allowPrivilegeEscalation"),
                     f"the {what} allows privilege escalation (setuid binaries can gain more privileges than the "
                     "process)", "allow-privilege-escalation", "set allowPrivilegeEscalation: false")]


def _devices(what: str, container: dict[str, Any], path: str) -> list[ValidationFinding]:
    findings = []
    for position, device in enumerate(as_list(container.get("volumeDevices"))):
        findings.append(_finding(
            "warning", join(path, "volumeDevices", position),
            f"the {what} maps a raw block device ({show(as_dict(device).get('devicePath'))}); accelerators are "
            "never attached this way", "volume-devices",
            "request accelerators with an extended resource or a ResourceClaim",
        ))
    for position, variable in enumerate(as_list(container.get("env"))):
        name = as_dict(variable).get("name")
        if name in VISIBLE_DEVICES_VARIABLES:
            findings.append(_finding(
                "error", join(path, "env", position),
                f"{name} is set by hand: the device plugin or DRA driver sets it to the devices allocated to "
                "this container; overriding it can expose or hide other devices (\"all\" exposes every GPU of "
                "the node)", "visible-devices-override",
                f"remove {name} and request the devices in resources",
            ))
    return findings


def _requests(what: str, container: dict[str, Any], path: str) -> list[ValidationFinding]:
    resources = as_dict(container.get("resources"))
    requests, limits = as_dict(resources.get("requests")), as_dict(resources.get("limits"))
    missing = [name for name in ("cpu", "memory") if name not in requests and name not in limits]
    if not missing:
        return []
    return [_finding(
        "warning", join(path, "resources", "requests"),
        f"the {what} requests no {' and no '.join(missing)}: the scheduler places it as if it needed none, and a GPU "
        "job starved of CPU or memory wastes the GPU", "missing-requests",
        "set requests for " + " and ".join(missing),
    )]


def _image(container: dict[str, Any], path: str) -> list[ValidationFinding]:
    image = container.get("image")
    if not isinstance(image, str) or not image or "@" in image:
        return []
    last = image.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ""
    if tag and tag != "latest":
        return []
    state = "the `latest` tag" if tag else "no tag (Kubernetes pulls `latest`)"
    return [_finding("info", join(path, "image"),
                     f"image {show(image)} uses {state}: the version can change under you and the driver/CUDA "
                     "compatibility check cannot be trusted", "image-latest", "pin a version tag or a digest")]


def _requested_extended(spec: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for _what, container, _path in containers(spec, ""):
        resources = as_dict(container.get("resources"))
        for section in ("requests", "limits"):
            names.update(name for name in as_dict(resources.get(section)) if is_extended_resource(name))
    return names


def _required_terms(spec: dict[str, Any]) -> tuple[dict[str, Any], list[list[dict[str, Any]]]]:
    """The pod's nodeSelector and its required node affinity terms (ORed; expressions inside a term are ANDed)."""
    selector = {k: v for k, v in as_dict(spec.get("nodeSelector")).items() if isinstance(v, str)}
    required = as_dict(as_dict(as_dict(spec.get("affinity")).get("nodeAffinity")).get(
        "requiredDuringSchedulingIgnoredDuringExecution"))
    terms = [as_list(as_dict(term).get("matchExpressions")) for term in as_list(required.get("nodeSelectorTerms"))]
    return selector, [[as_dict(e) for e in term] for term in terms]


def _expression_pins(expression: dict[str, Any], labels: dict[str, str]) -> bool:
    key = expression.get("key")
    if key not in labels:
        return False
    operator = expression.get("operator")
    if operator == "Exists":
        return True
    values = as_list(expression.get("values"))
    return operator == "In" and bool(values) and all(value == labels[key] for value in values)


def _attracted(spec: dict[str, Any], taint_key: str, pool_labels: dict[str, str] | None) -> bool:
    """True when the pod's required placement keeps it on the pool whose nodes carry the taint."""
    selector, terms = _required_terms(spec)
    if not pool_labels:  # the pool's labels are unknown: any required placement counts
        return bool(selector) or (bool(terms) and all(terms))
    if any(labels_value == pool_labels.get(key) for key, labels_value in selector.items()):
        return True
    if taint_key in selector:
        return True
    return bool(terms) and all(
        any(_expression_pins(expression, pool_labels) or expression.get("key") == taint_key for expression in term)
        for term in terms
    )


def _tolerations(spec: dict[str, Any], spec_path: str, context: ValidationContext) -> list[ValidationFinding]:
    if context.node_taints is None:
        return []
    findings = []
    requested = _requested_extended(spec)
    claims = bool(as_list(spec.get("resourceClaims")))
    for position, toleration in enumerate(as_list(spec.get("tolerations"))):
        toleration = as_dict(toleration)
        path = join(spec_path, "tolerations", position)
        key = as_str(toleration.get("key"))
        operator = toleration.get("operator") or "Equal"
        if not key and operator == "Exists":
            findings.append(_finding(
                "warning", path, "this toleration tolerates every taint, dedicated pools and failing nodes included",
                "toleration-tolerates-everything", "tolerate only the taint of the pool you mean",
            ))
            continue
        if key not in context.node_taints or key in requested:
            continue  # an extended resource request attracts the pod to nodes that offer it
        if claims and is_extended_resource(key):
            continue  # a device taint (nvidia.com/gpu): the claim's allocation attracts the pod to device nodes
        pool_labels = (context.node_taint_labels or {}).get(key)
        if not _attracted(spec, key, pool_labels):
            labels = ", ".join(f"{plain(k)}={plain(v)}" for k, v in sorted((pool_labels or {}).items())[:5])
            fix = ("add a required node affinity (or nodeSelector) on the pool's labels"
                   + (f", e.g. {labels}" if labels else ""))
            findings.append(_finding(
                "warning", path,
                f"the pod tolerates the dedicated-pool taint {show(key)} but has no required node affinity or "
                "nodeSelector for that pool: a toleration only permits, it does not attract, so the pod may land "
                "elsewhere and the pool's nodes stay idle", "toleration-without-affinity", fix,
            ))
    return findings
