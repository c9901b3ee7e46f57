"""Dynamic Resource Allocation for one pod: resolve its claims, then try to allocate them on a node.

This reproduces the structured allocator of kube-scheduler's DynamicResources plugin
(`k8s.io/dynamic-resource-allocation/structured`, resource.k8s.io/v1):

- candidate devices are those of complete, valid pools (highest generation) reachable from the node;
- a device matches a request when every selector of its DeviceClass and every selector of the request is true;
- a device allocated to another claim is in use, unless the request asks for admin access; one pod's claims never
  get the same device twice (admin access excepted);
- consumable capacity (`allowMultipleAllocations`): such a device is shared by the claims that hold a share of it;
  a request fits only if what it consumes of each capacity — its `capacity.requests` rounded by the capacity's
  `requestPolicy` (inventory/k8s/consumable.py), the default or the whole value when it asks nothing — fits in
  what the allocated shares and the shares being picked leave; on any device a request naming a capacity the device
  lacks, or more than its value, does not fit (admin-access requests, which consume nothing, are not checked);
- a NoSchedule/NoExecute device taint blocks the device unless the request tolerates it (effect None does not);
- a device that consumes shared counters fits only while its pool's counters (minus what allocated devices and
  the devices already picked consume) suffice;
- `ExactCount` needs `count` devices, `All` needs every matching device of the node (at least one, none in use,
  and no reachable pool may be incomplete); `firstAvailable` tries its subrequests in order;
- `matchAttribute` constraints need one shared attribute value over the devices of the listed requests (every
  request of the claim when none is listed), `distinctAttribute` pairwise different values;
- all claims of the pod that are not allocated yet are allocated together, on the same node.

The search is a backtracking search like upstream's, with a step budget per node. On failure it explains, per
request, how many devices match and which of them are unavailable and why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from catalog.cel import CelError, compile_selector, match_devices
from catalog.feasibility.snapshot import ClusterSnapshot, DeviceRecord, PoolKey
from catalog.feasibility.viewer import EVERYONE, OTHER_CLAIM, Viewer
from inventory.k8s import consumable
from inventory.k8s.semantics import BLOCKING_TAINT_EFFECTS, parse_quantity, taint_text, toleration_tolerates
from inventory.k8s.semantics import as_dict as _dict
from inventory.k8s.semantics import as_list as _list
from inventory.k8s.semantics import as_str as _str

__all__ = [
    "Budget",
    "ClaimSpec",
    "ClaimsError",
    "Constraint",
    "ExactRequest",
    "NodeAllocation",
    "Pick",
    "Request",
    "allocate_on_node",
    "prepare_matches",
    "resolve_claims",
]

SEARCH_BUDGET = 20_000  # allocateOne-like steps per node before the search gives up
EXPLANATION_BUDGET = 400_000  # steps over all nodes of one explanation (keeps a pathological pod bounded)
MAX_DEVICE_LINES = 6  # per request, in details
ALLOCATION_RESULTS_MAX = 32  # resourceapi.AllocationResultsMaxSize








class ClaimsError(Exception):
    """The pod cannot be scheduled anywhere because of its claims (a PreFilter failure)."""


@dataclass(frozen=True, slots=True)
class ExactRequest:
    """One concrete request (`exactly`, or one `firstAvailable` subrequest)."""

    name: str  # "req" or "req/sub"
    base: str  # the request's own name (constraints refer to it)
    class_name: str
    selectors: tuple[str, ...]  # the class's expressions, then the request's
    mode: str  # "ExactCount" | "All"
    count: int
    admin: bool
    tolerations: tuple[Mapping[str, Any], ...]
    capacity: tuple[tuple[str, str], ...] = ()  # capacity.requests: (name, quantity) pairs

    @property
    def needed(self) -> str:
        return "all matching devices" if self.mode == "All" else f"{self.count} device{'s' * (self.count != 1)}"


@dataclass(frozen=True, slots=True)
class Request:
    name: str
    alternatives: tuple[ExactRequest, ...]


@dataclass(frozen=True, slots=True)
class Constraint:
    kind: str  # "matchAttribute" | "distinctAttribute"
    attribute: str  # fully qualified
    requests: frozenset[str]  # empty: every request of the claim

    def applies(self, request: ExactRequest) -> bool:
        return not self.requests or request.base in self.requests or request.name in self.requests


@dataclass(slots=True)
class ClaimSpec:
    """A claim of the pod as the scheduler sees it."""

    label: str  # "ns/name" or "pod claim gpu (template eight-gpus)"
    requests: list[Request]
    constraints: list[Constraint]
    allocated: bool = False
    node_selector: Mapping[str, Any] | None = None
    pod_claim: str = ""


def _tolerations(raw: Any) -> tuple[Mapping[str, Any], ...]:
    return tuple(t for t in _list(raw) if isinstance(t, dict))


def _selectors(raw: Any) -> list[str]:
    out = []
    for selector in _list(raw):
        expression = _dict(_dict(selector).get("cel")).get("expression")
        if not isinstance(expression, str):
            raise ClaimsError("a selector has no CEL expression (unsupported selector type?)")
        out.append(expression)
    return out


def _compile(expressions: Sequence[str], where: str) -> None:
    for index, expression in enumerate(expressions):
        try:
            compile_selector(expression)
        except CelError as exc:
            raise ClaimsError(f"{where}: selector #{index}: CEL compile error: {exc.message}") from None


def _exact(snapshot: ClusterSnapshot, raw: Mapping[str, Any], name: str, base: str, where: str,
           *, admin_allowed: bool) -> ExactRequest:
    class_name = _str(raw.get("deviceClassName"))
    if not class_name:
        raise ClaimsError(f"{where}, request {name}: missing device class name (unsupported request type?)")
    device_class = snapshot.device_classes.get(class_name)
    if device_class is None:
        raise ClaimsError(f"request {name}: device class {class_name} does not exist")
    class_expressions = _selectors(_dict(device_class.get("spec")).get("selectors"))
    _compile(class_expressions, f"class {class_name}")
    request_expressions = _selectors(raw.get("selectors"))
    _compile(request_expressions, where)
    mode = _str(raw.get("allocationMode")) or "ExactCount"
    if mode not in ("ExactCount", "All"):
        raise ClaimsError(f"{where}, request {name}: unsupported count mode {mode}")
    count = raw.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ClaimsError(f"{where}, request {name}: count must be a positive integer, got {str(count)[:20]}")
    capacity = _capacity_requests(_dict(raw.get("capacity")).get("requests"), f"{where}, request {name}")
    return ExactRequest(
        name=name,
        base=base,
        class_name=class_name,
        selectors=(*class_expressions, *request_expressions),
        mode=mode,
        count=count if mode == "ExactCount" else 0,
        admin=admin_allowed and raw.get("adminAccess") is True,
        tolerations=_tolerations(raw.get("tolerations")),
        capacity=capacity,
    )


def _capacity_requests(raw: Any, where: str) -> tuple[tuple[str, str], ...]:
    """`capacity.requests` as sorted (name, quantity) pairs; a malformed entry fails the pod (API validation would
    have refused it)."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise ClaimsError(f"{where}: capacity.requests must be a mapping")
    out = []
    for name, value in raw.items():
        text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
        if not isinstance(name, str) or not name or not isinstance(text, str):
            raise ClaimsError(f"{where}: capacity.requests: invalid entry {str(name)[:40]!r}")
        try:
            parse_quantity(text)
        except ValueError:
            raise ClaimsError(f"{where}: capacity.requests.{name[:40]}: {text[:40]!r} is not a quantity") from None
        out.append((name, text))
    return tuple(sorted(out))


