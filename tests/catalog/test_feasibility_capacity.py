"""Feasibility engine: consumable capacity (`allowMultipleAllocations`, `requestPolicy`, `capacity.requests`).

A shared device is neither exclusive (one claim holds it, nobody else) nor unlimited (every claim fits): a request
fits while what it consumes — rounded by the request policy as upstream's allocator does — fits in what is left.
"""

from __future__ import annotations

from catalog.feasibility import explain_pod, snapshot_from_objects
from inventory.k8s import consumable
from kubesim.scenario import ScenarioError, load_scenario
from tests.catalog.feasibility_fixtures.builders import DRIVER, device, device_class, node, pod, resource_slice, verdict

POLICY = {"default": "10Gi", "validRange": {"min": "10Gi", "max": "80Gi", "step": "10Gi"}}


def shared(name: str = "gpu-0", memory: str = "80Gi", policy: dict | None = POLICY) -> dict:
    out = device(name, allowMultipleAllocations=True)
    out["capacity"] = {"memory": {"value": memory, **({"requestPolicy": policy} if policy else {})}}
    return out


def request(name: str = "gpu", memory: str | None = None, count: int = 1) -> dict:
    body: dict = {"deviceClassName": "gpu", "count": count}
    if memory:
        body["capacity"] = {"requests": {"memory": memory}}
    return {"name": name, "exactly": body}


def share(name: str, memory: str, device_name: str = "gpu-0", node_name: str = "n") -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [request(memory=memory)]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": DRIVER, "pool": node_name, "device": device_name,
                 "shareID": f"uid-{name}", "consumedCapacity": {"memory": memory}}]}}}}


def claim(name: str, *requests: dict) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"devices": {"requests": list(requests)}}}


def explain(new: dict, *, devices: list[dict] | None = None, allocated: list[dict] = ()):
    snapshot = snapshot_from_objects(nodes=[node("n")], pods=[],
                                     resource_slices=[resource_slice("n", devices or [shared()])],
                                     device_classes=[device_class()], resource_claims=list(allocated))
    return explain_pod(pod(claims=[{"name": "gpu", "resourceClaimName": new["metadata"]["name"]}]), snapshot,
                       extra_claims=[new])


def test_a_shared_device_takes_requests_while_capacity_is_left() -> None:
    taken = [share("a", "40Gi"), share("b", "20Gi")]
    assert explain(claim("new", request(memory="20Gi")), allocated=taken).schedulable
    result = explain(claim("new", request(memory="30Gi")), allocated=taken)
    assert not result.schedulable
    assert verdict(result, "n").details == [
        "request gpu: 1 device needed, 1 match the selectors, 0 free",
        "  gpu-0: capacity memory: requested 30Gi, 20Gi left of 80Gi (shared by 2 claims)",
    ]


def test_the_request_is_rounded_by_the_policy_before_it_is_compared() -> None:
    taken = [share("a", "60Gi")]
    # 11Gi rounds up to 20Gi (min 10Gi + 1 step): exactly what is left.
    assert explain(claim("new", request(memory="11Gi")), allocated=taken).schedulable
    # 21Gi rounds up to 30Gi: more than is left.
    details = verdict(explain(claim("new", request(memory="21Gi")), allocated=taken), "n").details
    assert details[1] == "  gpu-0: capacity memory: requested 30Gi, 20Gi left of 80Gi (shared by 1 claim)"
    # No request: the policy's default (10Gi).
    assert explain(claim("new", request()), allocated=[share("a", "70Gi")]).schedulable
    assert not explain(claim("new", request()), allocated=[share("a", "80Gi")]).schedulable


def test_a_request_the_policy_refuses_never_fits() -> None:
    values = {"default": "10Gi", "validValues": ["10Gi", "40Gi"]}
    result = explain(claim("new", request(memory="50Gi")), devices=[shared(policy=values)])
    assert verdict(result, "n").details[1] == (
        "  gpu-0: capacity memory: requested 50Gi is not allowed by the request policy "
        "(valid values 10Gi, 40Gi; default 10Gi)")


def test_without_a_policy_an_empty_request_takes_the_whole_capacity() -> None:
    result = explain(claim("new", request()), devices=[shared(policy=None)], allocated=[share("a", "1Gi")])
    assert "capacity memory: requested 80Gi, 79Gi left of 80Gi" in verdict(result, "n").details[1]


def test_shares_picked_together_add_up() -> None:
    # Two requests of one claim on the one shared device: 40Gi + 40Gi fit, 40Gi + 50Gi do not.
    assert explain(claim("new", request("a", "40Gi"), request("b", "40Gi"))).schedulable
    result = explain(claim("new", request("a", "40Gi"), request("b", "50Gi")))
    assert not result.schedulable
    assert "consumable capacity of the shared devices picked together" in verdict(result, "n").details[-1]


