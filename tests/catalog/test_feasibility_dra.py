"""Feasibility engine: DynamicResources (resource.k8s.io/v1) allocation, as the DRA docs and KEPs describe it."""

from __future__ import annotations

from catalog.feasibility import explain_pod, snapshot_from_objects
from tests.catalog.feasibility_fixtures.builders import (
    DRIVER,
    claim,
    device,
    device_class,
    exact,
    explain,
    node,
    pinned,
    pod,
    resource_slice,
    template,
    verdict,
)

MEM_40 = f"device.capacity['{DRIVER}'].memory.compareTo(quantity('40Gi')) >= 0"


def _gpus(node_name: str, count: int, *, memory: str = "80Gi", **kwargs) -> dict:
    return resource_slice(node_name, [device(f"gpu-{i}", memory=memory) for i in range(count)], **kwargs)


def _claim_pod(name: str = "p", *claim_names: str, **kwargs) -> dict:
    return pod(name, claims=[{"name": c, "resourceClaimName": c} for c in claim_names], **kwargs)


def _template_pod(template_name: str = "t", **kwargs) -> dict:
    return pod(claims=[{"name": "gpu", "resourceClaimTemplateName": template_name}], **kwargs)


def _explain_dra(pod_obj: dict, nodes: list[dict], slices: list[dict], *, claims=(), templates=(),
                 classes=None, pods=(), extra_claims=(), extra_templates=()):
    snapshot = snapshot_from_objects(nodes=nodes, pods=list(pods), resource_slices=slices,
                                     device_classes=classes or [device_class()], resource_claims=list(claims),
                                     resource_claim_templates=list(templates))
    return explain_pod(pod_obj, snapshot, extra_claims=list(extra_claims),
                       extra_claim_templates=list(extra_templates))


def test_selectors_of_class_and_request_must_all_match():
    nodes = [node("big"), node("small")]
    slices = [_gpus("big", 2, memory="80Gi"), _gpus("small", 2, memory="24Gi")]
    tmpl = template("t", [exact("gpu", count=1, selectors=(MEM_40,))])
    result = _explain_dra(_template_pod(), nodes, slices, templates=[tmpl])
    assert result.fitting_nodes == ["big"]
    small = verdict(result, "small")
    assert small.reasons == ["cannot allocate all claims"]
    assert small.details[0].startswith("request gpu: 1 device needed, 0 match the selectors, 0 free")


def test_class_selector_excludes_other_device_types():
    slices = [resource_slice("n", [device("mig-0", kind="mig"), device("mig-1", kind="mig")])]
    result = _explain_dra(_template_pod(), [node("n")], slices, templates=[template("t", [exact()])])
    assert result.message == "0/1 nodes are available: 1 cannot allocate all claims."


def test_count_higher_than_devices_on_the_node():
    tmpl = template("t", [exact("gpus", count=3)])
    result = _explain_dra(_template_pod(), [node("n")], [_gpus("n", 2)], templates=[tmpl])
    assert verdict(result, "n").details == ["request gpus: 3 devices needed, 2 match the selectors, 2 free"]
    assert ("the largest request for class gpu placeable on one node today is 2 device(s) (n); request gpus asks "
            "for 3 devices") in result.hints


def test_devices_allocated_to_other_claims_are_in_use():
    slices = [_gpus("n", 2)]
    taken = claim("taken", [exact()], allocated=[("n", "gpu-0")], node_selector=pinned("n"), reserved_for=["job-1"])
    tmpl = template("t", [exact("gpus", count=2)])
    result = _explain_dra(_template_pod(), [node("n")], slices, claims=[taken], templates=[tmpl])
    assert verdict(result, "n").details == [
        "request gpus: 2 devices needed, 2 match the selectors, 1 free",
        "  gpu-0: allocated to claim default/taken",
    ]
    assert "on n, matching devices are held: 1 by claim default/taken (pod default/job-1)" in result.hints
    one = template("t", [exact("gpus", count=1)])
    assert _explain_dra(_template_pod(), [node("n")], slices, claims=[taken], templates=[one]).schedulable


