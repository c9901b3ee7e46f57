"""Background churn: pods replaced, GPUs going unhealthy and back, device taints toggled."""

from __future__ import annotations

import copy
import random
import threading
import time
from typing import TYPE_CHECKING

from .errors import ApiError
from .store import now_ts

if TYPE_CHECKING:
    from .server import Simulator

TAINT_KEY = "kubesim.io/unhealthy"
_BASE_RESOURCES = {"cpu", "memory", "pods", "ephemeral-storage"}


def _gpu_key(node: dict) -> str | None:
    alloc = (node.get("status") or {}).get("allocatable") or {}
    keys = [k for k in alloc if "gpu" in k.lower()] or [k for k in alloc if "/" in k and k not in _BASE_RESOURCES]
    for k in keys:
        try:
            if int(str(alloc[k])) > 0:
                return k
        except ValueError:
            continue
    return None


class Churn:
    """Mutates the store at a steady rate so watchers see realistic event streams."""

    def __init__(self, sim: Simulator):
        self._sim = sim
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.changes = 0
        self._pending_pods: list[tuple[str, str]] = []
        self._lowered: list[tuple[str, str]] = []  # (node, resource key)
        self._tainted: list[tuple[str, str]] = []  # (slice, device)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, rate_per_second: float = 5.0, seed: int = 0) -> Churn:
        self.stop()
        self._stop.clear()
        self._rng = random.Random(seed)
        interval = 1.0 / max(rate_per_second, 0.001)
        self._thread = threading.Thread(target=self._run, args=(interval,), name="kubesim-churn", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._thread = None

    def forget(self) -> None:
        """Drop what churn remembers about objects (the store was reset under it)."""
        self._pending_pods.clear()
        self._lowered.clear()
        self._tainted.clear()

    def _run(self, interval: float) -> None:
        # Paced by absolute deadlines so the achieved rate matches the requested one despite the step's own time.
        next_at = time.monotonic() + interval
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            next_at += interval
            try:
                self.step()
            except ApiError:
                continue

    def step(self) -> str | None:
        """Perform one random change; returns a short description (or None if nothing to do)."""
        rng = self._rng if hasattr(self, "_rng") else random.Random(0)
        self._rng = rng
        actions = [self._replace_pod, self._gpu_flap, self._taint_flap]
        if self._pending_pods and rng.random() < 0.5:
            actions.insert(0, self._run_pending)
        else:
            rng.shuffle(actions)
        for act in actions:
            desc = act(rng)
            if desc:
                self.changes += 1
                return desc
        return None

    def _run_pending(self, rng: random.Random) -> str | None:
        store = self._sim.store
        while self._pending_pods:
            ns, name = self._pending_pods.pop(0)
            pod = store.get("pods", ns, name)
            if pod is None:
                continue
            status = pod.setdefault("status", {})
            status["phase"] = "Running"
            status["startTime"] = now_ts()
            status["conditions"] = [{"type": "Ready", "status": "True", "lastTransitionTime": now_ts()}]
            status["containerStatuses"] = [
                {
                    "name": c.get("name", "main"),
                    "ready": True,
                    "restartCount": 0,
                    "image": c.get("image", ""),
                    "imageID": "",
                    "started": True,
                    "state": {"running": {"startedAt": now_ts()}},
                }
                for c in (pod.get("spec") or {}).get("containers") or []
            ]
            store.update("pods", pod, subresource="status", check_rv=False)
            return f"pod {ns}/{name} Running"
        return None

    def _replace_pod(self, rng: random.Random) -> str | None:
        store = self._sim.store
        pods = store.sample("pods", rng)
        if not pods:
            return None
        victim = pods[0].copy()
        meta = victim["metadata"]
        ns, name = meta.get("namespace", "default"), meta["name"]
        store.delete("pods", ns, name)
        base = name.rsplit("-", 1)[0] if "-" in name else name
        new = copy.deepcopy(victim)
        new_meta = {k: v for k, v in meta.items() if k in ("namespace", "labels", "annotations", "ownerReferences")}
        new_meta["name"] = f"{base}-{rng.getrandbits(24):06x}"[:63]
        new["metadata"] = new_meta
        new["status"] = {"phase": "Pending", "qosClass": (victim.get("status") or {}).get("qosClass", "BestEffort")}
        created = store.create("pods", new)
        self._pending_pods.append((ns, created["metadata"]["name"]))
        return f"pod {ns}/{name} replaced by {created['metadata']['name']}"

    def _gpu_flap(self, rng: random.Random) -> str | None:
        store = self._sim.store
        if self._lowered and rng.random() < 0.5:
            node_name, key = self._lowered.pop(0)
            node = store.get("nodes", None, node_name)
            if node is not None:
                alloc = node["status"]["allocatable"]
                alloc[key] = str(int(str(alloc.get(key, "0"))) + 1)
                store.update("nodes", node, subresource="status", check_rv=False)
                return f"node {node_name} {key} restored"
        nodes = store.sample("nodes", rng, k=5)
        if not nodes:
            return None
        for candidate in nodes:
            node = candidate.copy()
            name = node["metadata"]["name"]
            key = _gpu_key(node)
            if key is None or any(n == name for n, _ in self._lowered):
                continue
            alloc = node["status"]["allocatable"]
            alloc[key] = str(int(str(alloc[key])) - 1)
            store.update("nodes", node, subresource="status", check_rv=False)
            self._lowered.append((name, key))
            return f"node {name} {key} lowered"
        return None

    def _taint_flap(self, rng: random.Random) -> str | None:
        store = self._sim.store
        if self._tainted and rng.random() < 0.5:
            slice_name, dev = self._tainted.pop(0)
            rs = store.get("resourceslices", None, slice_name)
            if rs is not None:
                for d in rs.get("spec", {}).get("devices") or []:
                    if d.get("name") == dev:
                        d["taints"] = [t for t in d.get("taints") or [] if t.get("key") != TAINT_KEY]
                        if not d["taints"]:
                            d.pop("taints")
                store.update("resourceslices", rs, check_rv=False)
                return f"resourceslice {slice_name} device {dev} untainted"
        slices = store.sample("resourceslices", rng)
        if not slices:
            return None
        rs = slices[0].copy()
        devices = (rs.get("spec") or {}).get("devices") or []
        if not devices:
            return None
        d = devices[rng.randrange(len(devices))]
        if any(t.get("key") == TAINT_KEY for t in d.get("taints") or []):
            return None
        d.setdefault("taints", []).append(
            {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule", "timeAdded": now_ts()}
        )
        store.update("resourceslices", rs, check_rv=False)
        self._tainted.append((rs["metadata"]["name"], d.get("name", "")))
        return f"resourceslice {rs['metadata']['name']} device {d.get('name')} tainted"