def test_exclusive_devices_check_requested_capacity_against_their_value() -> None:
    plain = [device("gpu-0", memory="24Gi")]
    assert explain(claim("new", request(memory="16Gi")), devices=plain).schedulable
    result = explain(claim("new", request(memory="40Gi")), devices=plain)
    assert verdict(result, "n").details[1] == "  gpu-0: capacity memory: requested 40Gi, 24Gi left of 24Gi"
    unknown = explain(claim("new", {"name": "gpu", "exactly": {
        "deviceClassName": "gpu", "capacity": {"requests": {"bandwidth": "1G"}}}}), devices=plain)
    assert verdict(unknown, "n").details[1] == "  gpu-0: no capacity bandwidth"


def test_a_share_without_share_id_holds_the_device_exclusively() -> None:
    exclusive = share("a", "10Gi")
    del exclusive["status"]["allocation"]["devices"]["results"][0]["shareID"]
    result = explain(claim("new", request(memory="10Gi")), allocated=[exclusive])
    assert verdict(result, "n").details[1] == "  gpu-0: allocated to claim default/a"


# ------------------------------------------------------------------ kubesim and the explainer agree

RANGE = {"default": "10Gi", "validRange": {"min": "10Gi", "max": "80Gi", "step": "10Gi"}}
VALUES = {"default": "20Gi", "validValues": ["10Gi", "20Gi", "40Gi"]}


def _scenario(policy: dict, probe: str | None, *, allocate_probe: bool) -> dict:
    def claim_(name: str, memory: str | None, allocated: bool) -> dict:
        capacity = {"capacity": {"memory": memory}} if memory else {}
        return {"name": name, "namespace": "team", "allocated": allocated,
                "requests": [{"name": "gpu", "deviceClassName": "gpu.nvidia.com", **capacity}]}

    return {
        "nodePools": [{"name": "shared", "count": 1, "mode": "dra",
                       "gpu": {"model": "NVIDIA-H100-80GB-HBM3", "perNode": 1, "memoryMiB": 81920},
                       "dra": {"consumableCapacity": {"memory": policy}}}],
        "deviceClasses": [{"name": "gpu.nvidia.com", "match": {"attributes": {"type": "gpu"}}}],
        "namespaces": [{"name": "team"}],
        # Already allocated: 30Gi and 15Gi (rounded by the policy), so 30Gi (range) or 20Gi (values) are left.
        "claims": [claim_("first", "30Gi", True), claim_("second", "15Gi", True),
                   claim_("probe", probe, allocate_probe)],
    }


def _kubesim(policy: dict, probe: str | None) -> str | None:
    """The memory kubesim's allocator gives the probe claim, or None when it cannot allocate it."""
    try:
        objects = load_scenario(_scenario(policy, probe, allocate_probe=True))
    except ScenarioError:
        return None
    [claim] = [o for o in objects if o["kind"] == "ResourceClaim" and o["metadata"]["name"] == "probe"]
    return claim["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["memory"]


def _explainer(policy: dict, probe: str | None) -> str | None:
    """The memory the explainer would give the probe claim on the kubesim cluster without it, or None."""
    objects = load_scenario(_scenario(policy, probe, allocate_probe=False))
    kinds: dict[str, list[dict]] = {}
    for obj in objects:
        kinds.setdefault(obj["kind"], []).append(obj)
    [probe_claim] = [c for c in kinds["ResourceClaim"] if c["metadata"]["name"] == "probe"]
    snapshot = snapshot_from_objects(nodes=kinds["Node"], pods=[], resource_slices=kinds["ResourceSlice"],
                                     device_classes=kinds["DeviceClass"],
                                     resource_claims=[c for c in kinds["ResourceClaim"] if c is not probe_claim])
    pod_obj = pod(namespace="team", claims=[{"name": "gpu", "resourceClaimName": "probe"}])
    if not explain_pod(pod_obj, snapshot, extra_claims=[probe_claim]).schedulable:
        return None
    [record] = snapshot.devices
    taken = consumable.consumption(record.driver, {"memory": probe} if probe else {}, record.capacities)
    return record.capacities[f"{record.driver}/memory"].format(taken.amounts[f"{record.driver}/memory"])


def test_kubesim_allocates_consumable_capacity_as_the_explainer_does() -> None:
    cases = [(RANGE, probe) for probe in (None, "5Gi", "21Gi", "30Gi", "31Gi", "45Gi", "90Gi")]
    cases += [(VALUES, probe) for probe in (None, "11Gi", "20Gi", "25Gi", "50Gi")]
    outcomes = {(policy["default"], probe): (_kubesim(policy, probe), _explainer(policy, probe))
                for policy, probe in cases}
    assert all(kubesim == explainer for kubesim, explainer in outcomes.values()), outcomes
    # And the outcomes are the rules' (not two agreeing mistakes): 30Gi left with the range, 20Gi with the values.
    assert {case: got[0] for case, got in outcomes.items()} == {
        ("10Gi", None): "10Gi", ("10Gi", "5Gi"): "10Gi", ("10Gi", "21Gi"): "30Gi", ("10Gi", "30Gi"): "30Gi",
        ("10Gi", "31Gi"): None, ("10Gi", "45Gi"): None, ("10Gi", "90Gi"): None,
        ("20Gi", None): "20Gi", ("20Gi", "11Gi"): "20Gi", ("20Gi", "20Gi"): "20Gi", ("20Gi", "25Gi"): None,
        ("20Gi", "50Gi"): None,
    }
