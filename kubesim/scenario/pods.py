"""Pod objects: spec and status for each state (running, pending, failed, succeeded, creating, crashloop...)."""

from __future__ import annotations

from typing import Any

from .common import ADMISSION_ERROR_REASON, HOST_DEVICE_VOLUME, _digest, _frac, _ts, _uid
from .quantities import _fmt_bytes, _fmt_cpu
from .state import NodeState

CONTAINER_NAME = "main"  # every generated pod has one container
# Every pod gets the two NoExecute tolerations the DefaultTolerationSeconds admission plugin adds.
DEFAULT_TOLERATIONS = (
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
)


def _condition(at: str, kind: str, ok: bool, reason: str | None = None) -> dict:
    c = {"type": kind, "status": "True" if ok else "False", "lastProbeTime": None, "lastTransitionTime": at}
    if reason:
        c["reason"] = reason
    return c


class PodsMixin:
    """The complete Pod object of a placed (or pending) workload replica."""

    def _pod_object(
        self,
        w: dict,
        ns: str,
        name: str,
        pod_name: str,
        pod_uid: str,
        i: int,
        created: float,
        state: str,
        controller: str,
        restart: str,
        image: str,
        cpu: int,
        mem: int,
        ext: dict[str, int],
        refs: list[dict],
        pod_claims: list,
        node: NodeState | None,
        selector: dict,
        tolerations: list[dict],
        labels: dict,
        tmpl_hash: str,
        message: str | None,
        extended_status: dict[str, Any] | None = None,
        rejected: str = "",
    ) -> dict:
        container = self._pod_container(w, image, cpu, mem, ext, refs, controller)
        spec = self._pod_spec(w, container, restart, tolerations, selector, node, refs)
        meta = self._pod_meta(ns, name, pod_name, pod_uid, i, created, controller, labels, tmpl_hash)
        status = self._pod_status(w, ns, pod_name, pod_uid, created, state, controller, image, node, message, rejected)
        gen = [(r["name"], c.name) for r, c in pod_claims if c.template is not None]
        if gen and not rejected:
            status["resourceClaimStatuses"] = [{"name": n, "resourceClaimName": c} for n, c in gen]
        if extended_status:
            status["extendedResourceClaimStatus"] = extended_status
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}

    @staticmethod
    def _pod_container(
        w: dict, image: str, cpu: int, mem: int, ext: dict[str, int], refs: list[dict], controller: str
    ) -> dict[str, Any]:
        """The pod's one container: requests, limits (no CPU limit for Jobs: Burstable), claims, command, device."""
        requests = {"cpu": _fmt_cpu(cpu), "memory": _fmt_bytes(mem), **{k: str(v) for k, v in ext.items()}}
        limits = {"memory": _fmt_bytes(mem), **{k: str(v) for k, v in ext.items()}}
        if controller != "Job":
            limits["cpu"] = _fmt_cpu(cpu)
        resources: dict[str, Any] = {"requests": requests, "limits": limits}
        if refs:
            resources["claims"] = [{"name": r["name"]} for r in refs]
        container: dict[str, Any] = {
            "name": CONTAINER_NAME,
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "resources": resources,
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
        }
        if w.get("command"):
            container["command"] = [str(c) for c in w["command"]]
        if w.get("privileged"):
            container["securityContext"] = {"privileged": True}
        if w.get("hostDevice"):
            container["volumeMounts"] = [{"name": HOST_DEVICE_VOLUME, "mountPath": w["hostDevice"]}]
        return container

    @staticmethod
    def _pod_spec(
        w: dict,
        container: dict[str, Any],
        restart: str,
        tolerations: list[dict],
        selector: dict,
        node: NodeState | None,
        refs: list[dict],
    ) -> dict[str, Any]:
        sa = str(w.get("serviceAccount", w.get("serviceAccountName", "default")))
        spec: dict[str, Any] = {
            "containers": [container],
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": sa,
            "serviceAccount": sa,
            "schedulerName": "default-scheduler",
            "securityContext": {},
            "tolerations": [*(dict(t) for t in tolerations), *(dict(t) for t in DEFAULT_TOLERATIONS)],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        }
        if w.get("hostDevice"):
            spec["volumes"] = [{"name": HOST_DEVICE_VOLUME, "hostPath": {"path": w["hostDevice"], "type": ""}}]
        if w.get("priorityClassName"):
            spec["priorityClassName"] = str(w["priorityClassName"])
        if selector:
            spec["nodeSelector"] = dict(selector)
        if node:
            spec["nodeName"] = node.name
        if refs:
            spec["resourceClaims"] = [
                {"name": r["name"], "resourceClaimTemplateName": r["template"]}
                if "template" in r
                else {"name": r["name"], "resourceClaimName": r["claim"]}
                for r in refs
            ]
        return spec

    def _pod_meta(
        self,
        ns: str,
        name: str,
        pod_name: str,
        pod_uid: str,
        i: int,
        created: float,
        controller: str,
        labels: dict,
        tmpl_hash: str,
    ) -> dict[str, Any]:
        """Metadata with the labels and the owner reference the pod's controller would set."""
        meta: dict[str, Any] = {
            "name": pod_name,
            "namespace": ns,
            "uid": pod_uid,
            "creationTimestamp": _ts(created),
            "labels": dict(labels),
        }
        if controller == "Deployment":
            meta["labels"]["pod-template-hash"] = tmpl_hash
            owner = ("apps/v1", "ReplicaSet", f"{name}-{tmpl_hash}")
        elif controller == "StatefulSet":
            meta["labels"]["apps.kubernetes.io/pod-index"] = str(i)
            meta["labels"]["statefulset.kubernetes.io/pod-name"] = pod_name
            owner = ("apps/v1", "StatefulSet", name)
        elif controller == "Job":
            meta["labels"]["batch.kubernetes.io/job-name"] = name
            meta["labels"]["job-name"] = name
            owner = ("batch/v1", "Job", name)
        else:
            owner = None
        if owner:
            meta["ownerReferences"] = [
                {
                    "apiVersion": owner[0],
                    "kind": owner[1],
                    "name": owner[2],
                    "uid": _uid(self.seed, owner[1], ns, owner[2]),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        return meta

    def _pod_status(
        self,
        w: dict,
        ns: str,
        pod_name: str,
        pod_uid: str,
        created: float,
        state: str,
        controller: str,
        image: str,
        node: NodeState | None,
        message: str | None,
        rejected: str,
    ) -> dict[str, Any]:
        guaranteed = controller != "Job"
        status: dict[str, Any] = {"qosClass": "Guaranteed" if guaranteed else "Burstable"}
        t0 = created + 2
        sched = {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": _ts(t0)}
        if rejected:
            # The kubelet's rejectPod: phase, reason and message; the scheduler's PodScheduled stays. No container
            # was created, so no container status and no start time.
            status.update({"phase": "Failed", "reason": ADMISSION_ERROR_REASON, "message": f"Pod was rejected: {rejected}",
                           "conditions": [sched]})
        elif state == "pending":
            status["phase"] = "Pending"
            status["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": _ts(t0),
                    "reason": "Unschedulable",
                    "message": message,
                }
            ]
        else:
            self._bound_pod_status(status, w, ns, pod_name, pod_uid, t0, state, image, node, sched)
        return status

    def _bound_pod_status(
        self,
        status: dict[str, Any],
        w: dict,
        ns: str,
        pod_name: str,
        pod_uid: str,
        t0: float,
        state: str,
        image: str,
        node: NodeState,
        sched: dict,
    ) -> None:
        """The status of a pod on a node: its IP, phase, conditions and the container's state."""
        node.pod_ip_seq += 1
        pod_ip = f"{node.pod_cidr.rsplit('.', 1)[0]}.{(node.pod_ip_seq % 250) + 2}"
        status.update({"hostIP": node.ip, "hostIPs": [{"ip": node.ip}], "startTime": _ts(t0 + 1)})
        ready = state == "running"
        image_id = f"{image.split(':')[0]}@sha256:{_digest('image', image).hex()}"
        cs: dict[str, Any] = {
            "name": CONTAINER_NAME,
            "image": image,
            "imageID": image_id if state != "creating" else "",
            "restartCount": 0,
            "ready": ready,
            "started": ready,
        }
        cid = f"containerd://{_digest(self.seed, 'ctr', ns, pod_name).hex()}"
        status["phase"], conds = self._container_lifecycle(cs, cid, w, ns, pod_name, pod_uid, t0, state)
        conds.append(sched)
        if state in ("running", "crashloop"):  # the phases with a pod IP
            status["podIP"] = pod_ip
            status["podIPs"] = [{"ip": pod_ip}]
        status["conditions"] = conds
        status["containerStatuses"] = [cs]

    def _container_lifecycle(
        self, cs: dict[str, Any], cid: str, w: dict, ns: str, pod_name: str, pod_uid: str, t0: float, state: str
    ) -> tuple[str, list[dict]]:
        """The phase and the conditions (but PodScheduled) of a bound pod in `state`; fills in the container's."""
        at = _ts(t0 + 30)
        unready = f"containers with unready status: [{CONTAINER_NAME}]"
        if state == "running":
            cs.update({"containerID": cid, "state": {"running": {"startedAt": _ts(t0 + 30)}}})
            return "Running", [
                _condition(at, "PodReadyToStartContainers", True),
                _condition(at, "Initialized", True),
                _condition(at, "Ready", True),
                _condition(at, "ContainersReady", True),
            ]
        if state == "creating":
            cs["state"] = {"waiting": {"reason": "ContainerCreating"}}
            conds = [
                _condition(at, "PodReadyToStartContainers", False),
                _condition(at, "Initialized", True),
                _condition(at, "Ready", False, "ContainersNotReady"),
                _condition(at, "ContainersReady", False, "ContainersNotReady"),
            ]
            conds[2]["message"] = conds[3]["message"] = unready
            return "Pending", conds
        if state == "crashloop":
            restarts = 3 + int(_frac(self.seed, "restarts", pod_uid) * 20)
            cs.update(
                {
                    "containerID": cid,
                    "restartCount": restarts,
                    "started": False,
                    "state": {
                        "waiting": {
                            "reason": "CrashLoopBackOff",
                            "message": f"back-off 5m0s restarting failed container={CONTAINER_NAME} pod={pod_name}_{ns}({pod_uid})",
                        }
                    },
                    "lastState": {
                        "terminated": {
                            "exitCode": 1,
                            "reason": "Error",
                            "containerID": cid,
                            "startedAt": _ts(t0 + 3000),
                            "finishedAt": _ts(t0 + 3040),
                        }
                    },
                }
            )
            conds = [
                _condition(at, "PodReadyToStartContainers", True),
                _condition(at, "Initialized", True),
                _condition(at, "Ready", False, "ContainersNotReady"),
                _condition(at, "ContainersReady", False, "ContainersNotReady"),
            ]
            conds[2]["message"] = conds[3]["message"] = unready
            return "Running", conds
        ok = state == "succeeded"
        reason = "Completed" if ok else str(w.get("exitReason", "Error"))
        code = 0 if ok else (137 if reason == "OOMKilled" else 1)
        cs.update(
            {
                "containerID": cid,
                "ready": False,
                "started": False,
                "state": {
                    "terminated": {
                        "exitCode": code,
                        "reason": reason,
                        "containerID": cid,
                        "startedAt": _ts(t0 + 30),
                        "finishedAt": _ts(t0 + 3600),
                    }
                },
            }
        )
        done = "PodCompleted" if ok else "PodFailed"
        return "Succeeded" if ok else "Failed", [
            _condition(at, "PodReadyToStartContainers", False),
            _condition(at, "Initialized", True, done),
            _condition(at, "Ready", False, done),
            _condition(at, "ContainersReady", False, done),
        ]
