"""Pod objects: spec and status for each state (running, pending, failed, succeeded, creating, crashloop...)."""

from __future__ import annotations

from typing import Any

from .common import ADMISSION_ERROR_REASON, HOST_DEVICE_VOLUME, _digest, _frac, _ts, _uid
from .quantities import _fmt_bytes, _fmt_cpu
from .state import NodeState


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
        cname = "main"
        requests = {"cpu": _fmt_cpu(cpu), "memory": _fmt_bytes(mem), **{k: str(v) for k, v in ext.items()}}
        limits = {"memory": _fmt_bytes(mem), **{k: str(v) for k, v in ext.items()}}
        if controller != "Job":
            limits["cpu"] = _fmt_cpu(cpu)
        resources: dict[str, Any] = {"requests": requests, "limits": limits}
        if refs:
            resources["claims"] = [{"name": r["name"]} for r in refs]
        container: dict[str, Any] = {
            "name": cname,
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
        all_tolerations = [
            *(dict(t) for t in tolerations),
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
        ]
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
            "tolerations": all_tolerations,
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
        guaranteed = controller != "Job"
        status: dict[str, Any] = {"qosClass": "Guaranteed" if guaranteed else "Burstable"}
        t0 = created + 2
        sched = {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": _ts(t0)}
        image_id = f"{image.split(':')[0]}@sha256:{_digest('image', image).hex()}"
        cid = f"containerd://{_digest(self.seed, 'ctr', ns, pod_name).hex()}"
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
            node.pod_ip_seq += 1
            pod_ip = f"{node.pod_cidr.rsplit('.', 1)[0]}.{(node.pod_ip_seq % 250) + 2}"
            status.update({"hostIP": node.ip, "hostIPs": [{"ip": node.ip}], "startTime": _ts(t0 + 1)})
            ready = state == "running"
            running_phase = state in ("running", "crashloop")

            def cond(t: str, ok: bool, reason: str | None = None) -> dict:
                c = {
                    "type": t,
                    "status": "True" if ok else "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": _ts(t0 + 30),
                }
                if reason:
                    c["reason"] = reason
                return c

            cs: dict[str, Any] = {
                "name": cname,
                "image": image,
                "imageID": image_id if state != "creating" else "",
                "restartCount": 0,
                "ready": ready,
                "started": ready,
            }
            if state == "running":
                status["phase"] = "Running"
                cs.update({"containerID": cid, "state": {"running": {"startedAt": _ts(t0 + 30)}}})
                conds = [
                    cond("PodReadyToStartContainers", True),
                    cond("Initialized", True),
                    cond("Ready", True),
                    cond("ContainersReady", True),
                    sched,
                ]
            elif state == "creating":
                status["phase"] = "Pending"
                cs["state"] = {"waiting": {"reason": "ContainerCreating"}}
                conds = [
                    cond("PodReadyToStartContainers", False),
                    cond("Initialized", True),
                    cond("Ready", False, "ContainersNotReady"),
                    cond("ContainersReady", False, "ContainersNotReady"),
                    sched,
                ]
                conds[2]["message"] = conds[3]["message"] = f"containers with unready status: [{cname}]"
            elif state == "crashloop":
                status["phase"] = "Running"
                restarts = 3 + int(_frac(self.seed, "restarts", pod_uid) * 20)
                cs.update(
                    {
                        "containerID": cid,
                        "restartCount": restarts,
                        "started": False,
                        "state": {
                            "waiting": {
                                "reason": "CrashLoopBackOff",
                                "message": f"back-off 5m0s restarting failed container={cname} pod={pod_name}_{ns}({pod_uid})",
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
                    cond("PodReadyToStartContainers", True),
                    cond("Initialized", True),
                    cond("Ready", False, "ContainersNotReady"),
                    cond("ContainersReady", False, "ContainersNotReady"),
                    sched,
                ]
                conds[2]["message"] = conds[3]["message"] = f"containers with unready status: [{cname}]"
            else:
                ok = state == "succeeded"
                reason = "Completed" if ok else str(w.get("exitReason", "Error"))
                code = 0 if ok else (137 if reason == "OOMKilled" else 1)
                status["phase"] = "Succeeded" if ok else "Failed"
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
                conds = [
                    cond("PodReadyToStartContainers", False),
                    cond("Initialized", True, done),
                    cond("Ready", False, done),
                    cond("ContainersReady", False, done),
                    sched,
                ]
            if running_phase or state == "creating":
                status["podIP"] = pod_ip
                status["podIPs"] = [{"ip": pod_ip}]
                if state == "creating":
                    del status["podIP"], status["podIPs"]
            status["conditions"] = conds
            status["containerStatuses"] = [cs]
        gen = [(r["name"], c.name) for r, c in pod_claims if c.template is not None]
        if gen and not rejected:
            status["resourceClaimStatuses"] = [{"name": n, "resourceClaimName": c} for n, c in gen]
        if extended_status:
            status["extendedResourceClaimStatus"] = extended_status
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}
