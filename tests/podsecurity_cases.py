"""The one case list for "needs a privileged exception" (= violates the baseline Pod Security Standard).

The same cases run through the evaluator (tests/inventory/test_podsecurity.py), the generated admission policy in
the simulator (tests/kubesim/test_admission_policy.py), the validator's policy layer
(tests/catalog/test_validation.py) and the violation scan on synced pods (tests/portal/test_violations_baseline.py).
Each case names the controls it violates; an empty set is a pod that must pass everywhere.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

IMAGE = "registry.example.com/tools/debug:1.0"


@dataclass(frozen=True)
class Case:
    id: str
    violates: frozenset[str]
    spec: dict[str, Any] = field(default_factory=dict)  # merged over a one-container pod spec
    container: dict[str, Any] = field(default_factory=dict)  # merged into the main container
    annotations: dict[str, str] = field(default_factory=dict)
    ephemeral: dict[str, Any] | None = None  # an ephemeral container added after the pod exists

    @property
    def needs_exception(self) -> bool:
        return bool(self.violates)

    def pod(self, name: str, *, with_ephemeral: bool = True) -> dict[str, Any]:
        """The pod (without a namespace). `with_ephemeral=False` leaves out the ephemeral container, for creating
        the pod first and adding it through the pods/ephemeralcontainers subresource."""
        main = {"name": "main", "image": IMAGE, **copy.deepcopy(self.container)}
        spec: dict[str, Any] = {"containers": [main], **copy.deepcopy(self.spec)}
        if self.ephemeral is not None and with_ephemeral:
            spec["ephemeralContainers"] = [self.ephemeral_container()]
        metadata: dict[str, Any] = {"name": name}
        if self.annotations:
            metadata["annotations"] = dict(self.annotations)
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}

    def ephemeral_container(self) -> dict[str, Any]:
        return {"name": "debugger", "image": IMAGE, "targetContainerName": "main", **copy.deepcopy(self.ephemeral or {})}


def _host_path(path: str) -> Case:
    slug = path.strip("/").replace("/", "-").replace(".", "dot") or "root"
    return Case(f"hostpath-{slug}-{len(path)}", frozenset({"hostPath"}), spec={
        "volumes": [{"name": "host", "hostPath": {"path": path}}]},
        container={"volumeMounts": [{"name": "host", "mountPath": "/host"}]})


def _privileged(kind: str) -> dict[str, Any]:
    return {"name": kind, "image": IMAGE, "securityContext": {"privileged": True}}


def _capabilities(*added: str) -> dict[str, Any]:
    return {"securityContext": {"capabilities": {"add": list(added)}}}


HARDENED = {
    "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"},
                        "appArmorProfile": {"type": "RuntimeDefault"}, "seLinuxOptions": {"type": "container_t"},
                        "sysctls": [{"name": "net.ipv4.ip_local_port_range", "value": "1024 65000"}]},
    "volumes": [{"name": "scratch", "emptyDir": {}}],
}

CASES: tuple[Case, ...] = (
    # pods that meet the baseline
    Case("clean-minimal", frozenset()),
    Case("clean-hardened", frozenset(), spec=HARDENED, container={
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"],
                                                                                  "add": ["NET_BIND_SERVICE"]},
                            "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/gpu.json"},
                            "procMount": "Default", "privileged": False},
        "ports": [{"containerPort": 8080}, {"containerPort": 9090, "hostPort": 0}],
        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}}}),
    Case("clean-default-capabilities", frozenset(), container=_capabilities("CHOWN", "SETUID", "SYS_CHROOT")),
    Case("clean-apparmor-annotations", frozenset(), annotations={
        "container.apparmor.security.beta.kubernetes.io/main": "localhost/gpu-profile",
        "container.apparmor.security.beta.kubernetes.io/other": "runtime/default"}),
    Case("clean-unmasked-proc-in-user-namespace", frozenset(), spec={"hostUsers": False},
         container={"securityContext": {"procMount": "Unmasked"}}),
    Case("clean-host-false", frozenset(), spec={"hostNetwork": False, "hostPID": False, "hostIPC": False}),
    # any hostPath, however it is spelled
    _host_path("/"),
    _host_path("//"),
    _host_path("/./dev"),
    _host_path("/dev/nvidia0"),
    _host_path("/proc/1/root"),
    _host_path("/run/containerd/containerd.sock"),
    _host_path("/var/lib/kubelet"),
    _host_path("/data/datasets"),
    # privileged, in every kind of container
    Case("privileged-container", frozenset({"privileged"}), container={"securityContext": {"privileged": True}}),
    Case("privileged-init-container", frozenset({"privileged"}), spec={"initContainers": [_privileged("setup")]}),
    Case("privileged-sidecar", frozenset({"privileged"}), spec={
        "initContainers": [{**_privileged("sidecar"), "restartPolicy": "Always"}]}),
    Case("privileged-ephemeral-container", frozenset({"privileged"}), ephemeral={
        "securityContext": {"privileged": True}}),
    Case("sys-admin-ephemeral-container", frozenset({"capabilities"}), ephemeral=_capabilities("SYS_ADMIN")),
    # capabilities beyond the default set
    Case("capability-all", frozenset({"capabilities"}), container=_capabilities("ALL")),
    Case("capability-sys-admin", frozenset({"capabilities"}), container=_capabilities("SYS_ADMIN")),
    Case("capability-cap-sys-admin", frozenset({"capabilities"}), container=_capabilities("CAP_SYS_ADMIN")),
    Case("capability-net-raw", frozenset({"capabilities"}), container=_capabilities("CHOWN", "NET_RAW")),
    Case("capability-sidecar-sys-ptrace", frozenset({"capabilities"}), spec={"initContainers": [
        {"name": "sidecar", "image": IMAGE, "restartPolicy": "Always", **_capabilities("SYS_PTRACE")}]}),
    # host namespaces and ports
    Case("host-pid", frozenset({"hostNamespaces"}), spec={"hostPID": True}),
    Case("host-ipc", frozenset({"hostNamespaces"}), spec={"hostIPC": True}),
    Case("host-network", frozenset({"hostNamespaces"}), spec={"hostNetwork": True}),
    Case("host-port", frozenset({"hostPorts"}), container={"ports": [{"containerPort": 80, "hostPort": 8080}]}),
    Case("probe-host", frozenset({"hostProbes"}), container={
        "readinessProbe": {"tcpSocket": {"port": 10250, "host": "169.254.169.254"}}}),
    # /proc, seccomp, AppArmor, SELinux, sysctls, HostProcess
    Case("proc-mount-unmasked", frozenset({"procMount"}), container={"securityContext": {"procMount": "Unmasked"}}),
    Case("seccomp-unconfined-pod", frozenset({"seccomp"}), spec={
        "securityContext": {"seccompProfile": {"type": "Unconfined"}}}),
    Case("seccomp-unconfined-container", frozenset({"seccomp"}), container={
        "securityContext": {"seccompProfile": {"type": "Unconfined"}}}),
    Case("apparmor-unconfined-container", frozenset({"appArmor"}), container={
        "securityContext": {"appArmorProfile": {"type": "Unconfined"}}}),
    Case("apparmor-unconfined-annotation", frozenset({"appArmor"}), annotations={
        "container.apparmor.security.beta.kubernetes.io/main": "unconfined"}),
    Case("selinux-type", frozenset({"seLinux"}), spec={"securityContext": {"seLinuxOptions": {"type": "spc_t"}}}),
    Case("selinux-user", frozenset({"seLinux"}), container={
        "securityContext": {"seLinuxOptions": {"user": "system_u"}}}),
    Case("sysctl-unsafe", frozenset({"sysctls"}), spec={"securityContext": {"sysctls": [
        {"name": "net.ipv4.tcp_syncookies", "value": "1"}, {"name": "kernel.msgmax", "value": "65536"}]}}),
    Case("windows-host-process", frozenset({"hostProcess", "hostNamespaces"}), spec={  # HostProcess needs hostNetwork
        "securityContext": {"windowsOptions": {"hostProcess": True}}, "hostNetwork": True}),
    Case("several-at-once", frozenset({"privileged", "hostNamespaces", "hostPath"}), spec={
        "hostPID": True, "volumes": [{"name": "root", "hostPath": {"path": "/"}}]},
        container={"securityContext": {"privileged": True}, "volumeMounts": [{"name": "root", "mountPath": "/host"}]}),
)
CASE_IDS = [case.id for case in CASES]