def capacity_consumption(record: DeviceRecord, request: ExactRequest) -> consumable.Consumption:
    """What `request` consumes of the device, or why the device cannot serve it."""
    return consumable.consumption(record.driver, dict(request.capacity), record.capacities)


def capacity_problem(snapshot: ClusterSnapshot, record: DeviceRecord, request: ExactRequest,
                     allocating: Mapping[str, Any] | None = None) -> str:
    """"" if the request's capacity fits the device (after what allocated shares and `allocating` consume), else why:
    `capacity memory: requested 20Gi, 12Gi left of 80Gi`."""
    if not request.capacity and not record.allow_multiple:
        return ""  # nothing asked of an exclusive device: it takes it whole
    consumption = capacity_consumption(record, request)
    if not consumption.ok:
        return consumption.reason
    consumed: dict[str, Any] = {}
    if record.allow_multiple:
        consumable.add(consumed, snapshot.consumed.get(record.id, {}))
        consumable.add(consumed, allocating or {})
    return consumable.shortfall(record.driver, consumption.amounts, consumed, record.capacities)


def _claim_spec(snapshot: ClusterSnapshot, spec: Mapping[str, Any], label: str) -> ClaimSpec:
    devices = _dict(spec.get("devices"))
    requests: list[Request] = []
    for raw in _list(devices.get("requests")):
        raw = _dict(raw)
        name = _str(raw.get("name")) or f"#{len(requests)}"
        if isinstance(raw.get("exactly"), dict):
            exact = _exact(snapshot, raw["exactly"], name, name, f"claim {label}", admin_allowed=True)
            requests.append(Request(name, (exact,)))
        elif _list(raw.get("firstAvailable")):
            alternatives = tuple(
                _exact(snapshot, _dict(sub), f"{name}/{_str(_dict(sub).get('name'))}", name, f"claim {label}",
                       admin_allowed=False)
                for sub in raw["firstAvailable"]
            )
            requests.append(Request(name, alternatives))
        elif raw.get("deviceClassName"):  # v1beta1 shape; accepted for convenience
            exact = _exact(snapshot, raw, name, name, f"claim {label}", admin_allowed=True)
            requests.append(Request(name, (exact,)))
        else:
            raise ClaimsError(f"resource claim {label}, request {name}: unknown request type")
    constraints = []
    for raw in _list(devices.get("constraints")):
        raw = _dict(raw)
        names = frozenset(r for r in _list(raw.get("requests")) if isinstance(r, str))
        if _str(raw.get("matchAttribute")):
            constraints.append(Constraint("matchAttribute", raw["matchAttribute"], names))
        elif _str(raw.get("distinctAttribute")):
            constraints.append(Constraint("distinctAttribute", raw["distinctAttribute"], names))
        else:
            raise ClaimsError(f"claim {label}, constraint #{len(constraints)}: empty constraint (unsupported type?)")
    return ClaimSpec(label=label, requests=requests, constraints=constraints)