def test_admin_access_results_do_not_consume_and_admin_requests_reach_used_devices():
    slices = [_gpus("n", 1)]
    probe = claim("probe", [exact(admin=True)], allocated=[("n", "gpu-0")], admin=True)
    assert _explain_dra(_template_pod(), [node("n")], slices, claims=[probe],
                        templates=[template("t", [exact()])]).schedulable
    taken = claim("taken", [exact()], allocated=[("n", "gpu-0")])
    admin = template("t", [exact("all", mode="All", admin=True)])
    assert _explain_dra(_template_pod(), [node("n")], slices, claims=[taken], templates=[admin]).schedulable


def test_allocation_mode_all_needs_every_matching_device_free():
    slices = [_gpus("n", 3)]
    all_gpus = template("t", [exact("all", mode="All")])
    assert _explain_dra(_template_pod(), [node("n")], slices, templates=[all_gpus]).schedulable
    taken = claim("taken", [exact()], allocated=[("n", "gpu-1")])
    result = _explain_dra(_template_pod(), [node("n")], slices, claims=[taken], templates=[all_gpus])
    assert verdict(result, "n").details == [
        "request all: allocationMode All, 3 device(s) match the selectors, 1 of them unavailable",
        "  gpu-1: allocated to claim default/taken",
    ]
    # No matching device at all: All needs at least one.
    result = _explain_dra(_template_pod(), [node("n")], [resource_slice("n", [device("m", kind="mig")])],
                          templates=[all_gpus])
    assert not result.schedulable


def test_match_attribute_constraint():
    root = "resource.kubernetes.io/pcieRoot"
    devices = [device(f"gpu-{i}", attrs={root: {"string": "pci0" if i < 2 else "pci1"}}) for i in range(4)]
    slices = [resource_slice("n", devices)]
    constraint = [{"requests": ["gpus"], "matchAttribute": root}]
    ok = template("t", [exact("gpus", count=2)], constraints=constraint)
    assert _explain_dra(_template_pod(), [node("n")], slices, templates=[ok]).schedulable
    too_many = template("t", [exact("gpus", count=3)], constraints=constraint)
    result = _explain_dra(_template_pod(), [node("n")], slices, templates=[too_many])
    assert verdict(result, "n").details == [
        f"constraint matchAttribute {root}: no value is shared by 3 free matching devices (pci0: 2, pci1: 2); no "
        f"{root} value of this node has 3 matching devices even if all were free"
    ]
    # Two free on pci1, pci0 half taken: freeing gpu-0 would satisfy the constraint on pci0 — and the node says so.
    pair = template("t", [exact("gpus", count=2)], constraints=constraint)
    taken = claim("taken", [exact()], allocated=[("n", "gpu-0"), ("n", "gpu-2")])
    result = _explain_dra(_template_pod(), [node("n")], slices, claims=[taken], templates=[pair])
    assert verdict(result, "n").details == [
        f"constraint matchAttribute {root}: no value is shared by 2 free matching devices (pci0: 1, pci1: 1); "
        f"{root}=pci0 would satisfy it if its devices were freed (held by 1 claim)"
    ]
    assert (f"constraint matchAttribute {root} blocks 1 node; 1 of them would satisfy it if their devices were "
            "freed: n") in result.hints
    # Across two requests: one device each, on the same PCIe root, with gpu-1 taken → gpu-2 + gpu-3.
    two = template("t", [exact("a"), exact("b")], constraints=[{"matchAttribute": root}])
    taken = claim("taken", [exact()], allocated=[("n", "gpu-1")])
    assert _explain_dra(_template_pod(), [node("n")], slices, claims=[taken], templates=[two]).schedulable


def test_match_attribute_in_the_driver_domain_and_missing_attribute():
    devices = [device("gpu-0", attrs={"model": {"string": "x"}}), device("gpu-1")]
    constraint = [{"matchAttribute": f"{DRIVER}/model"}]
    result = _explain_dra(_template_pod(), [node("n")], [resource_slice("n", devices)],
                          templates=[template("t", [exact("gpus", count=2)], constraints=constraint)])
    assert not result.schedulable  # gpu-1 lacks the attribute


