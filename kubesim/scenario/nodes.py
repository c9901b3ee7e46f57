"""Node pools: the Node objects, their capacity, GPUs and labels."""

from __future__ import annotations

import uuid
from typing import Any

from .common import POOL_LABEL, ScenarioError, _digest, _ts, _uid
from .gpus import CLIQUE_LABEL, MODES
from .quantities import _fmt_cpu, parse_quantity
from .spec import _check_keys, _int, _label, _list
from .state import NodeState


class NodesMixin:
    """`nodePools:` expanded into nodes (the Node objects and the expander's NodeState)."""

    POOL_KEYS = {
        "name",
        "count",
        "cpu",
        "memory",
        "pods",
        "ephemeralStorage",
        "instanceType",
        "zones",
        "gpu",
        "mode",
        "mig",
        "timeSlicing",
        "mps",
        "dra",
        "taints",
        "labels",
        "unhealthy",
        "unhealthyNodes",
        "unschedulable",
        "gfdLabels",
        "missingDevicePlugin",
        "machine",
        "cliqueSize",
    }

    def build_nodes(self) -> None:
        pools = _list(self.spec, "nodePools", "scenario")
        zones_default = ["us-east-1a", "us-east-1b", "us-east-1c"]
        for pi, pool in enumerate(pools):
            ctx = f"nodePools[{pi}]"
            _check_keys(pool, self.POOL_KEYS, ctx, ("name", "count"))
            pname = _label(pool["name"], f"{ctx}.name")
            if pname in self.pool_specs:
                raise ScenarioError(f"{ctx}: duplicate pool {pname!r}")
            count = _int(pool["count"], f"{ctx}.count")
            mode = pool.get("mode", "whole" if pool.get("gpu") else "cpu")
            if mode not in MODES:
                raise ScenarioError(f"{ctx}.mode: {mode!r} is not one of {', '.join(MODES)}")
            gpu = self._gpu_spec(pool, mode, ctx)
            self.pool_specs[pname] = {**pool, "mode": mode, "_gpu": gpu}
            self.pool_nodes[pname] = []
            self.pool_cursor[pname] = 0
            taints = []
            for ti, t in enumerate(_list(pool, "taints", ctx)):
                _check_keys(t, {"key", "value", "effect"}, f"{ctx}.taints[{ti}]", ("key", "effect"))
                if t["effect"] not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                    raise ScenarioError(f"{ctx}.taints[{ti}].effect: {t['effect']!r} is not a taint effect")
                taints.append({k: str(v) for k, v in t.items()})
            unschedulable = bool(pool.get("unschedulable", False))
            if unschedulable:
                taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
            zones = pool.get("zones") or zones_default
            # NVLink domains (multi-node NVLink, e.g. GB200 NVL72): GFD labels each node nvidia.com/gpu.clique
            # <cluster UUID>.<clique id>; consecutive nodes of the pool form cliques of cliqueSize nodes.
            clique_size = _int(pool["cliqueSize"], f"{ctx}.cliqueSize", 1) if "cliqueSize" in pool else 0
            if clique_size and not pool.get("gpu"):
                raise ScenarioError(f"{ctx}.cliqueSize: only for GPU pools")
            width = max(3, len(str(count)))
            unhealthy = _int(pool.get("unhealthy", 0), f"{ctx}.unhealthy")
            unhealthy_nodes = _int(pool.get("unhealthyNodes", 1 if unhealthy else 0), f"{ctx}.unhealthyNodes")
            missing = pool.get("missingDevicePlugin", False)
            missing_nodes = (
                count if missing is True else (0 if missing is False else _int(missing, f"{ctx}.missingDevicePlugin"))
            )
            if gpu and unhealthy > gpu["perNode"]:
                raise ScenarioError(f"{ctx}.unhealthy: {unhealthy} exceeds gpu.perNode {gpu['perNode']}")
            if unhealthy and mode in ("dra", "cpu"):
                raise ScenarioError(f"{ctx}.unhealthy: only supported for device-plugin modes, not {mode!r}")
            for i in range(count):
                name = f"{pname}-{i:0{width}d}"
                idx = len(self.nodes)
                node = self._make_node(
                    idx,
                    name,
                    pname,
                    pool,
                    mode,
                    gpu,
                    taints,
                    unschedulable,
                    zones[i % len(zones)],
                    unhealthy if i < unhealthy_nodes else 0,
                    i < missing_nodes,
                )
                if clique_size:
                    node.labels[CLIQUE_LABEL] = f"{_uid(self.seed, 'Clique', '', pname)}.{i // clique_size}"
                self.nodes.append(node)
                self.nodes_by_name[name] = node
                self.pool_nodes[pname].append(node)

    def _make_node(
        self,
        idx: int,
        name: str,
        pname: str,
        pool: dict,
        mode: str,
        gpu: dict | None,
        taints: list[dict],
        unschedulable: bool,
        zone: str,
        unhealthy: int,
        missing: bool,
    ) -> NodeState:
        ctx = f"nodePools[{pname}]"
        cpu = int(parse_quantity(pool.get("cpu", 32), f"{ctx}.cpu") * 1000)
        memory = int(parse_quantity(pool.get("memory", "128Gi"), f"{ctx}.memory"))
        max_pods = _int(pool.get("pods", 110), f"{ctx}.pods", 1)
        eph = int(parse_quantity(pool.get("ephemeralStorage", "500Gi"), f"{ctx}.ephemeralStorage"))
        instance = str(pool.get("instanceType", "m6i.8xlarge" if not gpu else "p4d.24xlarge"))
        labels = {
            "beta.kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": instance,
            "topology.kubernetes.io/region": zone[:-1] if zone[-1:].isalpha() else zone,
            "topology.kubernetes.io/zone": zone,
            POOL_LABEL: pname,
        }
        ext_cap: dict[str, int] = {}
        ext_alloc: dict[str, int] = {}
        single_unit: set[str] = set()
        if gpu:
            labels.update(self._gpu_labels(gpu, mode, pool, instance))
            if mode == "mig" and labels.get("nvidia.com/mig.config.state"):
                first = gpu["migConfigStateNodes"]
                position = len(self.pool_nodes.get(pname, []))
                if first is None or position < first:
                    labels["nvidia.com/mig.config.state"] = gpu["migConfigState"]
            n = gpu["perNode"]
            healthy = n - unhealthy
            if mode == "whole":
                ext_cap["nvidia.com/gpu"], ext_alloc["nvidia.com/gpu"] = n, healthy
            elif mode == "mig" and gpu["migStrategy"] == "single":
                # The single strategy advertises the (identical) MIG devices as nvidia.com/gpu.
                [per] = gpu["migLayout"].values()
                ext_cap["nvidia.com/gpu"], ext_alloc["nvidia.com/gpu"] = per * n, per * healthy
            elif mode == "mig":
                for profile, per in gpu["migLayout"].items():
                    ext_cap[f"nvidia.com/mig-{profile}"] = per * n
                    ext_alloc[f"nvidia.com/mig-{profile}"] = per * healthy
            elif mode in ("time-slicing", "mps"):
                rname = "nvidia.com/gpu.shared" if gpu["renameByDefault"] else "nvidia.com/gpu"
                ext_cap[rname], ext_alloc[rname] = n * gpu["replicas"], healthy * gpu["replicas"]
                if gpu["failRequestsGreaterThanOne"]:
                    single_unit = {rname}
            if missing:
                ext_cap, ext_alloc = {}, {}
        labels.update({str(k): str(v) for k, v in (pool.get("labels") or {}).items()})
        mem_alloc = memory - memory // 100 - 100 * 2**20
        cpu_alloc = cpu - (100 if cpu <= 4000 else 500)
        alloc = {"cpu": cpu_alloc, "memory": mem_alloc, "pods": max_pods, **ext_alloc}
        node = NodeState(
            index=idx,
            name=name,
            pool=pname,
            uid=_uid(self.seed, "Node", "", name),
            labels=labels,
            taints=taints,
            unschedulable=unschedulable,
            alloc=alloc,
            ip=f"172.16.{idx // 250}.{idx % 250 + 4}",
            pod_cidr=f"10.{64 + idx // 256}.{idx % 256}.0/24",
            single_unit=single_unit if ext_cap else set(),
        )
        boot = _ts(-30 * 86400 + idx)
        heartbeat = _ts(-20)
        conditions = [
            {
                "type": t,
                "status": "False",
                "lastHeartbeatTime": heartbeat,
                "lastTransitionTime": boot,
                "reason": r,
                "message": msg,
            }
            for t, r, msg in (
                ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            )
        ]
        conditions.append(
            {
                "type": "Ready",
                "status": "True",
                "lastHeartbeatTime": heartbeat,
                "lastTransitionTime": _ts(-30 * 86400 + idx + 45),
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
            }
        )
        capacity = {
            "cpu": _fmt_cpu(cpu),
            "ephemeral-storage": f"{eph // 1024}Ki",
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
            "memory": f"{memory // 1024}Ki",
            "pods": str(max_pods),
            **{k: str(v) for k, v in ext_cap.items()},
        }
        allocatable = {
            "cpu": _fmt_cpu(cpu_alloc),
            "ephemeral-storage": str(eph * 9 // 10),
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
            "memory": f"{mem_alloc // 1024}Ki",
            "pods": str(max_pods),
            **{k: str(v) for k, v in ext_alloc.items()},
        }
        machine_id = _digest(self.seed, "machine", name).hex()[:32]
        spec: dict[str, Any] = {
            "podCIDR": node.pod_cidr,
            "podCIDRs": [node.pod_cidr],
            "providerID": f"kubesim:///{zone}/{name}",
        }
        if taints:
            spec["taints"] = [dict(t) for t in taints]
        if unschedulable:
            spec["unschedulable"] = True
        annotations = {
            "node.alpha.kubernetes.io/ttl": "0",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        }
        if gpu and unhealthy:
            annotations["kubesim.io/unhealthy-gpus"] = ",".join(
                f"gpu-{i}" for i in range(gpu["perNode"] - unhealthy, gpu["perNode"])
            )
        self.node_objs.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "uid": node.uid,
                    "creationTimestamp": boot,
                    "labels": labels,
                    "annotations": annotations,
                },
                "spec": spec,
                "status": {
                    "capacity": capacity,
                    "allocatable": allocatable,
                    "conditions": conditions,
                    "addresses": [{"type": "InternalIP", "address": node.ip}, {"type": "Hostname", "address": name}],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                    "nodeInfo": {
                        "machineID": machine_id,
                        "systemUUID": str(uuid.UUID(machine_id)).upper(),
                        "bootID": _uid(self.seed, "boot", "", name),
                        "kernelVersion": "6.8.0-1024-nvidia",
                        "osImage": "Ubuntu 24.04.2 LTS",
                        "containerRuntimeVersion": "containerd://2.1.4",
                        "kubeletVersion": self.k8s_version,
                        "kubeProxyVersion": "",
                        "operatingSystem": "linux",
                        "architecture": "amd64",
                    },
                },
            }
        )
        if gpu and mode == "dra":
            self._publish_slices(node, gpu, zone)
        return node
