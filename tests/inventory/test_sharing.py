"""Opaque driver config → how a DRA device is shared (inventory/sharing.py)."""

from __future__ import annotations

from inventory.sharing import Strategy, sharing_for_class, sharing_for_result


def opaque(parameters, driver="gpu.nvidia.com", requests=None, source=None):
    entry = {"opaque": {"driver": driver, "parameters": parameters}}
    if requests is not None:
        entry["requests"] = requests
    if source:
        entry["source"] = source
    return entry


def gpu_config(sharing=None, kind="GpuConfig"):
    out = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": kind}
    if sharing is not None:
        out["sharing"] = sharing
    return out


TIME_SLICING = gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}})
MPS = gpu_config({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50,
                                                   "defaultPinnedDeviceMemoryLimit": "10Gi"}})


def test_nvidia_time_slicing_and_mps() -> None:
    sharing = sharing_for_class([opaque(TIME_SLICING)])
    assert (sharing.strategy, sharing.detail) == (Strategy.TIME_SLICING, "interval Long")
    mps = sharing_for_class([opaque(MPS)])
    assert mps.strategy == Strategy.MPS
    assert (mps.active_thread_percentage, mps.pinned_memory_limit) == (50, "10Gi")
    assert mps.describe() == "MPS (active threads 50%, pinned memory 10Gi)"


def test_no_config_or_no_sharing_is_exclusive() -> None:
    assert sharing_for_class([]).strategy == Strategy.EXCLUSIVE
    assert sharing_for_class([opaque(gpu_config())]).strategy == Strategy.EXCLUSIVE
    assert sharing_for_class([opaque(gpu_config(kind="VfioDeviceConfig"))]).strategy == Strategy.EXCLUSIVE
    assert sharing_for_class([opaque(gpu_config(kind="MigDeviceConfig"))]).strategy == Strategy.EXCLUSIVE


def test_unknown_config_is_never_exclusive() -> None:
    other_driver = opaque({"apiVersion": "gpu.example.com/v1", "kind": "Config", "shared": True},
                          driver="gpu.example.com")
    assert sharing_for_class([other_driver]).strategy == Strategy.UNKNOWN
    assert sharing_for_class([opaque(gpu_config(kind="FancyConfig"))]).strategy == Strategy.UNKNOWN
    assert sharing_for_class([opaque(gpu_config({"strategy": "Fabric"}))]).strategy == Strategy.UNKNOWN
    assert sharing_for_class([opaque("not an object")]).strategy == Strategy.UNKNOWN
    wrong_version = {**TIME_SLICING, "apiVersion": "resource.nvidia.com/v9"}
    assert sharing_for_class([opaque(wrong_version)]).strategy == Strategy.UNKNOWN
    # One unreadable entry is enough, wherever it stands.
    assert sharing_for_class([other_driver, opaque(gpu_config())]).strategy == Strategy.UNKNOWN


def test_result_takes_the_last_applicable_entry_of_its_driver() -> None:
    configs = [opaque(TIME_SLICING, requests=["gpu"], source="FromClass"),
               opaque(MPS, requests=["other"], source="FromClaim"),
               opaque({"apiVersion": "x/v1", "kind": "Y"}, driver="gpu.example.com", source="FromClaim")]
    assert sharing_for_result(configs, driver="gpu.nvidia.com", request="gpu").strategy == Strategy.TIME_SLICING
    assert sharing_for_result(configs, driver="gpu.nvidia.com", request="other").strategy == Strategy.MPS
    # Subrequest results ("req/sub") take the parent request's config.
    assert sharing_for_result(configs, driver="gpu.nvidia.com", request="gpu/small").strategy == Strategy.TIME_SLICING
    # A claim entry overrides the class entry for the same request.
    overridden = [opaque(TIME_SLICING), opaque(gpu_config())]
    assert sharing_for_result(overridden, driver="gpu.nvidia.com", request="gpu").strategy == Strategy.EXCLUSIVE
    assert sharing_for_result(configs, driver="gpu.example.com", request="gpu").strategy == Strategy.UNKNOWN
