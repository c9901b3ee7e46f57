"""GPU modelling: the card catalogue, MIG geometry and layouts, a pool's effective GPU spec, the GPU labels of a node."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from .common import EPOCH, PROFILE_RE, ScenarioError
from .quantities import _capacity_policy
from .spec import _check_keys, _int, _list, _semver, _version_parts

# GPU catalogue (defaults; every field can be overridden in a pool's ``gpu`` block)
GPU_MODELS: dict[str, dict[str, Any]] = {
    "NVIDIA-H100-80GB-HBM3": {
        "productName": "NVIDIA H100 80GB HBM3",
        "memoryMiB": 81559,
        "family": "hopper",
        "computeMajor": 9,
        "computeMinor": 0,
        "migCapable": True,
        "smPerSlice": 16,
    },
    "NVIDIA-H200": {
        "productName": "NVIDIA H200",
        "memoryMiB": 143771,
        "family": "hopper",
        "computeMajor": 9,
        "computeMinor": 0,
        "migCapable": True,
        "smPerSlice": 16,
    },
    "NVIDIA-A100-SXM4-80GB": {
        "productName": "NVIDIA A100-SXM4-80GB",
        "memoryMiB": 81920,
        "family": "ampere",
        "computeMajor": 8,
        "computeMinor": 0,
        "migCapable": True,
        "smPerSlice": 14,
    },
    "NVIDIA-A100-SXM4-40GB": {
        "productName": "NVIDIA A100-SXM4-40GB",
        "memoryMiB": 40960,
        "family": "ampere",
        "computeMajor": 8,
        "computeMinor": 0,
        "migCapable": True,
        "smPerSlice": 14,
    },
    "Tesla-T4": {
        "productName": "Tesla T4",
        "memoryMiB": 15360,
        "family": "turing",
        "computeMajor": 7,
        "computeMinor": 5,
        "migCapable": False,
        "smPerSlice": 0,
    },
    "NVIDIA-L4": {
        "productName": "NVIDIA L4",
        "memoryMiB": 23034,
        "family": "ada-lovelace",
        "computeMajor": 8,
        "computeMinor": 9,
        "migCapable": False,
        "smPerSlice": 0,
    },
    "NVIDIA-L40S": {
        "productName": "NVIDIA L40S",
        "memoryMiB": 46068,
        "family": "ada-lovelace",
        "computeMajor": 8,
        "computeMinor": 9,
        "migCapable": False,
        "smPerSlice": 0,
    },
}
# MIG geometry for 7-slice / 8-memory-slice GPUs (A100, H100, H200): profile g -> (memory slices, placements)
MIG_GEOMETRY = {1: (1, [0, 1, 2, 3, 4, 5, 6]), 2: (2, [0, 2, 4]), 3: (4, [0, 4]), 4: (4, [0]), 7: (8, [0])}
MIG_PROFILE_IDS = {1: 19, 2: 14, 3: 9, 4: 5, 7: 0}
# Named nvidia.com/mig.config layouts (per card) of the GPU Operator's default mig-parted config (80 GB cards)
MIG_CONFIGS = {
    "all-1g.10gb": {"1g.10gb": 7},
    "all-2g.20gb": {"2g.20gb": 3},
    "all-3g.40gb": {"3g.40gb": 2},
    "all-7g.80gb": {"7g.80gb": 1},
    "all-balanced": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
    "all-1g.5gb": {"1g.5gb": 7},
}
CLIQUE_LABEL = "nvidia.com/gpu.clique"
PCI_BUSES = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db", "1b", "2b", "3b", "5e", "9b", "ac", "bb", "dc"]
MODES = ("whole", "mig", "time-slicing", "mps", "dra", "cpu")
# nvidia.com/mig.config.state as the GPU Operator's MIG manager sets it
MIG_CONFIG_STATES = ("success", "pending", "rebooting", "failed")


class GpuMixin:
    """A pool's GPU: validated spec, MIG layouts and the labels GPU Feature Discovery would set."""

    GPU_KEYS = {
        "model",
        "productName",
        "memoryMiB",
        "perNode",
        "family",
        "architecture",
        "computeMajor",
        "computeMinor",
        "driverVersion",
        "cudaDriver",
        "cudaRuntime",
        "migCapable",
        "smPerSlice",
        "pcieRoots",
    }

    def _gpu_spec(self, pool: dict, mode: str, ctx: str) -> dict | None:
        """The pool's effective GPU: the catalogue entry with the `gpu` block's overrides, plus the mode's settings."""
        if mode == "cpu":
            if pool.get("gpu"):
                raise ScenarioError(f"{ctx}: mode cpu cannot have a gpu block")
            return None
        g = pool.get("gpu")
        if not g:
            raise ScenarioError(f"{ctx}: mode {mode!r} needs a gpu block")
        base = self._gpu_card(g, f"{ctx}.gpu")
        if mode == "mig":
            self._gpu_mig(base, pool, ctx)
        if mode in ("mig",) and not base["migCapable"]:
            raise ScenarioError(f"{ctx}: model {base['model']} is not MIG capable")
        if mode in ("time-slicing", "mps"):
            self._gpu_sharing(base, pool, mode, ctx)
        if mode == "dra":
            self._gpu_dra(base, pool, ctx)
        return base

    @classmethod
    def _gpu_card(cls, g: dict, gctx: str) -> dict[str, Any]:
        """The card: model defaults overridden by the `gpu` block, GPUs per node, PCIe roots and driver versions."""
        _check_keys(g, cls.GPU_KEYS, gctx, ("model", "perNode"))
        model = str(g["model"])
        base = dict(GPU_MODELS.get(model, {}))
        for key in ("productName", "memoryMiB", "family", "computeMajor", "computeMinor", "migCapable", "smPerSlice"):
            if key in g:
                base[key] = g[key]
        if "architecture" in g:
            base["family"] = g["architecture"]
        for key in ("memoryMiB", "family", "computeMajor", "computeMinor"):
            if key not in base:
                raise ScenarioError(f"{gctx}: unknown model {model!r} needs {key}")
        base.setdefault("productName", model.replace("-", " "))
        base.setdefault("migCapable", False)
        base.setdefault("smPerSlice", 14)
        base["model"] = model
        base["perNode"] = _int(g["perNode"], f"{gctx}.perNode", 1)
        if base["perNode"] > len(PCI_BUSES):
            raise ScenarioError(f"{gctx}.perNode: at most {len(PCI_BUSES)} GPUs per node")
        # PCIe root complexes the GPUs hang off (DRA attribute resource.kubernetes.io/pcieRoot): by default one per
        # GPU (an HGX board); fewer put consecutive GPUs behind one root (PCIe-switch servers).
        base["pcieRoots"] = _int(g.get("pcieRoots", base["perNode"]), f"{gctx}.pcieRoots", 1)
        if base["pcieRoots"] > base["perNode"]:
            raise ScenarioError(f"{gctx}.pcieRoots: at most perNode ({base['perNode']})")
        base["driverVersion"] = str(g.get("driverVersion", "550.54.15"))
        dv = _version_parts(base["driverVersion"], 3, f"{gctx}.driverVersion")
        base["driverParts"] = dv
        base["cudaDriver"] = str(g.get("cudaDriver", "12.4"))
        base["cudaRuntime"] = str(g.get("cudaRuntime", base["cudaDriver"]))
        _version_parts(base["cudaDriver"], 2, f"{gctx}.cudaDriver")
        _version_parts(base["cudaRuntime"], 2, f"{gctx}.cudaRuntime")
        return base

    def _gpu_mig(self, base: dict[str, Any], pool: dict, ctx: str) -> None:
        """`mig:`: the cards' layout (a named config or an explicit one), the strategy and the MIG manager's state."""
        mig = pool.get("mig") or {}
        _check_keys(mig, {"config", "layout", "strategy", "configState", "configStateNodes"}, f"{ctx}.mig")
        layout = mig.get("layout")
        if layout is None:
            cfg = mig.get("config", "all-1g.10gb")
            if cfg not in MIG_CONFIGS:
                raise ScenarioError(f"{ctx}.mig.config: unknown config {cfg!r}; give mig.layout explicitly")
            layout = MIG_CONFIGS[cfg]
        base["migConfig"] = str(mig.get("config", "custom"))
        base["migLayout"] = self._mig_layout(layout, f"{ctx}.mig.layout", base)
        strategy = mig.get("strategy", "mixed")
        if strategy not in ("mixed", "single"):
            raise ScenarioError(f"{ctx}.mig.strategy: must be mixed or single, got {strategy!r}")
        if strategy == "single" and len(base["migLayout"]) != 1:
            raise ScenarioError(
                f"{ctx}.mig: the single strategy needs every card partitioned alike into one profile, "
                f"got {', '.join(base['migLayout'])}"
            )
        base["migStrategy"] = strategy
        state = mig.get("configState", "success")
        if state not in MIG_CONFIG_STATES:
            raise ScenarioError(f"{ctx}.mig.configState: must be one of {', '.join(MIG_CONFIG_STATES)}")
        base["migConfigState"] = state
        nodes = mig.get("configStateNodes")
        base["migConfigStateNodes"] = None if nodes is None else _int(nodes, f"{ctx}.mig.configStateNodes")

    @staticmethod
    def _gpu_sharing(base: dict[str, Any], pool: dict, mode: str, ctx: str) -> None:
        """`timeSlicing:` or `mps:`: replicas per card, renaming, and whether more than one unit is refused."""
        key = "timeSlicing" if mode == "time-slicing" else "mps"
        sharing = pool.get(key) or {}
        allowed = {"replicas", "renameByDefault"} | ({"failRequestsGreaterThanOne"} if key == "timeSlicing" else set())
        _check_keys(sharing, allowed, f"{ctx}.{key}")
        base["replicas"] = _int(sharing.get("replicas", 4), f"{ctx}.{key}.replicas", 2)
        base["renameByDefault"] = bool(sharing.get("renameByDefault", False))
        # The device plugin refuses more than one shared unit per container: with time-slicing only when
        # failRequestsGreaterThanOne is set (default false), with MPS always (it ignores the setting).
        base["failRequestsGreaterThanOne"] = key == "mps" or bool(sharing.get("failRequestsGreaterThanOne", False))

    def _gpu_dra(self, base: dict[str, Any], pool: dict, ctx: str) -> None:
        """`dra:`: slices per node, consumable capacity, stale publications, device taints and MIG partitions."""
        dra = pool.get("dra") or {}
        _check_keys(
            dra,
            {
                "slicesPerNode",
                "migPartitions",
                "staleGeneration",
                "staleDriverVersion",
                "publishedSlices",
                "deviceTaints",
                "consumableCapacity",
            },
            f"{ctx}.dra",
        )
        consumable = dra.get("consumableCapacity")
        if consumable is not None:
            _check_keys(consumable, {"memory"}, f"{ctx}.dra.consumableCapacity")
            consumable = {
                name: _capacity_policy(raw, f"{ctx}.dra.consumableCapacity.{name}") if raw else None
                for name, raw in consumable.items()
            }
        base["consumable"] = consumable
        base["slicesPerNode"] = _int(dra.get("slicesPerNode", 1), f"{ctx}.dra.slicesPerNode", 1)
        stale = dra.get("staleGeneration", False)
        if not isinstance(stale, bool):
            raise ScenarioError(f"{ctx}.dra.staleGeneration: expected true or false")
        base["staleGeneration"] = stale
        base["staleDriverVersion"] = _semver(
            str(dra.get("staleDriverVersion", "535.183.06")), f"{ctx}.dra.staleDriverVersion"
        )
        published = dra.get("publishedSlices")
        base["publishedSlices"] = None if published is None else _int(published, f"{ctx}.dra.publishedSlices", 1)
        base["deviceTaints"] = self._dra_device_taints(dra, ctx)
        parts = dra.get("migPartitions")
        if parts and not base["migCapable"]:
            raise ScenarioError(f"{ctx}.dra.migPartitions: model {base['model']} is not MIG capable")
        base["draMig"] = (
            self._mig_layout(parts, f"{ctx}.dra.migPartitions", base, allow_overlap=True) if parts else None
        )

    @staticmethod
    def _dra_device_taints(dra: dict, ctx: str) -> list[dict[str, str]]:
        taints = []
        for ti, t in enumerate(_list(dra, "deviceTaints", f"{ctx}.dra")):
            tctx = f"{ctx}.dra.deviceTaints[{ti}]"
            _check_keys(t, {"device", "key", "value", "effect"}, tctx, ("device", "key", "effect"))
            if t["effect"] not in ("None", "NoSchedule", "NoExecute"):
                raise ScenarioError(f"{tctx}.effect: {t['effect']!r} is not one of None, NoSchedule, NoExecute")
            taints.append({k: str(v) for k, v in t.items()})
        return taints

    @staticmethod
    def _mig_layout(layout: Any, ctx: str, gpu: dict, allow_overlap: bool = False) -> dict[str, int]:
        if not isinstance(layout, dict) or not layout:
            raise ScenarioError(f"{ctx}: expected a mapping like {{'1g.10gb': 7}}")
        slices = mem = 0
        for profile, n in layout.items():
            m = PROFILE_RE.match(str(profile))
            if not m or int(m.group(1)) not in MIG_GEOMETRY:
                raise ScenarioError(f"{ctx}: {profile!r} is not a MIG profile like 1g.10gb")
            n = _int(n, f"{ctx}.{profile}", 1)
            g = int(m.group(1))
            if n > len(MIG_GEOMETRY[g][1]):
                raise ScenarioError(f"{ctx}.{profile}: at most {len(MIG_GEOMETRY[g][1])} instances fit on one GPU")
            slices += g * n
            mem += MIG_GEOMETRY[g][0] * n
        if not allow_overlap and (slices > 7 or mem > 8):
            raise ScenarioError(f"{ctx}: layout needs {slices}/7 compute slices and {mem}/8 memory slices per GPU")
        return {str(k): int(v) for k, v in layout.items()}


    def _gpu_labels(self, gpu: dict, mode: str, pool: dict, instance: str) -> dict[str, str]:
        shared = mode in ("time-slicing", "mps")
        labels = {"nvidia.com/gpu.present": "true"}
        if mode == "dra":
            labels["nvidia.com/gpu.deploy.device-plugin"] = "false"
        if not pool.get("gfdLabels", True):
            return labels
        d = gpu["driverParts"]
        rt = _version_parts(gpu["cudaRuntime"], 2, "cudaRuntime")
        cd = _version_parts(gpu["cudaDriver"], 2, "cudaDriver")
        product = gpu["model"] + ("-SHARED" if shared and not gpu["renameByDefault"] else "")
        labels.update(
            {
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": str(gpu["perNode"]),
                "nvidia.com/gpu.memory": str(gpu["memoryMiB"]),
                "nvidia.com/gpu.family": str(gpu["family"]),
                "nvidia.com/gpu.machine": str(pool.get("machine", instance)),
                "nvidia.com/gpu.compute.major": str(gpu["computeMajor"]),
                "nvidia.com/gpu.compute.minor": str(gpu["computeMinor"]),
                "nvidia.com/gpu.replicas": str(gpu.get("replicas", 1) if shared else 1),
                "nvidia.com/gpu.mode": "compute",
                "nvidia.com/cuda.driver-version.major": str(d[0]),
                "nvidia.com/cuda.driver-version.minor": str(d[1]),
                "nvidia.com/cuda.driver-version.revision": str(d[2]),
                "nvidia.com/cuda.driver-version.full": gpu["driverVersion"],
                "nvidia.com/cuda.runtime-version.major": str(rt[0]),
                "nvidia.com/cuda.runtime-version.minor": str(rt[1]),
                "nvidia.com/cuda.runtime-version.full": f"{rt[0]}.{rt[1]}",
                "nvidia.com/cuda.driver.major": str(cd[0]),
                "nvidia.com/cuda.driver.minor": str(cd[1]),
                "nvidia.com/gfd.timestamp": str(int((EPOCH - timedelta(days=30)).timestamp())),
                "nvidia.com/gpu.sharing-strategy": mode if shared else "none",
                "nvidia.com/mig.capable": "true" if gpu["migCapable"] else "false",
                "nvidia.com/mps.capable": "true" if mode == "mps" else "false",
            }
        )
        if mode == "mig" and gpu["migStrategy"] == "single":
            # GFD --mig-strategy=single: the product gets the profile, gpu.count counts MIG devices, gpu.memory is
            # one MIG device's, and the MIG device's facts go into nvidia.com/gpu.* labels.
            [(profile, per)] = gpu["migLayout"].items()
            g = int(profile[0])
            mem_gb = int(PROFILE_RE.match(profile).group(2))
            labels.update(
                {
                    "nvidia.com/mig.strategy": "single",
                    "nvidia.com/mig.config": gpu["migConfig"],
                    "nvidia.com/mig.config.state": "success",
                    "nvidia.com/gpu.product": f"{gpu['model']}-MIG-{profile}",
                    "nvidia.com/gpu.count": str(per * gpu["perNode"]),
                    "nvidia.com/gpu.memory": str(mem_gb * 1024 - 256),
                    "nvidia.com/gpu.multiprocessors": str(g * gpu["smPerSlice"]),
                    "nvidia.com/gpu.slices.gi": str(g),
                    "nvidia.com/gpu.slices.ci": str(g),
                    "nvidia.com/gpu.engines.copy": str(g),
                    "nvidia.com/gpu.engines.decoder": str(g if g < 7 else 5),
                    "nvidia.com/gpu.engines.encoder": "0",
                    "nvidia.com/gpu.engines.jpeg": "1" if g >= 7 else "0",
                    "nvidia.com/gpu.engines.ofa": "1" if g >= 7 else "0",
                }
            )
        elif mode == "mig":
            labels["nvidia.com/mig.strategy"] = "mixed"
            labels["nvidia.com/mig.config"] = gpu["migConfig"]
            labels["nvidia.com/mig.config.state"] = "success"
            for profile, per in gpu["migLayout"].items():
                g = int(profile[0])
                mem_gb = int(PROFILE_RE.match(profile).group(2))
                base = f"nvidia.com/mig-{profile}"
                labels.update(
                    {
                        f"{base}.count": str(per * gpu["perNode"]),
                        f"{base}.memory": str(mem_gb * 1024 - 256),
                        f"{base}.multiprocessors": str(g * gpu["smPerSlice"]),
                        f"{base}.slices.gi": str(g),
                        f"{base}.slices.ci": str(g),
                        f"{base}.engines.copy": str(g),
                        f"{base}.engines.decoder": str(g if g < 7 else 5),
                        f"{base}.engines.encoder": "0",
                        f"{base}.engines.jpeg": "1" if g >= 7 else "0",
                        f"{base}.engines.ofa": "1" if g >= 7 else "0",
                    }
                )
        return labels
