"""Feasibility engine: consumable capacity (`allowMultipleAllocations`, `requestPolicy`, `capacity.requests`).

A shared device is neither exclusive (one claim holds it, nobody else) nor unlimited (every claim fits): a request
fits while what it consumes — rounded by the request policy as upstream's allocator does — fits in what is left.
"""

from __future__ import annotations

from catalog.feasibility import explain_pod, snapshot_from_objects
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
