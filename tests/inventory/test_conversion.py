"""The portal's conversion of older DRA shapes (inventory/k8s/conversion.py) agrees with the simulator's (which
follows kube-apiserver's conversion functions) on every field of the upstream scenario, and never raises."""

from __future__ import annotations

import pytest

from inventory.k8s import conversion
from kubesim import apis
from kubesim.scenario import load_scenario

DRA = [o for o in load_scenario("upstream") if o["apiVersion"] == "resource.k8s.io/v1"]


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_portal_and_simulator_convert_alike(version):
    assert DRA
    for obj in DRA:
        served = apis.dra_from_v1(obj, version)
        assert conversion.dra_to_v1(served, version) == obj, (obj["kind"], obj["metadata"]["name"])
        assert conversion.dra_from_v1(obj, version) == served
        assert conversion.served_dra_version(served) == version


def test_v1beta1_shapes():
    slice_ = next(o for o in DRA if o["kind"] == "ResourceSlice" and o["spec"].get("devices"))
    served = conversion.dra_from_v1(slice_, "v1beta1")
    assert all("basic" in d and "attributes" not in d for d in served["spec"]["devices"])
    claim = next(o for o in DRA if o["kind"] == "ResourceClaim")
    request = conversion.dra_from_v1(claim, "v1beta1")["spec"]["devices"]["requests"][0]
    assert "exactly" not in request


@pytest.mark.parametrize("garbage", [None, 3, "x", [], {"kind": "ResourceSlice", "spec": []},
                                     {"kind": "ResourceSlice", "spec": {"devices": [1, {"basic": "x"}]}},
                                     {"kind": "ResourceClaimTemplate", "spec": {"spec": {"devices": {"requests": 5}}}},
                                     {"kind": "ResourceClaim", "spec": {"devices": {"requests": [None, {"count": 2}]}}}])
def test_malformed_objects_never_raise(garbage):
    converted = conversion.dra_to_v1(garbage, "v1beta1")
    if isinstance(garbage, dict):
        assert converted["apiVersion"] == "resource.k8s.io/v1"
    else:
        assert converted == garbage