def test_distinct_attribute_constraint():
    devices = [device(f"gpu-{i}", attrs={"numa": {"int": i % 2}}) for i in range(3)]
    constraint = [{"distinctAttribute": "numa"}]
    slices = [resource_slice("n", devices)]
    assert _explain_dra(_template_pod(), [node("n")], slices,
                        templates=[template("t", [exact("g", count=2)], constraints=constraint)]).schedulable
    assert not _explain_dra(_template_pod(), [node("n")], slices,
                            templates=[template("t", [exact("g", count=3)], constraints=constraint)]).schedulable


def test_device_taints_untolerated_and_tolerated():
    taint = {"key": "example.com/unhealthy", "value": "ecc", "effect": "NoSchedule"}
    slices = [resource_slice("n", [device("gpu-3", taints=[taint])])]
    result = _explain_dra(_template_pod(), [node("n")], slices, templates=[template("t", [exact()])])
    assert verdict(result, "n").details == [
        "request gpu: 1 device needed, 1 match the selectors, 0 free",
        "  gpu-3: device taint example.com/unhealthy=ecc:NoSchedule not tolerated",
    ]
    tolerating = template("t", [exact(tolerations=[{"key": "example.com/unhealthy", "operator": "Exists"}])])
    assert _explain_dra(_template_pod(), [node("n")], slices, templates=[tolerating]).schedulable
    harmless = [resource_slice("n", [device("gpu-3", taints=[{**taint, "effect": "None"}])])]
    assert _explain_dra(_template_pod(), [node("n")], harmless, templates=[template("t", [exact()])]).schedulable


def _partitionable(node_name: str) -> list[dict]:
    counters = [{"name": "gpu-0-cs", "counters": {"memory": {"value": "80Gi"}, "slices": {"value": "8"}}}]

    def consumes(memory: str, slices_: str) -> list[dict]:
        return [{"counterSet": "gpu-0-cs", "counters": {"memory": {"value": memory}, "slices": {"value": slices_}}}]

    devices = [device("gpu-0", consumes=consumes("80Gi", "8")),
               device("gpu-0-mig-a", kind="mig", memory="40Gi", consumes=consumes("40Gi", "4")),
               device("gpu-0-mig-b", kind="mig", memory="40Gi", consumes=consumes("40Gi", "4"))]
    return [resource_slice(node_name, None, count=2, counters=counters, name=f"{node_name}-counters"),
            resource_slice(node_name, devices, count=2, name=f"{node_name}-devices")]


def test_shared_counters_block_partitions_of_an_allocated_card_and_vice_versa():
    classes = [device_class(), device_class("mig", f"device.attributes['{DRIVER}'].type == 'mig'")]
    whole_taken = claim("whole", [exact()], allocated=[("n", "gpu-0")])
    result = _explain_dra(_template_pod(), [node("n")], _partitionable("n"), classes=classes,
                          claims=[whole_taken], templates=[template("t", [exact("mig", "mig")])])
    assert verdict(result, "n").details[1].startswith(
        "  gpu-0-mig-a: shared counter gpu-0-cs/memory exhausted (consumed by allocated gpu-0)")
    half_taken = claim("half", [exact("mig", "mig")], allocated=[("n", "gpu-0-mig-a")])
    assert _explain_dra(_template_pod(), [node("n")], _partitionable("n"), classes=classes, claims=[half_taken],
                        templates=[template("t", [exact("mig", "mig")])]).schedulable
    result = _explain_dra(_template_pod(), [node("n")], _partitionable("n"), classes=classes, claims=[half_taken],
                          templates=[template("t", [exact()])])
    assert "  gpu-0: shared counter gpu-0-cs/memory exhausted (consumed by allocated gpu-0-mig-a)" in verdict(
        result, "n").details
    # Both halves at once fit; a half and the whole card together do not.
    both = template("t", [exact("mig", "mig", count=2)])
    assert _explain_dra(_template_pod(), [node("n")], _partitionable("n"), classes=classes,
                        templates=[both]).schedulable
    mixed = template("t", [exact("mig", "mig"), exact("gpu")])
    result = _explain_dra(_template_pod(), [node("n")], _partitionable("n"), classes=classes, templates=[mixed])
    assert "shared counters of the devices picked together" in verdict(result, "n").details[-1]


