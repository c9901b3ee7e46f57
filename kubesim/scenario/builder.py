"""The builder: runs every section in creation order and merges the passed-through `objects:`; `load_scenario`."""

from __future__ import annotations

import copy
import gc
import re
from pathlib import Path

from .allocator import AllocatorMixin
from .claims import ClaimsMixin
from .common import OBJECT_KIND_ORDER, ScenarioError, _ts, _uid
from .events import EventsMixin
from .gpus import GpuMixin
from .namespaces import NamespacesMixin
from .nodes import NodesMixin
from .pods import PodsMixin
from .quotas import QuotasMixin
from .scheduler import SchedulerMixin
from .slices import SlicesMixin
from .spec import _check_keys, _list, _read, _semver, scenario_api_profile
from .state import ClaimState, NodeState
from .workloads import WorkloadsMixin


class _Builder(
    NamespacesMixin,
    ClaimsMixin,
    NodesMixin,
    GpuMixin,
    SlicesMixin,
    AllocatorMixin,
    WorkloadsMixin,
    SchedulerMixin,
    EventsMixin,
    PodsMixin,
    QuotasMixin,
):
    """One expansion of a scenario: the shared state every section reads and extends, and the order they run in.

    Each section (namespaces, device classes and claims, nodes and their GPUs, slices, the allocator, workloads, the
    scheduler, events, pods, quotas) is a mixin in its own module; they share this state and call each other's steps.
    """

    def __init__(self, spec: dict, seed: int) -> None:
        self.spec = spec
        self.seed = seed
        self.nodes: list[NodeState] = []
        self.nodes_by_name: dict[str, NodeState] = {}
        self.pool_nodes: dict[str, list[NodeState]] = {}
        self.pool_specs: dict[str, dict] = {}
        self.pool_cursor: dict[str, int] = {}
        self.classes: dict[str, dict] = {}
        self.extended_classes: dict[str, str] = {}  # extended resource name -> DeviceClass serving it (DRA)
        self.namespaces: dict[str, dict] = {}
        self.templates: dict[tuple[str, str], dict] = {}
        self.claims: dict[tuple[str, str], ClaimState] = {}
        self.claim_order: list[ClaimState] = []
        self.pods: list[dict] = []
        self.events: list[dict] = []
        self.pod_names: set[tuple[str, str]] = set()
        self.slices: list[dict] = []
        self.node_objs: list[dict] = []
        self.has_dra = False
        self.pending_cache: dict[int, str] = {}
        self.pod_usage: list[tuple[str, dict[str, int]]] = []  # (namespace, requests) of non-terminal pods
        version = str(spec.get("kubernetesVersion", "v1.35.0"))
        if not re.match(r"^v?\d+\.\d+(\.\d+)?$", version):
            raise ScenarioError(f"kubernetesVersion: {version!r} is not a version like v1.35.0")
        self.k8s_version = "v" + _semver(version.lstrip("v"), "kubernetesVersion")
        style = spec.get("schedulerTaintMessage", "keyed")
        if style not in ("keyed", "generic"):
            raise ScenarioError("schedulerTaintMessage: must be 'keyed' or 'generic'")
        self.taint_style = style


    def build(self) -> list[dict]:
        _check_keys(
            self.spec,
            {
                "name",
                "description",
                "kubernetesVersion",
                "apiServer",
                "schedulerTaintMessage",
                "nodePools",
                "deviceClasses",
                "namespaces",
                "configmaps",
                "claimTemplates",
                "claims",
                "workloads",
                "quotas",
                "objects",
                "telemetry",
            },
            "scenario",
        )
        scenario_api_profile(self.spec)
        raw = self.raw_objects()
        namespaces = self.build_namespaces()
        configmaps = self.build_configmaps()
        classes = self.build_device_classes()
        self.build_nodes()
        templates = self.build_templates()
        self.declare_claims()
        self.build_workloads()
        quotas = self.build_quotas()
        claims = [self._claim_object(c) for c in self.claim_order]
        generated = [
            *namespaces,
            *configmaps,
            *classes,
            *self.node_objs,
            *self.slices,
            *quotas,
            *templates,
            *claims,
            *self.pods,
            *self.events,
        ]
        if not raw:
            return generated
        seen = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in generated}
        for ctx, o in raw:
            key = (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
            if key in seen:
                raise ScenarioError(f"{ctx}: duplicate {key[0]} {'/'.join(k for k in key[1:] if k)}")
            seen.add(key)
        # one stable merge: every kind's generated objects first, then its raw ones; unknown kinds last
        rank = {k: i for i, k in enumerate(OBJECT_KIND_ORDER)}
        merged = generated + [o for _, o in raw]
        return sorted(merged, key=lambda o: rank.get(o["kind"], len(rank)))

    def raw_objects(self) -> list[tuple[str, dict]]:
        """``objects:``: complete Kubernetes objects passed through (deep copies), uid/creationTimestamp filled in."""
        out = []
        for i, o in enumerate(_list(self.spec, "objects", "scenario")):
            ctx = f"objects[{i}]"
            if not isinstance(o, dict):
                raise ScenarioError(f"{ctx}: expected a Kubernetes object (mapping), got {type(o).__name__}")
            for key in ("apiVersion", "kind"):
                if not isinstance(o.get(key), str) or not o[key]:
                    raise ScenarioError(f"{ctx}: missing {key}")
            meta = o.get("metadata")
            if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
                raise ScenarioError(f"{ctx} ({o['kind']}): missing metadata.name")
            obj = copy.deepcopy(o)
            meta = obj["metadata"]
            ctx = f"{ctx} ({obj['kind']} {meta['name']})"
            meta.setdefault("uid", _uid(self.seed, obj["kind"], str(meta.get("namespace", "")), meta["name"]))
            meta.setdefault("creationTimestamp", _ts(-10 * 86400 + i * 60))
            out.append((ctx, obj))
        return out


def load_scenario(source: str | Path | dict = "demo", seed: int = 0) -> list[dict]:
    """Expand a scenario (builtin name, YAML path or parsed dict) into Kubernetes objects in creation order."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ScenarioError(f"seed must be an integer, got {seed!r}")
    spec = source if isinstance(source, dict) else _read(source)
    if not isinstance(spec, dict):
        raise ScenarioError("scenario must be a mapping")
    # The build allocates millions of acyclic dicts; the cyclic GC would rescan them repeatedly (about half the
    # run time for "large"), so it is paused for the duration and restored afterwards.
    gc_enabled = gc.isenabled()
    gc.disable()
    try:
        return _Builder(spec, seed).build()
    except ScenarioError:
        raise
    except (TypeError, AttributeError, KeyError, IndexError) as exc:  # malformed values deep inside the spec
        raise ScenarioError(f"malformed scenario: {type(exc).__name__}: {exc}") from exc
    finally:
        if gc_enabled:
            gc.enable()
