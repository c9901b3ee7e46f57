"""What opaque driver configuration says about how a DRA device is shared.

A DeviceClass's `spec.config[]` and a claim's `spec.devices.config[]` carry `opaque{driver, parameters}` that the
scheduler ignores and the driver applies when it prepares the device (the claim's `status.allocation.devices.config`
lists both, `FromClass` first, then `FromClaim`). Some of those settings change what one allocated device is: the
NVIDIA GPU driver time-slices a GPU or runs an MPS daemon for it, so the pods using the claim share the card without
(or with limited) isolation — that is not an exclusive card.

Understood (see docs/catalog.md):
- driver `gpu.nvidia.com`, `apiVersion: resource.nvidia.com/v1beta1`:
  - `kind: GpuConfig` — `sharing.strategy: TimeSlicing` (`timeSlicingConfig.interval`: Default, Short, Medium, Long)
    or `MPS` (`mpsConfig.defaultActiveThreadPercentage`, `defaultPinnedDeviceMemoryLimit`,
    `defaultPerDevicePinnedMemoryLimit`); no `sharing`: the card is used exclusively;
  - `kind: MigDeviceConfig` — the same `sharing` for a MIG device (TimeSlicing or MPS); none: the partition alone;
  - `kind: VfioDeviceConfig` (passthrough to a VM), `ComputeDomainChannelConfig`, `ComputeDomainDaemonConfig`
    (IMEX channels): no sharing of the device.
Anything else — another driver, apiVersion or kind, a sharing strategy we do not know, parameters that are not an
object — is *unknown*: the portal cannot tell what the driver does with it, so it never claims the device is
exclusive.

For one request the driver applies the last applicable config entry of its own driver (claim entries override class
entries); entries of other drivers are not passed to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

NVIDIA_DRIVER = "gpu.nvidia.com"
NVIDIA_API_VERSION = "resource.nvidia.com/v1beta1"
_NO_SHARING_KINDS = {"VfioDeviceConfig", "ComputeDomainChannelConfig", "ComputeDomainDaemonConfig"}
_SHARING_KINDS = {"GpuConfig", "MigDeviceConfig"}


class Strategy:
    EXCLUSIVE = "exclusive"
    TIME_SLICING = "time-slicing"
    MPS = "mps"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Sharing:
    """How the consumers of one allocated device share it, according to the config that applies to it."""

    strategy: str = Strategy.EXCLUSIVE
    detail: str = ""  # e.g. "interval Long", "active threads 50%, pinned memory 10Gi"
    source: str = ""  # e.g. "gpu.nvidia.com resource.nvidia.com/v1beta1 GpuConfig"
    active_thread_percentage: int | None = None
    pinned_memory_limit: str = ""  # quantity text of defaultPinnedDeviceMemoryLimit

    @property
    def shared(self) -> bool:
        return self.strategy != Strategy.EXCLUSIVE

    def describe(self) -> str:
        label = {Strategy.EXCLUSIVE: "exclusive", Strategy.TIME_SLICING: "time-sliced", Strategy.MPS: "MPS",
                 Strategy.UNKNOWN: "unknown isolation"}[self.strategy]
        return f"{label} ({self.detail})" if self.detail else label


EXCLUSIVE = Sharing()


def _text(value: Any) -> str:
    return str(value)[:64] if isinstance(value, (str, int)) and not isinstance(value, bool) else ""


def _from_parameters(driver: str, parameters: Any) -> Sharing:
    """One opaque entry's parameters, for a driver that receives it."""
    if not isinstance(parameters, Mapping):
        return Sharing(Strategy.UNKNOWN, "parameters are not an object", driver)
    api_version, kind = _text(parameters.get("apiVersion")), _text(parameters.get("kind"))
    source = " ".join(x for x in (driver, api_version, kind) if x)
    if driver != NVIDIA_DRIVER or api_version != NVIDIA_API_VERSION:
        return Sharing(Strategy.UNKNOWN, f"config of {source or 'an unknown driver'} is not understood", source)
    if kind in _NO_SHARING_KINDS:
        return Sharing(Strategy.EXCLUSIVE, "", source)
    if kind not in _SHARING_KINDS:
        return Sharing(Strategy.UNKNOWN, f"kind {kind or '(none)'} is not understood", source)
    sharing = parameters.get("sharing")
    if sharing is None:
        return Sharing(Strategy.EXCLUSIVE, "", source)
    if not isinstance(sharing, Mapping):
        return Sharing(Strategy.UNKNOWN, "sharing is not an object", source)
    strategy = sharing.get("strategy")
    if strategy == "TimeSlicing":
        config = sharing.get("timeSlicingConfig")
        interval = _text(config.get("interval")) if isinstance(config, Mapping) else ""
        return Sharing(Strategy.TIME_SLICING, f"interval {interval or 'Default'}", source)
    if strategy == "MPS":
        config = sharing.get("mpsConfig")
        config = config if isinstance(config, Mapping) else {}
        percentage = config.get("defaultActiveThreadPercentage")
        percentage = percentage if isinstance(percentage, int) and not isinstance(percentage, bool) else None
        limit = _text(config.get("defaultPinnedDeviceMemoryLimit"))
        per_device = config.get("defaultPerDevicePinnedMemoryLimit")
        parts = []
        if percentage is not None:
            parts.append(f"active threads {percentage}%")
        if limit:
            parts.append(f"pinned memory {limit}")
        if isinstance(per_device, Mapping) and per_device:
            parts.append(f"per-device memory limits for {len(per_device)} device(s)")
        return Sharing(Strategy.MPS, ", ".join(parts) or "no limits", source, percentage, limit)
    return Sharing(Strategy.UNKNOWN, f"sharing strategy {_text(strategy) or '(none)'} is not understood", source)


def _entries(configs: Iterable[Any]) -> list[tuple[str, Any, list[str]]]:
    """(driver, parameters, requests) of each well-formed opaque entry, in order."""
    out = []
    for entry in configs or ():
        if not isinstance(entry, Mapping):
            continue
        opaque = entry.get("opaque")
        if not isinstance(opaque, Mapping):
            continue
        requests = [r for r in entry.get("requests") or () if isinstance(r, str)]
        out.append((_text(opaque.get("driver")), opaque.get("parameters"), requests))
    return out


def _applies(requests: list[str], request: str) -> bool:
    if not requests:
        return True
    return request in requests or request.partition("/")[0] in requests


def sharing_for_result(configs: Iterable[Any], *, driver: str, request: str) -> Sharing:
    """The sharing of one allocated device: the last config entry of its driver that applies to its request
    (`status.allocation.devices.config`, class entries before claim entries)."""
    chosen = EXCLUSIVE
    for entry_driver, parameters, requests in _entries(configs):
        if entry_driver == driver and _applies(requests, request):
            chosen = _from_parameters(entry_driver, parameters)
    return chosen


def sharing_for_class(configs: Iterable[Any]) -> Sharing:
    """What a DeviceClass's `spec.config` makes of the devices it selects. The last entry decides, as the driver
    applies them; but one entry the portal does not understand — another driver's (the class may select that
    driver's devices), another kind — is enough to doubt exclusivity: the isolation is then unknown."""
    chosen = EXCLUSIVE
    for entry_driver, parameters, _requests in _entries(configs):
        found = _from_parameters(entry_driver, parameters)
        if found.strategy == Strategy.UNKNOWN:
            return found
        chosen = found
    return chosen


def class_config(raw_class: Mapping[str, Any]) -> list[Any]:
    spec = raw_class.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    config = spec.get("config")
    return config if isinstance(config, list) else []