def test_incomplete_pool_devices_are_never_used():
    partial = resource_slice("n", [device("gpu-0"), device("gpu-1")], count=2)
    result = _explain_dra(_template_pod(), [node("n")], [partial], templates=[template("t", [exact()])])
    assert verdict(result, "n").details[0] == (
        f"pool {DRIVER}/n is incomplete: 1 of 2 slices published; its 2 device(s) are not used")
    assert verdict(result, "n").reasons == ["cannot allocate all claims"]
    all_mode = template("t", [exact("all", mode="All")])
    result = _explain_dra(_template_pod(), [node("n")], [partial, _gpus("n", 1, pool="other")],
                          templates=[all_mode])
    assert (f"request all: asks for all devices, but resource pool {DRIVER}/n is currently being updated"
            in verdict(result, "n").details)


def test_only_the_highest_pool_generation_counts():
    old = resource_slice("n", [device("gpu-0"), device("gpu-1")], generation=1, name="old")
    new = resource_slice("n", [device("gpu-0")], generation=2, name="new")
    two = template("t", [exact("g", count=2)])
    result = _explain_dra(_template_pod(), [node("n")], [old, new], templates=[two])
    assert verdict(result, "n").details == ["request g: 2 devices needed, 1 match the selectors, 1 free"]


def test_duplicate_device_names_make_the_pool_invalid():
    bad = resource_slice("n", [device("gpu-0"), device("gpu-0")])
    result = _explain_dra(_template_pod(), [node("n")], [bad], templates=[template("t", [exact()])])
    assert "invalid (duplicate device name gpu-0)" in verdict(result, "n").details[0]


def test_allocated_claim_pins_the_node():
    shared = claim("shared", [exact()], allocated=[("b", "gpu-0")], node_selector=pinned("b"))
    nodes = [node("a"), node("b")]
    result = _explain_dra(_claim_pod("p", "shared"), nodes, [_gpus("a", 1), _gpus("b", 1)], claims=[shared])
    assert result.fitting_nodes == ["b"]
    assert verdict(result, "a").reasons == ["resourceclaim not available on the node"]
    assert result.message == "fits on 1 of 2 nodes (b)"
    # The node must still pass the other filters.
    result = _explain_dra(_claim_pod("p", "shared", requests={"cpu": "64"}), nodes, [], claims=[shared])
    assert result.message == "0/2 nodes are available: 2 Insufficient cpu."


def test_missing_claim_template_or_class_fail_in_prefilter():
    nodes = [node("a"), node("b")]
    result = _explain_dra(_claim_pod("p", "nope"), nodes, [])
    assert result.message == '0/2 nodes are available: pod "default/p": resourceclaim "nope" not found.'
    assert result.nodes == []
    assert not result.schedulable
    result = _explain_dra(_template_pod("ghost"), nodes, [])
    assert result.message == '0/2 nodes are available: pod "default/p": resourceclaimtemplate "ghost" not found.'
    result = _explain_dra(_template_pod(), nodes, [], templates=[template("t", [exact("gpu", "missing-class")])])
    assert result.message == "0/2 nodes are available: request gpu: device class missing-class does not exist."


def test_cel_compile_error_fails_in_prefilter():
    tmpl = template("t", [exact(selectors=("device.attributes[",))])
    result = _explain_dra(_template_pod(), [node("n")], [_gpus("n", 1)], templates=[tmpl])
    assert "selector #0: CEL compile error" in result.message


def test_cel_runtime_error_fails_the_node_with_the_error():
    tmpl = template("t", [exact(selectors=(f"device.attributes['{DRIVER}'].missing == 'x'",))])
    result = _explain_dra(_template_pod(), [node("n")], [_gpus("n", 1)], templates=[tmpl])
    assert verdict(result, "n").reasons == ["cannot allocate all claims"]
    assert "gpu-0: CEL runtime error" in verdict(result, "n").details[0]


