"""Constants, the error type and the deterministic helpers (uids, name suffixes, timestamps) of the scenario expander."""

from __future__ import annotations

import hashlib
import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

SCENARIO_DIR = Path(__file__).parent.with_name("scenarios")
BUILTIN_SCENARIOS = (
    "demo",
    "large",
    "empty",
    "upstream",
    "sharing",
    "dra-sharing",
    "legacy-no-dra",
    "legacy-dra-v1beta1",
    "legacy-dra-v1beta2",
    "legacy-no-events",
    "kueue",
)
EPOCH = datetime(2026, 1, 15, 8, 0, 0, tzinfo=UTC)
DRIVER = "gpu.nvidia.com"
POOL_LABEL = "kubesim.io/node-pool"
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_PER_SLICE_WITH_COUNTERS = 64
OBJECT_KIND_ORDER = (
    "Namespace",
    "ConfigMap",
    "DeviceClass",
    "Node",
    "ResourceSlice",
    "ResourceQuota",
    "LimitRange",
    "ResourceClaimTemplate",
    "ResourceClaim",
    "Pod",
    "Event",
    "Topology",
    "ResourceFlavor",
    "Cohort",
    "ClusterQueue",
    "LocalQueue",
    "Workload",
)
ALL_MODE_QUOTA = 32  # AllocationResultsMaxSize, what quota charges for allocationMode All
IMPLICIT_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"  # DeviceClass without extendedResourceName
EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
# The device plugin's Allocate error for more than one shared unit per container (NVIDIA/k8s-device-plugin,
# internal/rm/rm.go ValidateRequest, wrapped by internal/plugin/server.go Allocate), as the kubelet reports it
# (pkg/kubelet/cm admission: "Allocate failed due to %v, which is unexpected"; rejectPod: "Pod was rejected: ").
# kubesim is standalone, so the portal's copy (catalog/sharing.py) is not imported; tests compare the two.
SHARED_REQUEST_ERROR = (
    'invalid allocation request for "{resource}": invalid request: maximum request size for shared resources is 1; '
    "found {count}"
)
ADMISSION_ERROR_REASON = "UnexpectedAdmissionError"
# the states a workload's pods can be declared in (`state:`)
STATES = ("running", "pending", "failed", "succeeded", "creating", "crashloop", "scheduled")

CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
HOST_DEVICE_VOLUME = "host-device"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
PROFILE_RE = re.compile(r"^(\d)g\.(\d+)gb$")


class ScenarioError(ValueError):
    """A scenario cannot be loaded: bad YAML, unknown keys, impossible placement, ..."""


def _digest(*parts: Any) -> bytes:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()


def _uid(seed: int, kind: str, namespace: str, name: str) -> str:
    return str(uuid.UUID(bytes=_digest(seed, kind, namespace, name)[:16], version=4))


def _suffix(n: int, *parts: Any) -> str:
    h = _digest(*parts)
    return "".join(SUFFIX_ALPHABET[b % len(SUFFIX_ALPHABET)] for b in h[:n])


def _frac(*parts: Any) -> float:
    return int.from_bytes(_digest(*parts)[:4], "big") / 2**32


def _ts(offset_seconds: float = 0) -> str:
    return (EPOCH + timedelta(seconds=int(offset_seconds))).strftime("%Y-%m-%dT%H:%M:%SZ")
