"""Compatibility of offerings with a workload's requirement, e.g. "CUDA 12.4, sm_80+".

Requirement terms (comma or space separated, case-insensitive):
- `cuda 12.4` / `cuda>=12.4`: the image's CUDA runtime; the offering's driver must support at least that CUDA
  version (its `cuda_max`, the highest CUDA the driver supports, must be ≥ 12.4);
- `sm_80`: cubins for compute capability 8.0 run on 8.x (same major, minor ≥ 0); `sm_80+` or `cc>=8.0`: any
  capability ≥ 8.0 (PTX is JIT-compiled for newer GPUs);
- `driver>=550.54`: minimum driver version (the offering's `driver_min` must be ≥ it);
- an architecture (`hopper`, `ampere`, `ada`, `blackwell`, `turing`, …) or `arch=hopper`;
- a CPU architecture (`amd64`, `arm64`);
- `memory>=40Gi` (also `40GiB`, `40GB` read as GiB): memory per unit;
- `k8s>=1.34` / `kubernetes 1.34`: the offering must support that Kubernetes version;
- `runtimeclass=nvidia`: the offering must require (or not conflict with) that runtime class.

An offering that does not declare a dimension the requirement asks about does not qualify: "unknown" is not
"compatible"; the reason says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from catalog.errors import CatalogError
from catalog.models import Offering
from catalog.versions import format_version, in_range, parse_version

ARCHITECTURES = {"kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "ada-lovelace", "hopper",
                 "blackwell", "rubin"}
CPU_ARCHITECTURES = {"amd64", "arm64", "ppc64le", "s390x"}


class RequirementError(CatalogError):
    pass


@dataclass
class Requirement:
    text: str = ""
    cuda: tuple[int, int, int] | None = None
    cc: tuple[int, int, int] | None = None
    cc_newer_ok: bool = False
    driver: tuple[int, int, int] | None = None
    architecture: str = ""
    cpu_architecture: str = ""
    memory_mib: int | None = None
    kubernetes: tuple[int, int, int] | None = None
    runtime_class: str = ""

    def describe(self) -> str:
        parts = []
        if self.cuda:
            parts.append(f"CUDA ≥ {format_version(self.cuda)}")
        if self.cc:
            parts.append(f"compute capability {format_version(self.cc)}" + ("+" if self.cc_newer_ok else
                                                                            f" (8.x-style: {self.cc[0]}.x)"))
        if self.driver:
            parts.append(f"driver ≥ {format_version(self.driver, 3)}")
        if self.architecture:
            parts.append(f"architecture {self.architecture}")
        if self.cpu_architecture:
            parts.append(f"CPU {self.cpu_architecture}")
        if self.memory_mib:
            parts.append(f"memory ≥ {self.memory_mib // 1024} GiB")
        if self.kubernetes:
            parts.append(f"Kubernetes {format_version(self.kubernetes)}")
        if self.runtime_class:
            parts.append(f"runtime class {self.runtime_class}")
        return ", ".join(parts)


def _memory_mib(value: str) -> int | None:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(gi|gib|gb|g|mi|mib|mb|m)?", value.lower())
    if not match:
        return None
    number = float(match.group(1))
    unit = match.group(2) or "gi"
    return int(number * 1024) if unit.startswith("g") else int(number)


def parse_requirement(text: str) -> Requirement:
    """Parse a requirement; raises RequirementError naming the term it does not understand."""
    req = Requirement(text=text.strip())
    if len(text) > 500:
        raise RequirementError("The requirement is too long (at most 500 characters).")
    tokens = [t for t in re.split(r"\s*,\s*|\s+(?=[a-zA-Z])", text.strip()) if t]
    pending_key = ""
    for raw in tokens:
        token = raw.strip().lower()
        if token in {"cuda", "driver", "cc", "memory", "mem", "k8s", "kubernetes", "arch", "runtimeclass"}:
            pending_key = token
            continue
        if pending_key:
            token, pending_key = f"{pending_key} {token}", ""
        token = re.sub(r"\s+", " ", token)
        match = re.fullmatch(r"(cuda|driver|cc|memory|mem|k8s|kubernetes|arch|runtimeclass)\s*(>=|=|:|\s)?\s*(.+)",
                             token)
        if token.startswith(("sm_", "sm")):
            cc = re.fullmatch(r"sm_?(\d)(\d)(\+)?", token)
            if not cc:
                raise RequirementError(f"{raw!r}: write a compute capability as sm_80 or sm_80+.")
            req.cc, req.cc_newer_ok = (int(cc.group(1)), int(cc.group(2)), 0), bool(cc.group(3))
        elif match:
            _apply_keyed_term(req, raw, match.group(1), match.group(3).strip().rstrip("+"))
        elif token in ARCHITECTURES:
            req.architecture = token
        elif token in CPU_ARCHITECTURES:
            req.cpu_architecture = token
        else:
            raise RequirementError(
                f"Not understood: {raw!r}. Use terms like 'cuda 12.4', 'sm_80+', 'driver>=550', 'hopper', "
                "'arm64', 'memory>=40Gi', 'k8s 1.34', 'runtimeclass=nvidia'."
            )
    if pending_key:
        raise RequirementError(f"{pending_key!r} needs a value, e.g. '{pending_key} 12.4'.")
    return req


def _apply_keyed_term(req: Requirement, raw: str, key: str, value: str) -> None:
    """Record a `<key> <value>` term (cuda, driver, cc, k8s/kubernetes, memory/mem, arch, runtimeclass)."""
    if key in {"cuda", "driver", "cc", "k8s", "kubernetes"}:
        version = parse_version(value)
        if version is None:
            raise RequirementError(f"{raw!r}: {value!r} is not a version.")
        if key == "cuda":
            req.cuda = version
        elif key == "driver":
            req.driver = version
        elif key == "cc":
            req.cc, req.cc_newer_ok = version, True
        else:
            req.kubernetes = version
    elif key in {"memory", "mem"}:
        req.memory_mib = _memory_mib(value)
        if req.memory_mib is None:
            raise RequirementError(f"{raw!r}: write memory as 40Gi or 40GB.")
    elif key == "arch":
        req.architecture = value
    else:
        req.runtime_class = value


@dataclass
class Verdict:
    offering: Offering
    qualifies: bool
    reasons: list[str] = field(default_factory=list)   # why not (empty when it qualifies)
    satisfied: list[str] = field(default_factory=list)


def offering_check(offering: Offering, req: Requirement) -> Verdict:
    bad: list[str] = []
    ok: list[str] = []
    _check_cuda(offering, req, bad, ok)
    _check_compute_capability(offering, req, bad, ok)
    _check_driver(offering, req, bad, ok)
    _check_architecture(offering, req, bad, ok)
    _check_cpu_architecture(offering, req, bad, ok)
    _check_memory(offering, req, bad, ok)
    _check_kubernetes(offering, req, bad, ok)
    if req.runtime_class and offering.runtime_class and offering.runtime_class != req.runtime_class:
        bad.append(f"requires runtime class {offering.runtime_class}, not {req.runtime_class}")
    return Verdict(offering, not bad, bad, ok)


# Each check adds to `bad` why the offering fails one term of the requirement, or to `ok` what it satisfies.


def _check_cuda(offering: Offering, req: Requirement, bad: list[str], ok: list[str]) -> None:
    if not req.cuda:
        return
    need = format_version(req.cuda)
    if not offering.cuda_max:
        bad.append(f"does not declare the CUDA versions its driver supports (needs ≥ {need})")
    elif not in_range(req.cuda, "", offering.cuda_max) or (
        (top := parse_version(offering.cuda_max)) is not None and top[:2] < req.cuda[:2]
    ):
        bad.append(f"driver supports CUDA up to {offering.cuda_max}, the image needs {need}")
    else:
        ok.append(f"CUDA {need} ≤ {offering.cuda_max}")


def _check_compute_capability(offering: Offering, req: Requirement, bad: list[str], ok: list[str]) -> None:
    if not req.cc:
        return
    need = format_version(req.cc)
    have = parse_version(offering.compute_capability) if offering.compute_capability else None
    if have is None:
        bad.append(f"does not declare its compute capability (needs {need}{'+' if req.cc_newer_ok else ''})")
    elif req.cc_newer_ok and have[:2] < req.cc[:2]:
        bad.append(f"compute capability {offering.compute_capability} is below {need}")
    elif not req.cc_newer_ok and (have[0] != req.cc[0] or have[1] < req.cc[1]):
        bad.append(f"compute capability {offering.compute_capability} cannot run sm_{req.cc[0]}{req.cc[1]} "
                   f"cubins (needs {req.cc[0]}.{req.cc[1]} to {req.cc[0]}.x; add '+' to accept PTX on newer GPUs)")
    else:
        ok.append(f"compute capability {offering.compute_capability}")


def _check_driver(offering: Offering, req: Requirement, bad: list[str], ok: list[str]) -> None:
    if not req.driver:
        return
    need = format_version(req.driver, 3)
    have = parse_version(offering.driver_min) if offering.driver_min else None
    if have is None:
        bad.append(f"does not declare a minimum driver version (needs ≥ {need})")
    elif have < req.driver:
        bad.append(f"drivers from {offering.driver_min} may be older than {need}")
    else:
        ok.append(f"driver ≥ {offering.driver_min}")


def _check_architecture(offering: Offering, req: Requirement, bad: list[str], ok: list[str]) -> None:
    if not req.architecture:
        return
    architecture = offering.architecture.lower()
    if not architecture:
        bad.append(f"does not declare its GPU architecture (needs {req.architecture})")
    elif architecture.replace("-lovelace", "") != req.architecture.replace("-lovelace", ""):
        bad.append(f"architecture {offering.architecture}, not {req.architecture}")
    else:
        ok.append(f"architecture {offering.architecture}")


def _check_cpu_architecture(offering: Offering, req: Requirement, bad: list[str], ok: list[str]) -> None:
    if not req.cpu_architecture:
        return
    archs = [str(a).lower() for a in offering.cpu_architectures or []]
    if not archs:
        bad.append(f"does not declare its nodes' CPU architecture (needs {req.cpu_architecture})")
    elif req.cpu_architecture not in archs:
        bad.append(f"nodes are {', '.join(archs)}, not {req.cpu_architecture}")
    else:
        ok.append(f"CPU {req.cpu_architecture}")


def _check_memory(offering: Offering, req: Requirement, bad: list[str], ok: list[str]) -> None:
    if not req.memory_mib:
        return
    if offering.memory_mib is None:
        bad.append("does not declare the memory of a unit")
    elif offering.memory_mib < req.memory_mib:
        bad.append(f"a unit has {offering.memory_mib // 1024} GiB, less than {req.memory_mib // 1024} GiB"
                   + (" (time-slice replicas share the card's memory)" if offering.unit_kind == "time-slicing"
                      else ""))
    else:
        ok.append(f"{offering.memory_mib // 1024} GiB per unit")


def _check_kubernetes(offering: Offering, req: Requirement, bad: list[str], ok: list[str]) -> None:
    if not req.kubernetes:
        return
    if not in_range(req.kubernetes, offering.kubernetes_min, offering.kubernetes_max):
        bad.append(f"supports Kubernetes {offering.kubernetes_min or 'any'} to {offering.kubernetes_max or 'any'}, "
                   f"not {format_version(req.kubernetes)}")
    else:
        ok.append(f"Kubernetes {format_version(req.kubernetes)}")


def offerings_check(offerings: Iterable[Offering], text: str) -> tuple[Requirement, list[Verdict]]:
    req = parse_requirement(text)
    verdicts = [offering_check(o, req) for o in offerings]
    verdicts.sort(key=lambda v: (not v.qualifies, v.offering.name))
    return req, verdicts