def _lookup(objects: Sequence[dict[str, Any]], namespace: str, name: str) -> dict[str, Any] | None:
    for obj in objects:
        meta = _dict(_dict(obj).get("metadata"))
        if meta.get("name") == name and (_str(meta.get("namespace")) or namespace) == namespace:
            return obj
    return None


def resolve_claims(
    pod: Mapping[str, Any],
    snapshot: ClusterSnapshot,
    extra_claims: Sequence[dict[str, Any]] = (),
    extra_templates: Sequence[dict[str, Any]] = (),
) -> list[ClaimSpec]:
    """The pod's claims in `spec.resourceClaims` order; raises ClaimsError with the scheduler-style message."""
    metadata, spec, status = _dict(pod.get("metadata")), _dict(pod.get("spec")), _dict(pod.get("status"))
    namespace = _str(metadata.get("namespace")) or "default"
    pod_label = f'pod "{namespace}/{_str(metadata.get("name")) or "<unnamed>"}"'
    generated = {
        _str(_dict(s).get("name")): _str(_dict(s).get("resourceClaimName"))
        for s in _list(status.get("resourceClaimStatuses"))
    }
    claims: list[ClaimSpec] = []
    for entry in _list(spec.get("resourceClaims")):
        entry = _dict(entry)
        pod_claim = _str(entry.get("name"))
        claim_name = _str(entry.get("resourceClaimName"))
        template_name = _str(entry.get("resourceClaimTemplateName"))
        raw: dict[str, Any] | None = None
        if claim_name:
            raw = _lookup(extra_claims, namespace, claim_name) or snapshot.claims.get((namespace, claim_name))
            if raw is None:
                raise ClaimsError(f'{pod_label}: resourceclaim "{claim_name}" not found')
        elif template_name:
            existing = generated.get(pod_claim)
            raw = (_lookup(extra_claims, namespace, existing) or snapshot.claims.get((namespace, existing))
                   if existing else None)
            if raw is None:
                template = _lookup(extra_templates, namespace, template_name) or snapshot.claim_templates.get(
                    (namespace, template_name))
                if template is None:
                    raise ClaimsError(f'{pod_label}: resourceclaimtemplate "{template_name}" not found')
                label = f"{namespace}/<{pod_claim} from template {template_name}>"
                spec_ = _dict(_dict(_dict(template.get("spec")).get("spec")))
                claim = _claim_spec(snapshot, spec_, label)
                claim.pod_claim = pod_claim
                claims.append(claim)
                continue
        else:
            raise ClaimsError(f'{pod_label}, spec.resourceClaim "{pod_claim}": neither resourceClaimName nor '
                              "resourceClaimTemplateName is set")
        meta = _dict(raw.get("metadata"))
        label = f"{namespace}/{_str(meta.get('name'))}"
        if meta.get("deletionTimestamp"):
            raise ClaimsError(f'resourceclaim "{_str(meta.get("name"))}" is being deleted')
        allocation = _dict(_dict(raw.get("status")).get("allocation"))
        if allocation:
            selector = allocation.get("nodeSelector")
            claims.append(ClaimSpec(label=label, requests=[], constraints=[], allocated=True,
                                    node_selector=selector if isinstance(selector, dict) else None,
                                    pod_claim=pod_claim))
            continue
        claim = _claim_spec(snapshot, _dict(raw.get("spec")), label)
        claim.pod_claim = pod_claim
        claims.append(claim)
    return claims


