"""The gang view of an offering's capacity: can an N x R job (N pods of R units each) start now, and if not, why.

Fragmentation says how much of the free capacity one request cannot reach; a distributed job asks more: all of its
workers at once. `offering_gang_view` writes the job the generator would write for the offering (an Indexed Job,
or a ResourceClaimTemplate + Job for DRA), explains it as a gang over the cluster's snapshot
(catalog/feasibility/gang.py) and sums it up:

    "a 4x8 job fits nowhere now; 3 nodes hold 2 to 6 free units each; h100-007 frees 8 nvidia.com/gpu when …"
"""

from __future__ import annotations

from dataclasses import dataclass

from catalog.feasibility.gang import GangExplanation, gang_pods
from catalog.generator import MAX_COUNT, GeneratorError, WorkloadSpec, generate
from catalog.models import Offering, OfferingCapacity
from catalog.services.manifests import gang_explain
from catalog.services.workloads import generator_facts
from core.types import RequestUser
from inventory.models import Cluster

__all__ = ["MAX_GANG_VIEW_PODS", "GangView", "offering_gang_view"]

MAX_GANG_VIEW_PODS = 64
NAMESPACE = "gang-check"  # placement does not depend on the namespace; the manifest needs one


@dataclass
class GangView:
    cluster: Cluster
    pods: int
    units: int
    sentence: str
    spread: str = ""
    room: str = ""  # what would make room (the failing pod's hint about pods or claims to end)
    explanation: GangExplanation | None = None
    error: str = ""


def _spread(free_by_node: dict[str, int], units: int) -> str:
    """"3 nodes hold 2 to 6 free units each" over the feasible nodes with free units (from the capacity figures)."""
    counts = sorted(v for v in free_by_node.values() if isinstance(v, int) and v > 0)
    if not counts:
        return "no feasible node has a free unit"
    short = [c for c in counts if c < units]
    span = f"{counts[0]}" if counts[0] == counts[-1] else f"{counts[0]} to {counts[-1]}"
    text = f"{len(counts)} node{'s' * (len(counts) != 1)} hold{'s' * (len(counts) == 1)} {span} free unit" \
           f"{'s' * (counts[-1] != 1)}{' each' if len(counts) > 1 else ''}"
    if short:
        text += f" ({len(short)} of them fewer than {units})"
    return text


def offering_gang_view(offering: Offering, cluster: Cluster, *, pods: int, units: int, user: RequestUser) -> GangView:
    """Explain an N x R job of `offering` on `cluster` now, for `user` (other tenants' names hidden)."""
    if not 1 <= pods <= MAX_GANG_VIEW_PODS or not 1 <= units <= MAX_COUNT:
        return GangView(cluster, pods, units, "", error=f"Between 1 and {MAX_GANG_VIEW_PODS} pods of 1 to "
                                                        f"{MAX_COUNT} units.")
    facts = generator_facts(cluster=cluster, offering=offering, user=None)
    shape = "claim-template-job" if offering.is_dra and not facts.extended_resource_name else "job"
    try:
        generated = generate(WorkloadSpec(offering=offering, namespace=NAMESPACE, name="gang", shape=shape,
                                          count=units, parallelism=pods, command=[], device_driver=facts.driver,
                                          extended_resource_name=facts.extended_resource_name))
    except GeneratorError as exc:
        return GangView(cluster, pods, units, "", error=str(exc))
    members, claims, templates, _ = gang_pods(generated.documents)
    gang = gang_explain(pods=members, cluster=cluster, user=user, claims=[*claims, *templates])
    job = f"a {pods}x{units} job"
    if gang.schedulable:
        nodes = len(gang.nodes_used())
        sentence = f"{job} fits now, on {nodes} node{'s' * (nodes != 1)}"
    elif not gang.largest:
        sentence = f"{job} fits nowhere now: not even one {units}-unit pod"
    else:
        sentence = f"{job} does not fit now: only {gang.largest} of its {pods} pods can start together"
    row = OfferingCapacity.objects.filter(offering=offering, cluster=cluster).only("free_by_node").first()
    spread = _spread(row.free_by_node if row is not None else {}, units)
    room = ""
    if gang.failure is not None:
        room = next((hint for hint in gang.failure.hints if " frees " in hint or "devices are held" in hint
                     or "would satisfy it if" in hint), "")
    return GangView(cluster, pods, units, sentence, spread, room, gang)