def test_first_available_falls_back_in_order():
    big = {"name": "big", "deviceClassName": "gpu", "selectors": [{"cel": {"expression": MEM_40}}]}
    small = {"name": "small", "deviceClassName": "gpu", "count": 2}
    request = {"name": "gpu", "firstAvailable": [big, small]}
    slices = [_gpus("n", 2, memory="24Gi")]
    assert _explain_dra(_template_pod(), [node("n")], slices, templates=[template("t", [request])]).schedulable
    three = {**small, "count": 3}
    result = _explain_dra(_template_pod(), [node("n")], slices,
                          templates=[template("t", [{"name": "gpu", "firstAvailable": [big, three]}])])
    assert verdict(result, "n").details == [
        "request gpu/big: 1 device needed, 0 match the selectors, 0 free (class gpu; 2 usable device(s) checked)",
        "request gpu/small: 3 devices needed, 2 match the selectors, 2 free",
    ]


def test_claims_of_one_pod_get_distinct_devices_on_the_same_node():
    a = claim("a", [exact()])
    b = claim("b", [exact()])
    p = _claim_pod("p", "a", "b")
    result = _explain_dra(p, [node("n")], [_gpus("n", 1)], claims=[a, b])
    assert verdict(result, "n").details == [
        "enough devices match each request on its own, but no combination satisfies all requests together "
        "(distinct devices across requests)"
    ]
    assert _explain_dra(p, [node("n")], [_gpus("n", 2)], claims=[a, b]).schedulable
    # One device on each of two nodes does not help: claims are allocated together.
    assert not _explain_dra(p, [node("x"), node("y")], [_gpus("x", 1), _gpus("y", 1)], claims=[a, b]).schedulable


def test_extra_claims_and_templates_take_precedence():
    stored = template("t", [exact("g", count=4)])
    submitted = template("t", [exact("g", count=1)])
    slices = [_gpus("n", 1)]
    assert not _explain_dra(_template_pod(), [node("n")], slices, templates=[stored]).schedulable
    assert _explain_dra(_template_pod(), [node("n")], slices, templates=[stored],
                        extra_templates=[submitted]).schedulable
    assert _explain_dra(_claim_pod("p", "new"), [node("n")], slices, extra_claims=[claim("new", [exact()])]).schedulable


def test_generated_claim_of_an_existing_pod_is_used():
    generated = claim("p-gpu-abc", [exact("g", count=2)])
    p = _template_pod(claim_statuses=[{"name": "gpu", "resourceClaimName": "p-gpu-abc"}])
    result = _explain_dra(p, [node("n")], [_gpus("n", 1)], claims=[generated])  # template itself not needed
    assert verdict(result, "n").details == ["request g: 2 devices needed, 1 match the selectors, 1 free"]


def test_network_attached_devices_by_node_selector_and_all_nodes():
    selector = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}]}
    fabric = resource_slice(None, [device("fab-0")], pool="fabric", nodeSelector=selector, name="fabric")
    everywhere = resource_slice(None, [device("any-0", kind="any")], pool="global", allNodes=True, name="global")
    nodes = [node("in-rack", labels={"rack": "r1"}), node("elsewhere", labels={"rack": "r2"})]
    result = _explain_dra(_template_pod(), nodes, [fabric, everywhere], templates=[template("t", [exact()])])
    assert result.fitting_nodes == ["in-rack"]
    classes = [device_class(), device_class("any", f"device.attributes['{DRIVER}'].type == 'any'")]
    result = _explain_dra(_template_pod(), nodes, [fabric, everywhere], classes=classes,
                          templates=[template("t", [exact("x", "any")])])
    assert sorted(result.fitting_nodes) == ["elsewhere", "in-rack"]


def test_dra_runs_after_the_other_filters():
    tmpl = template("t", [exact()])
    result = explain(_template_pod(requests={"cpu": "64"}), [node("n")], resource_slices=[_gpus("n", 1)],
                     device_classes=[device_class()], resource_claim_templates=[tmpl])
    assert verdict(result, "n").plugin == "NodeResourcesFit"


def test_search_budget_bounds_a_pathological_request():
    devices = [device(f"gpu-{i}", attrs={"numa": {"int": i % 2}}) for i in range(90)]
    tmpl = template("t", [exact("g", count=3)], constraints=[{"distinctAttribute": "numa"}])
    result = _explain_dra(_template_pod(), [node("n")], [resource_slice("n", devices)], templates=[tmpl])
    assert not result.schedulable
    assert "search abandoned after" in verdict(result, "n").details[-1]
    assert any("the device search was abandoned on 1 node(s)" in note for note in result.notes)