def prepare_matches(snapshot: ClusterSnapshot, claims: Sequence[ClaimSpec], device_indexes: Sequence[int]) -> None:
    """Evaluate every request's selectors on these devices (batched and memoised in the snapshot)."""
    keys = {alt.selectors for claim in claims for request in claim.requests for alt in request.alternatives}
    for key in keys:
        memo = snapshot.match_memo(key)
        missing = [i for i in dict.fromkeys(device_indexes) if i not in memo and snapshot.devices[i].usable]
        if not missing:
            continue
        selectors = [compile_selector(expression) for expression in key]
        inputs = [snapshot.devices[i].input for i in missing]
        result = match_devices(selectors, inputs)  # type: ignore[arg-type]
        outcome: dict[int, bool | str] = dict.fromkeys(missing, False)
        for position in result.matched:
            outcome[missing[position]] = True
        for position, message in result.errors.items():
            outcome[missing[position]] = message
        memo.update(outcome)


@dataclass(slots=True)
class NodeAllocation:
    """The outcome of allocating the pod's pending claims on one node."""

    ok: bool
    details: list[str] = field(default_factory=list)
    free_by_request: dict[str, int] = field(default_factory=dict)  # first alternative: free matching devices
    holders: dict[str, int] = field(default_factory=dict)  # "ns/claim" → matching devices it holds here
    picks: list[Pick] = field(default_factory=list)  # on success: the devices chosen (a gang consumes them)
    # matchAttribute constraints that blocked the node: (attribute, would a value fit if the devices were freed)
    topology: list[tuple[str, bool]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Pick:
    """One device the allocator chose for a claim: what placing the pod would consume."""

    claim: int  # index into the pod's pending claims
    device: int  # index into ClusterSnapshot.devices
    admin: bool
    share: Mapping[str, Any] | None  # consumed capacity of a shared device (allowMultipleAllocations)


def _qualified(attribute: str, driver: str) -> str:
    return attribute if "/" in attribute else f"{driver}/{attribute}"


def _attribute(record: DeviceRecord, attribute: str) -> tuple[str, Any] | None:
    """A device attribute as (type, value), looked up like upstream (`domain/name`, or `name` in the driver's domain)."""
    raw = record.attributes.get(attribute)
    if raw is None:
        domain, _, name = attribute.partition("/")
        if domain == record.driver:
            raw = record.attributes.get(name)
    if not isinstance(raw, dict):
        return None
    for kind in ("string", "int", "bool", "version"):
        if kind in raw:
            return kind, raw[kind]
    return None


class Budget:
    """Search steps left for one explanation (shared by its nodes)."""

    def __init__(self, steps: int = EXPLANATION_BUDGET) -> None:
        self.remaining = steps
        self.exhausted_nodes = 0


class _Search:
    """Backtracking allocation of several claims on one node."""

    def __init__(self, snapshot: ClusterSnapshot, claims: list[ClaimSpec], usable: list[DeviceRecord],
                 candidates: dict[str, list[int]], impossible: set[str], limit: int) -> None:
        self.limit = limit
        self.snapshot = snapshot
        self.claims = claims
        self.usable = {record.index: record for record in usable}
        self.candidates = candidates  # "claim index:alternative name" → candidate device indexes
        self.impossible = impossible  # alternatives that cannot succeed on this node (All with an unavailable device)
        self.steps = 0
        self.exhausted = False
        self.allocating: dict[int, set[int]] = {}  # device → claim indexes allocating it
        self.consumed: dict[tuple[tuple[str, str], tuple[str, str]], int] = {}
        # Consumable capacity of shared devices taken by the shares picked so far, and those shares' amounts.
        self.capacity: dict[int, dict[str, Any]] = {}
        self.shares: dict[tuple[int, int, str], list[dict[str, Any]]] = {}
        self.share_count: dict[int, int] = {}  # shares being picked per shared device
        self._amounts: dict[tuple[tuple[tuple[str, str], ...], int], consumable.Consumption] = {}
        self.constraint_state: list[list[list[Any]]] = [
            [[] for _ in claim.constraints] for claim in claims
        ]
        self.steps_plan = [(ci, request) for ci, claim in enumerate(claims) for request in claim.requests]
        self.counts = [0] * len(claims)
        self.picked: list[Pick] = []  # added and removed in stack order by _add/_remove

    def run(self) -> bool:
        return self._solve(0)

    def _solve(self, position: int) -> bool:
        if position == len(self.steps_plan):
            return True
        claim_index, request = self.steps_plan[position]
        for alternative in request.alternatives:
            if self._request(claim_index, alternative, position):
                return True
            if self.exhausted:
                return False
        return False

    def _request(self, claim_index: int, request: ExactRequest, position: int) -> bool:
        key = f"{claim_index}:{request.name}"
        if key in self.impossible:
            return False
        candidates = self.candidates[key]
        if request.mode == "All":
            if not candidates:
                return False
            picked: list[int] = []
            for device in candidates:
                if not self._add(claim_index, request, device):
                    for done in reversed(picked):
                        self._remove(claim_index, request, done)
                    return False
                picked.append(device)
            if self._solve(position + 1):
                return True
            for done in reversed(picked):
                self._remove(claim_index, request, done)
            return False
        return self._pick(claim_index, request, candidates, 0, request.count, position)

    def _pick(self, claim_index: int, request: ExactRequest, candidates: list[int], start: int, needed: int,
              position: int) -> bool:
        if needed == 0:
            return self._solve(position + 1)
        for offset in range(start, len(candidates) - needed + 1):
            self.steps += 1
            if self.steps > self.limit:
                self.exhausted = True
                return False
            device = candidates[offset]
            if not self._add(claim_index, request, device):
                continue
            if self._pick(claim_index, request, candidates, offset + 1, needed - 1, position):
                return True
            self._remove(claim_index, request, device)
            if self.exhausted:
                return False
        return False

    def _share(self, request: ExactRequest, record: DeviceRecord) -> consumable.Consumption:
        key = (request.capacity, record.index)
        found = self._amounts.get(key)
        if found is None:
            found = self._amounts[key] = capacity_consumption(record, request)
        return found

    def _add(self, claim_index: int, request: ExactRequest, index: int) -> bool:
        record = self.usable[index]
        claims_allocating = self.allocating.get(index)
        if request.admin:
            if claims_allocating and claim_index in claims_allocating:
                return False
        elif claims_allocating and not record.allow_multiple:
            return False
        if self.counts[claim_index] + 1 > ALLOCATION_RESULTS_MAX:
            return False
        share: dict[str, Any] | None = None
        if record.allow_multiple and not request.admin:
            consumption = self._share(request, record)
            if not consumption.ok or capacity_problem(self.snapshot, record, request, self.capacity.get(index)):
                return False
            share = consumption.amounts
        # A shared device already in use has consumed its counters once; later shares do not consume them again.
        counters_taken = record.allow_multiple and (record.id in self.snapshot.sharers
                                                    or self.share_count.get(index, 0) > 0)
        pool = self.snapshot.pools[record.pool_key]
        if not request.admin and not counters_taken:
            for counter, amount in record.consumes:
                used = self.consumed.get((record.pool_key, counter), 0)
                if pool.available.get(counter, 0) - used < amount:
                    return False
        claim = self.claims[claim_index]
        for position, constraint in enumerate(claim.constraints):
            if not constraint.applies(request):
                continue
            value = _attribute(record, _qualified(constraint.attribute, record.driver))
            if value is None:
                self._undo_constraints(claim_index, request, position)
                return False
            seen = self.constraint_state[claim_index][position]
            ok = (not seen or seen[0] == value) if constraint.kind == "matchAttribute" else value not in seen
            if not ok:
                self._undo_constraints(claim_index, request, position)
                return False
            seen.append(value)
        self.allocating.setdefault(index, set()).add(claim_index)
        self.counts[claim_index] += 1
        if not request.admin and not counters_taken:
            for counter, amount in record.consumes:
                key = (record.pool_key, counter)
                self.consumed[key] = self.consumed.get(key, 0) + amount
        if share is not None:
            consumable.add(self.capacity.setdefault(index, {}), share)
            self.shares.setdefault((claim_index, index, request.name), []).append(share)
            self.share_count[index] = self.share_count.get(index, 0) + 1
        self.picked.append(Pick(claim_index, index, request.admin, share))
        return True

    def _undo_constraints(self, claim_index: int, request: ExactRequest, upto: int) -> None:
        claim = self.claims[claim_index]
        for position in range(upto):
            if claim.constraints[position].applies(request):
                self.constraint_state[claim_index][position].pop()

    def _remove(self, claim_index: int, request: ExactRequest, index: int) -> None:
        record = self.usable[index]
        self.picked.pop()
        self._undo_constraints(claim_index, request, len(self.claims[claim_index].constraints))
        self.allocating[index].discard(claim_index)
        self.counts[claim_index] -= 1
        shares = self.shares.get((claim_index, index, request.name))
        if shares:
            consumable.add(self.capacity[index], shares.pop(), sign=-1)
            self.share_count[index] -= 1
        counters_taken = record.allow_multiple and (record.id in self.snapshot.sharers
                                                    or self.share_count.get(index, 0) > 0)
        if not request.admin and not counters_taken:
            for counter, amount in record.consumes:
                self.consumed[(record.pool_key, counter)] -= amount


def _untolerated(record: DeviceRecord, request: ExactRequest) -> Mapping[str, Any] | None:
    for taint in record.taints:
        if taint.get("effect") in BLOCKING_TAINT_EFFECTS and not any(
            toleration_tolerates(t, taint) for t in request.tolerations
        ):
            return taint
    return None


def _unavailable(snapshot: ClusterSnapshot, record: DeviceRecord, request: ExactRequest,
                 viewer: Viewer = EVERYONE) -> str:
    """Why a matching device cannot be picked for this request on its own ("" if it can)."""
    holder = snapshot.allocated.get(record.id)
    if holder and not request.admin:
        return f"allocated to claim {holder}" if viewer.visible(holder) else f"allocated to {OTHER_CLAIM}"
    taint = _untolerated(record, request)
    if taint is not None:
        return f"device taint {taint_text(taint)} not tolerated"
    problem = "" if request.admin else capacity_problem(snapshot, record, request)
    if problem:
        sharers = snapshot.sharers.get(record.id, [])
        return problem + (f" (shared by {len(sharers)} claim{'s' * (len(sharers) != 1)})" if sharers else "")
    if not request.admin and not (record.allow_multiple and record.id in snapshot.sharers):
        pool = snapshot.pools[record.pool_key]
        for counter, amount in record.consumes:
            if pool.available.get(counter, 0) < amount:
                users = pool.counter_users.get(counter, [])
                by = f" (consumed by allocated {', '.join(users[:3])}{', …' if len(users) > 3 else ''})" if users else ""
                return f"shared counter {counter[0]}/{counter[1]} exhausted{by}"
    return ""


def _shared_values(snapshot: ClusterSnapshot, attribute: str, covered: Sequence[ExactRequest], claim_index: int,
                   devices: Mapping[str, list[int]]) -> tuple[dict[tuple[str, Any], set[int]], list[Any]]:
    """(attribute value → devices having it, values shared by enough devices for every covered request)."""
    by_value: dict[tuple[str, Any], set[int]] = {}
    per_request: list[dict[tuple[str, Any], int]] = []
    for alternative in covered:
        counts: dict[tuple[str, Any], int] = {}
        for index in devices.get(f"{claim_index}:{alternative.name}", ()):
            record = snapshot.devices[index]
            value = _attribute(record, _qualified(attribute, record.driver))
            if value is not None:
                counts[value] = counts.get(value, 0) + 1
                by_value.setdefault(value, set()).add(index)
        per_request.append(counts)
    needed = sum(alternative.count for alternative in covered)
    enough = [value for value, found in by_value.items()
              if len(found) >= needed and all(counts.get(value, 0) >= alternative.count
                                              for counts, alternative in zip(per_request, covered, strict=True))]
    return by_value, enough


def _constraint_precheck(snapshot: ClusterSnapshot, claim: ClaimSpec, claim_index: int,
                         candidates: dict[str, list[int]], matching: dict[str, list[int]],
                         result: NodeAllocation) -> list[str]:
    """Fast necessary condition for matchAttribute: some value must be shared by enough free devices.

    Checked only when every request the constraint covers has one ExactCount alternative; it spares the
    backtracking search its worst case (every combination of an infeasible constraint). When it fails, it also says
    whether the node's matching devices, all freed, would share such a value (`result.topology`)."""
    failures = []
    for constraint in claim.constraints:
        if constraint.kind != "matchAttribute":
            continue
        covered = [request.alternatives[0] for request in claim.requests
                   if any(constraint.applies(alternative) for alternative in request.alternatives)]
        if not covered or any(len(r.alternatives) != 1 or r.alternatives[0].mode != "ExactCount"
                              for r in claim.requests if r.alternatives[0] in covered):
            continue
        by_value, enough = _shared_values(snapshot, constraint.attribute, covered, claim_index, candidates)
        if enough:
            continue
        needed = sum(alternative.count for alternative in covered)
        shown = ", ".join(f"{value[1]}: {len(devices)}" for value, devices in sorted(
            by_value.items(), key=lambda item: (-len(item[1]), str(item[0][1])))[:4]) or "no free device has it"
        line = (f"constraint matchAttribute {constraint.attribute}: no value is shared by {needed} free matching "
                f"devices ({shown})")
        all_values, if_freed = _shared_values(snapshot, constraint.attribute, covered, claim_index, matching)
        if if_freed:
            held = {value: [h for i in all_values[value] if (h := snapshot.allocated.get(snapshot.devices[i].id, ""))]
                    for value in if_freed}
            value = min(if_freed, key=lambda v: (len(held[v]), str(v[1])))  # the fewest devices to free
            holders = set(held[value])
            line += (f"; {constraint.attribute}={value[1]} would satisfy it if its devices were freed"
                     + (f" (held by {len(holders)} claim{'s' * (len(holders) != 1)})" if holders else ""))
        else:
            line += f"; no {constraint.attribute} value of this node has {needed} matching devices even if all were free"
        result.topology.append((constraint.attribute, bool(if_freed)))
        failures.append(line)
    return failures


@dataclass
class _NodeMatch:
    """What matching every request alternative against one node's usable devices found. Keys are
    "<claim index>:<alternative name>"."""

    details: list[str]  # the explanation lines, in the order the scheduler would report them
    candidates: dict[str, list[int]] = field(default_factory=dict)  # devices the search may pick
    matching: dict[str, list[int]] = field(default_factory=dict)  # every matching device, free or not
    impossible: set[str] = field(default_factory=set)  # alternatives that cannot succeed on this node
    fatal: bool = False  # a CEL runtime error on a usable device: kube-scheduler aborts the attempt


def allocate_on_node(snapshot: ClusterSnapshot, claims: list[ClaimSpec], node_name: str,
                     budget: Budget | None = None, viewer: Viewer = EVERYONE) -> NodeAllocation:
    """Try to allocate every unallocated claim of the pod on one node; explain the failure if it does not work."""
    pending = [claim for claim in claims if not claim.allocated]
    result = NodeAllocation(ok=True)
    if not pending:
        return result
    reachable = [snapshot.devices[i] for i in snapshot.devices_for_node(node_name)]
    usable = [record for record in reachable if record.usable]
    blocked_pools = {
        record.pool_key for record in reachable if not record.usable
    }
    found = _NodeMatch(details=_unusable_pool_details(snapshot, reachable, blocked_pools))
    feasible_alone = True
    for claim_index, claim in enumerate(pending):
        for request in claim.requests:
            alternatives_ok = False
            for position, alternative in enumerate(request.alternatives):
                enough = _match_alternative(snapshot, usable, blocked_pools, claim_index, alternative,
                                            first=position == 0, viewer=viewer, result=result, found=found)
                alternatives_ok = alternatives_ok or enough
            feasible_alone = feasible_alone and alternatives_ok
    details = found.details
    if found.fatal:
        result.ok = False
        result.details = [*details, "kube-scheduler aborts the scheduling attempt on a CEL runtime error"]
        return result
    if not feasible_alone:
        result.ok = False
        result.details = details
        return result
    constraint_failures = [line for index, claim in enumerate(pending)
                           for line in _constraint_precheck(snapshot, claim, index, found.candidates, found.matching,
                                                            result)]
    if constraint_failures:
        result.ok = False
        result.details = [*details, *constraint_failures]
        return result
    return _search_on_node(snapshot, pending, usable, found, budget, result)


def _unusable_pool_details(snapshot: ClusterSnapshot, reachable: list[DeviceRecord],
                           blocked_pools: set[PoolKey]) -> list[str]:
    """Lines for the pools whose devices cannot be used (incomplete or being updated), or for a node without any."""
    details: list[str] = []
    for pool_key in sorted(blocked_pools):
        pool = snapshot.pools[pool_key]
        count = sum(1 for record in reachable if record.pool_key == pool_key)
        details.append(f"pool {pool_key[0]}/{pool_key[1]} is {pool.state}; its {count} device(s) are not used")
    if not reachable:
        details.append("no DRA devices are published for this node")
    return details


def _free_and_blocked(snapshot: ClusterSnapshot, matching: list[DeviceRecord], alternative: ExactRequest,
                      viewer: Viewer, result: NodeAllocation) -> tuple[list[int], list[str]]:
    """The matching devices the alternative could take, and why each other one is unavailable (counting the claims
    holding them in `result.holders`)."""
    free: list[int] = []
    blocked: list[str] = []
    for record in matching:
        why = _unavailable(snapshot, record, alternative, viewer)
        if why:
            blocked.append(f"{record.name}: {why}")
            holder = snapshot.allocated.get(record.id)
            if holder and why.startswith("allocated"):
                result.holders[holder] = result.holders.get(holder, 0) + 1
        else:
            free.append(record.index)
    return free, blocked


def _match_alternative(snapshot: ClusterSnapshot, usable: list[DeviceRecord], blocked_pools: set[PoolKey],
                       claim_index: int, alternative: ExactRequest, *, first: bool, viewer: Viewer,
                       result: NodeAllocation, found: _NodeMatch) -> bool:
    """Match one request alternative against the node's usable devices, recording its candidates and explanation in
    `found`; True if the node has enough devices for it on its own."""
    key = f"{claim_index}:{alternative.name}"
    memo = snapshot.match_memo(alternative.selectors)
    matching = [r for r in usable if memo.get(r.index) is True]
    errors = [(r, memo[r.index]) for r in usable if isinstance(memo.get(r.index), str)]
    free, blocked = _free_and_blocked(snapshot, matching, alternative, viewer, result)
    error_lines = [
        f"{record.name}: CEL runtime error: {message}"
        for record, message in errors
        if not _unavailable(snapshot, record, alternative, viewer)
    ]
    if first:
        result.free_by_request.setdefault(alternative.name, len(free))
    if error_lines:
        found.fatal = True
        found.details.extend(f"request {alternative.name}: {line}" for line in error_lines[:MAX_DEVICE_LINES])
    if alternative.mode == "All":
        if blocked_pools:
            driver, pool_name = sorted(blocked_pools)[0]
            summary = (f"request {alternative.name}: asks for all devices, but resource pool "
                       f"{driver}/{pool_name} is currently being updated")
            enough = False
        else:
            enough = bool(matching) and not blocked
            summary = (f"request {alternative.name}: allocationMode All, {len(matching)} device(s) match "
                       f"the selectors, {len(matching) - len(free)} of them unavailable")
        found.candidates[key] = [r.index for r in matching]
        if not enough:
            found.impossible.add(key)
    else:
        enough = len(free) >= alternative.count
        summary = (f"request {alternative.name}: {alternative.needed} needed, {len(matching)} match the "
                   f"selectors, {len(free)} free")
        found.candidates[key] = free
    found.matching[key] = [r.index for r in matching]
    if not matching:
        summary += f" (class {alternative.class_name}; {len(usable)} usable device(s) checked)"
    if not enough:
        found.details.append(summary)
        found.details.extend(f"  {line}" for line in blocked[:MAX_DEVICE_LINES])
        if len(blocked) > MAX_DEVICE_LINES:
            found.details.append(f"  … {len(blocked) - MAX_DEVICE_LINES} more unavailable")
    return enough


def _search_on_node(snapshot: ClusterSnapshot, pending: list[ClaimSpec], usable: list[DeviceRecord],
                    found: _NodeMatch, budget: Budget | None, result: NodeAllocation) -> NodeAllocation:
    """Every request can be met on its own: search for a combination that meets them all, within the budget."""
    details, candidates = found.details, found.candidates
    budget = budget or Budget()
    limit = max(min(SEARCH_BUDGET, budget.remaining), 0)
    search = _Search(snapshot, pending, usable, candidates, found.impossible, limit)
    solved = search.run()
    budget.remaining -= search.steps
    if solved:
        result.picks = list(search.picked)
        return result
    result.ok = False
    if search.exhausted:
        budget.exhausted_nodes += 1
        details.append(f"search abandoned after {search.steps:,} steps without a solution (undecided)")
    else:
        details.append(_no_combination_detail(snapshot, pending, candidates))
    result.details = details
    return result


def _no_combination_detail(snapshot: ClusterSnapshot, pending: list[ClaimSpec],
                           candidates: dict[str, list[int]]) -> str:
    """Why the search found no combination although each request fits alone: what ties the requests together."""
    kinds = sorted({f"{c.kind} {c.attribute}" for claim in pending for c in claim.constraints})
    counters = any(snapshot.devices[i].consumes for ids in candidates.values() for i in ids)
    shared = any(snapshot.devices[i].allow_multiple for ids in candidates.values() for i in ids)
    causes = ["distinct devices across requests"] if sum(len(c.requests) for c in pending) > 1 else []
    causes += [f"constraint {k}" for k in kinds]
    if counters:
        causes.append("shared counters of the devices picked together")
    if shared:
        causes.append("consumable capacity of the shared devices picked together")
    return (
        "enough devices match each request on its own, but no combination satisfies all requests together"
        + (f" ({'; '.join(causes)})" if causes else "")
    )
