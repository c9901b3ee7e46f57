"""The claim allocator: which devices of a node satisfy a pod's claims (structured parameters, KEP-4381/5075)."""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

from .common import DRIVER, _uid
from .quantities import _fmt_quantity, parse_quantity
from .state import ClaimState, Device, NodeState


class AllocatorMixin:
    """Allocate claims on a node: device matching, constraints, consumable capacity, and the commit."""

    def _device_matches(self, dev: Device, req: dict) -> bool:
        cm = self.classes[req["deviceClassName"]]["match"]
        if dev.driver != cm.get("driver", DRIVER):
            return False
        for attrs in (cm.get("attributes") or {}, req["match"]):
            for k, v in attrs.items():
                if dev.attrs.get(k.rpartition("/")[2]) != v:
                    return False
        return True

    @staticmethod
    def _capacity_requests(req: dict, driver: str) -> dict[str, Fraction]:
        """A request's capacity requests by capacity name (a name may carry the driver's domain)."""
        out: dict[str, Fraction] = {}
        for name, qty in req["capacity"].items():
            domain, _, ident = name.rpartition("/")
            out[ident if domain == driver else name] = parse_quantity(qty)
        return out

    def _try_allocate(self, node: NodeState, claims: list[ClaimState]) -> list[tuple[ClaimState, list]] | None:
        """Pick devices on ``node`` for every unallocated claim; returns picks without committing, or None.

        Each pick is (request, device, consumed capacity or None). A device with allowMultipleAllocations takes a
        share: the request's capacity requests rounded by the request policy (the default, or the whole value, for
        capacities it does not name) must fit in what allocated and picked shares leave. A claim's matchAttribute
        constraints are met by trying each value the node's devices have, in order, for the requests they cover."""
        taken: set[str] = set()
        taking: dict[str, dict[str, Fraction]] = {}  # shared device -> capacity picked in this attempt
        counters = {cs: dict(c) for cs, c in node.counters.items()}
        picks = []
        for claim in claims:
            if claim.results is not None:
                if claim.node != node.name:
                    return None
                continue
            if not claim.constraints:
                results = self._allocate_claim(node, claim, taken, taking, counters, {})
                if results is None:
                    return None
                picks.append((claim, results))
                continue
            for only in self._constraint_choices(node, claim):  # each try starts from the state before the claim
                state = (set(taken), copy.deepcopy(taking), copy.deepcopy(counters))
                results = self._allocate_claim(node, claim, *state, only)
                if results is not None:
                    taken, taking, counters = state
                    break
            else:
                return None
            picks.append((claim, results))
        return picks

    @staticmethod
    def _constraint_choices(node: NodeState, claim: ClaimState) -> list[dict[str, dict[str, Any]]]:
        """Per matchAttribute value combination: request name -> {flat attribute: value} its devices must have."""
        choices: list[dict[str, dict[str, Any]]] = [{}]
        for constraint in claim.constraints:
            key = str(constraint["matchAttribute"]).rpartition("/")[2]
            covered = constraint.get("requests") or [r["name"] for r in claim.requests]
            values = sorted({d.attrs[key] for d in node.devices if key in d.attrs}, key=str)
            choices = [{**choice, **{name: {**choice.get(name, {}), key: value} for name in covered}}
                       for choice in choices for value in values]
        return choices

    def _allocate_claim(self, node: NodeState, claim: ClaimState, taken: set[str],
                        taking: dict[str, dict[str, Fraction]], counters: dict[str, dict[str, int]],
                        only: dict[str, dict[str, Any]]) -> list | None:
        """One claim's picks, updating `taken`, `taking` and `counters`; None when it does not fit."""
        results = []
        for req in claim.requests:
            if req["mode"] == "All" and node.incomplete:
                return None  # "asks for all devices, but resource pool ... is currently being updated"
            cands = [d for d in node.devices if not d.tainted and self._device_matches(d, req)
                     and all(d.attrs.get(key) == value for key, value in only.get(req["name"], {}).items())]
            if req["admin"]:
                chosen = cands if req["mode"] == "All" else cands[: req["count"]]
                if not chosen or (req["mode"] == "ExactCount" and len(chosen) < req["count"]):
                    return None
                results += [(req, d, None) for d in chosen]
                continue
            free = []
            for d in cands:
                amounts = d.consumption(self._capacity_requests(req, d.driver)) if req["capacity"] or d.multi else {}
                usable = amounts is not None and d.fits(amounts or {}, taking.get(d.name, {}))
                in_use = d.allocated or (d.name in taken and not d.multi)
                if in_use or not usable:
                    if req["mode"] == "All":
                        return None
                    continue
                first_share = not d.multi or (not d.shares and d.name not in taking)
                needs = {(cs, k): v for cs, cc in d.consumes.items() for k, v in cc.items()} if first_share else {}
                if all(counters[cs][k] >= v for (cs, k), v in needs.items()):
                    for (cs, k), v in needs.items():
                        counters[cs][k] -= v
                    if d.multi:
                        share = taking.setdefault(d.name, {})
                        for cname, amount in amounts.items():
                            share[cname] = share.get(cname, 0) + amount
                    free.append((d, amounts if d.multi else None))
                    taken.add(d.name)
                    if req["mode"] == "ExactCount" and len(free) == req["count"]:
                        break
                elif req["mode"] == "All":
                    return None
            if not free or (req["mode"] == "ExactCount" and len(free) < req["count"]):
                return None
            results += [(req, d, amounts) for d, amounts in free]
        return results

    def _commit(self, node: NodeState, picks: list[tuple[ClaimState, list]]) -> None:
        for claim, results in picks:
            claim.node = node.name
            claim.results = []
            for req, dev, amounts in results:
                res = {"request": req["name"], "driver": dev.driver, "pool": node.name, "device": dev.name}
                if req["admin"]:
                    res["adminAccess"] = True
                elif amounts is not None:
                    # A share of a device with allowMultipleAllocations: its own shareID and what it consumes.
                    if not dev.shares:
                        for cs, cc in dev.consumes.items():
                            for k, v in cc.items():
                                node.counters[cs][k] -= v
                    dev.shares += 1
                    for cname, amount in amounts.items():
                        dev.consumed[cname] = dev.consumed.get(cname, 0) + amount
                    res["shareID"] = _uid(self.seed, "share", claim.namespace, f"{claim.name}/{req['name']}/{dev.name}")
                    res["consumedCapacity"] = {
                        cname: _fmt_quantity(amount, dev.capacity[cname][2]) for cname, amount in sorted(amounts.items())
                    }
                else:
                    dev.allocated = True
                    for cs, cc in dev.consumes.items():
                        for k, v in cc.items():
                            node.counters[cs][k] -= v
                claim.results.append(res)
