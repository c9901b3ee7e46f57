"""ResourceSlice publishing: a node's DRA devices, counters and partitions, as the NVIDIA DRA driver publishes them."""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

from .common import (
    DRIVER,
    MAX_DEVICES_PER_SLICE,
    MAX_DEVICES_PER_SLICE_WITH_COUNTERS,
    PROFILE_RE,
    ScenarioError,
    _suffix,
    _ts,
    _uid,
)
from .gpus import MIG_GEOMETRY, MIG_PROFILE_IDS, PCI_BUSES
from .quantities import CapacityPolicy, _fmt_bytes, _policy_json, parse_quantity
from .spec import _semver
from .state import Device, NodeState


class SlicesMixin:
    """The ResourceSlices of a node's DRA pool."""

    def _publish_slices(self, node: NodeState, gpu: dict, zone: str) -> None:
        self.has_dra = True
        mig = gpu.get("draMig")
        devices: list[dict] = []
        counter_sets: list[dict] = []
        for i in range(gpu["perNode"]):
            self._publish_gpu(node, gpu, i, devices, counter_sets)
        self._taint_devices(node, gpu, devices)
        limit = (
            MAX_DEVICES_PER_SLICE_WITH_COUNTERS if mig or any("taints" in d for d in devices) else MAX_DEVICES_PER_SLICE
        )
        per_slice = max(-(-len(devices) // gpu["slicesPerNode"]), 1)
        if per_slice > limit:
            raise ScenarioError(
                f"nodePools[{node.pool}]: {len(devices)} devices per node need "
                f"dra.slicesPerNode >= {-(-len(devices) // limit)} (max {limit} devices per slice"
                f"{' with counters or taints' if limit == MAX_DEVICES_PER_SLICE_WITH_COUNTERS else ''})"
            )
        chunks = [devices[k : k + per_slice] for k in range(0, len(devices), per_slice)]
        bodies: list[dict] = ([{"sharedCounters": counter_sets}] if mig else []) + [{"devices": c} for c in chunks]
        self._emit_slices(node, gpu, bodies)

    def _publish_gpu(self, node: NodeState, gpu: dict, i: int, devices: list[dict], counter_sets: list[dict]) -> None:
        """GPU `i` of the node as a device (with its counter set when it is partitioned), then its MIG devices."""
        n = gpu["perNode"]
        mig = gpu.get("draMig")
        gpu_uuid = "GPU-" + _uid(self.seed, "gpu", node.name, str(i))
        bus = f"0000:{PCI_BUSES[i]}:00.0"
        group = i * gpu["pcieRoots"] // n  # GPUs behind one root are named after the first one's bus
        first = next(j for j in range(n) if j * gpu["pcieRoots"] // n == group)
        root = f"pci0000:{int(PCI_BUSES[first], 16) - 3:02x}"
        common = {
            "productName": {"string": gpu["productName"]},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": str(gpu["family"]).replace("-", " ").title()},
            "cudaComputeCapability": {"version": f"{gpu['computeMajor']}.{gpu['computeMinor']}.0"},
            "driverVersion": {"version": _semver(gpu["driverVersion"], "driverVersion")},
            "cudaDriverVersion": {"version": _semver(gpu["cudaDriver"], "cudaDriver")},
            "resource.kubernetes.io/pciBusID": {"string": bus},
            "resource.kubernetes.io/pcieRoot": {"string": root},
        }
        flat_common = {
            "pcieRoot": root,
            "productName": gpu["productName"],
            "brand": "Nvidia",
            "architecture": common["architecture"]["string"],
        }
        attrs = {
            "type": {"string": "gpu"},
            "uuid": {"string": gpu_uuid},
            "index": {"int": i},
            "minor": {"int": i},
            **{k: dict(v) for k, v in common.items()},
        }
        full = {
            "name": f"gpu-{i}",
            "attributes": attrs,
            "capacity": {"memory": {"value": _fmt_bytes(gpu["memoryMiB"] * 2**20)}},
        }
        shared = gpu.get("consumable")
        full_capacity: dict[str, tuple[Fraction, CapacityPolicy | None, bool]] = {
            "memory": (Fraction(gpu["memoryMiB"] * 2**20), None, True)
        }
        if shared is not None:
            # Consumable capacity (KEP-5075): claims share the GPU, each consuming part of its memory.
            full["allowMultipleAllocations"] = True
            for cname, policy in shared.items():
                if policy is not None:
                    full["capacity"][cname]["requestPolicy"] = _policy_json(policy, True)
                    full_capacity[cname] = (full_capacity[cname][0], policy, True)
        consumes: dict[str, dict[str, int]] = {}
        if mig:
            cs = f"gpu-{i}-counter-set"
            counters = {"multiprocessors": 7 * gpu["smPerSlice"], **{f"memorySlice{k}": 1 for k in range(8)}}
            node.counters[cs] = dict(counters)
            counter_sets.append({"name": cs, "counters": {k: {"value": str(v)} for k, v in counters.items()}})
            consumes = {cs: dict(counters)}
            full["consumesCounters"] = [
                {"counterSet": cs, "counters": {k: {"value": str(v)} for k, v in counters.items()}}
            ]
        devices.append(full)
        node.devices.append(
            Device(
                f"gpu-{i}",
                node.name,
                DRIVER,
                {"type": "gpu", "uuid": gpu_uuid, "index": i, **flat_common},
                consumes,
                capacity=full_capacity,
                multi=shared is not None,
            )
        )
        if mig:
            for profile, count in mig.items():
                self._publish_mig_devices(node, gpu, i, gpu_uuid, profile, count, common, flat_common, devices)

    def _publish_mig_devices(
        self,
        node: NodeState,
        gpu: dict,
        i: int,
        gpu_uuid: str,
        profile: str,
        count: int,
        common: dict,
        flat_common: dict,
        devices: list[dict],
    ) -> None:
        """The first `count` placements of a MIG profile on GPU `i`, each consuming the GPU's counters."""
        g = int(profile[0])
        mem_slices, placements = MIG_GEOMETRY[g]
        mem_gb = int(PROFILE_RE.match(profile).group(2))
        for start in placements[:count]:
            dname = f"gpu-{i}-mig-{profile.replace('.', '')}-{MIG_PROFILE_IDS[g]}-{start}"
            mig_uuid = "MIG-" + _uid(self.seed, "mig", node.name, dname)
            used = {
                "multiprocessors": g * gpu["smPerSlice"],
                **{f"memorySlice{k}": 1 for k in range(start, start + mem_slices)},
            }
            devices.append(
                {
                    "name": dname,
                    "attributes": {
                        "type": {"string": "mig"},
                        "uuid": {"string": mig_uuid},
                        "parentUUID": {"string": gpu_uuid},
                        "parentIndex": {"int": i},
                        "profile": {"string": profile},
                        **{k: dict(v) for k, v in common.items()},
                    },
                    "capacity": {
                        "memory": {"value": f"{mem_gb * 1024 - 256}Mi"},
                        "multiprocessors": {"value": str(g * gpu["smPerSlice"])},
                        "copyEngines": {"value": str(g)},
                        "decoders": {"value": str(g if g < 7 else 5)},
                        "encoders": {"value": "0"},
                        "jpegEngines": {"value": "1" if g >= 7 else "0"},
                        "ofaEngines": {"value": "1" if g >= 7 else "0"},
                    },
                    "consumesCounters": [
                        {
                            "counterSet": f"gpu-{i}-counter-set",
                            "counters": {k: {"value": str(v)} for k, v in used.items()},
                        }
                    ],
                }
            )
            node.devices.append(
                Device(
                    dname,
                    node.name,
                    DRIVER,
                    {
                        "type": "mig",
                        "uuid": mig_uuid,
                        "profile": profile,
                        "parentUUID": gpu_uuid,
                        **flat_common,
                    },
                    {f"gpu-{i}-counter-set": used},
                    capacity={
                        k: (parse_quantity(v["value"]), None, k == "memory")
                        for k, v in devices[-1]["capacity"].items()
                    },
                )
            )

    @staticmethod
    def _taint_devices(node: NodeState, gpu: dict, devices: list[dict]) -> None:
        """`dra.deviceTaints` on the published devices; NoSchedule/NoExecute ones make the device unusable here."""
        by_name = {d["name"]: d for d in devices}
        for t in gpu.get("deviceTaints") or ():
            if t["device"] not in by_name:
                raise ScenarioError(
                    f"nodePools[{node.pool}].dra.deviceTaints: device {t['device']!r} does not exist on {node.name}"
                )
            taint = {k: v for k, v in t.items() if k != "device"}
            taint["timeAdded"] = _ts(-86400 + node.index)
            by_name[t["device"]].setdefault("taints", []).append(taint)
        tainted = {
            d["name"] for d in devices if any(t["effect"] in ("NoSchedule", "NoExecute") for t in d.get("taints", []))
        }
        for dev in node.devices:
            dev.tainted = dev.name in tainted

    def _emit_slices(self, node: NodeState, gpu: dict, bodies: list[dict]) -> None:
        """Publish the pool's slices: all or `publishedSlices` of them (an incomplete pool), after the previous
        generation's (with an older driver version) when `staleGeneration` is set."""
        published = gpu.get("publishedSlices")
        if published is not None:
            if published > len(bodies):
                raise ScenarioError(
                    f"nodePools[{node.pool}].dra.publishedSlices: {published} exceeds the pool's {len(bodies)} slices"
                )
            if published < len(bodies):
                node.incomplete = True
                hidden = {d["name"] for b in bodies[published:] for d in b.get("devices", [])}
                node.devices = [d for d in node.devices if d.name not in hidden]
        else:
            published = len(bodies)
        generation = 1
        if gpu.get("staleGeneration"):
            generation = 2
            old_drv = gpu["staleDriverVersion"]
            for k, body in enumerate(bodies):
                old = copy.deepcopy(body)
                for d in old.get("devices", []):
                    d["attributes"]["driverVersion"] = {"version": old_drv}
                    d.pop("taints", None)
                self._emit_slice(node, f"old{k}", old, 1, len(bodies), -30 * 86400 + node.index + 120)
        created = -30 * 86400 + node.index + 120 + (86400 * 29 if generation == 2 else 0)
        for k, body in enumerate(bodies[:published]):
            self._emit_slice(node, k, body, generation, len(bodies), created)

    def _emit_slice(self, node: NodeState, key: Any, body: dict, generation: int, count: int, created: int) -> None:
        sname = f"{node.name}-{DRIVER}-{_suffix(5, self.seed, 'slice', node.name, key)}"
        self.slices.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {
                    "name": sname,
                    "generateName": f"{node.name}-{DRIVER}-",
                    "uid": _uid(self.seed, "ResourceSlice", "", sname),
                    "creationTimestamp": _ts(created),
                    "generation": 1,
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node.uid, "controller": True}
                    ],
                },
                "spec": {
                    "driver": DRIVER,
                    "nodeName": node.name,
                    "pool": {"name": node.name, "generation": generation, "resourceSliceCount": count},
                    **body,
                },
            }
        )
