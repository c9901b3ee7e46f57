"""The baseline Pod Security Standard table: the evaluator on the shared cases, the CEL generated from the same table
(evaluated by the simulator's CEL runtime) agreeing with it on the cases and on random pods, and the scan's prefilter
never dropping a violating pod."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest

from inventory.k8s.podsecurity import (
    ALLOWED_CAPABILITIES,
    CONTROLS,
    baseline_violations,
    cel_variables,
    pod_violates_baseline,
    pod_violations,
    prefilter_keys,
)
from kubesim.admission import CompiledPolicy, _Evaluation
from tests.podsecurity_cases import CASE_IDS, CASES, Case

_COMPILED = CompiledPolicy.compile({"metadata": {"name": "baseline"}, "spec": {
    "matchConstraints": {"resourceRules": []}, "variables": cel_variables(), "validations": []}})


def cel_controls(pod: dict[str, Any]) -> set[str]:
    evaluation = _Evaluation(_COMPILED, {"object": pod, "oldObject": None, "params": None, "request": {},
                                         "namespaceObject": None})
    titles, error = evaluation.evaluate(_COMPILED.variables["baselineViolations"])
    assert error is None, error
    return {control.id for control in CONTROLS if control.title in titles}


def test_the_generated_variables_compile() -> None:
    assert {name: program.error for name, program in _COMPILED.variables.items() if program.error} == {}
    assert [v["name"] for v in cel_variables()] == ["containers", *(c.id for c in CONTROLS), "baselineViolations"]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_evaluator_and_generated_cel_on_the_shared_cases(case: Case) -> None:
    pod = case.pod("case")
    assert {v.control for v in pod_violations(pod)} == case.violates
    assert cel_controls(pod) == case.violates


def test_violations_say_which_container_and_field() -> None:
    pod = next(c for c in CASES if c.id == "privileged-sidecar").pod("p")
    (violation,) = pod_violations(pod)
    assert (violation.control, violation.container_kind, violation.container, violation.field, violation.value) == (
        "privileged", "sidecar container", "sidecar", "spec.initContainers[0].securityContext.privileged", True)
    annotated = next(c for c in CASES if c.id == "apparmor-unconfined-annotation").pod("p")
    (violation,) = pod_violations(annotated)
    assert violation.path == ("metadata", "annotations", "container.apparmor.security.beta.kubernetes.io/main")
    assert (violation.container, violation.value) == ("main", "unconfined")


def test_the_table_is_upstreams() -> None:
    """check_capabilities_baseline.go's default set; capability names are exact (no CAP_ prefix, no case folding)."""
    assert sorted(ALLOWED_CAPABILITIES) == ["AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                                            "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"]
    spec = {"containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["chown", "CAP_CHOWN"]}}}]}
    assert [v.value for v in baseline_violations({}, spec)] == ["chown", "CAP_CHOWN"]


@pytest.mark.parametrize("junk", [None, [], "x", 7, {"spec": []}, {"spec": {"containers": "x", "volumes": [None]}},
                                  {"spec": {"containers": [None, {"securityContext": []}], "securityContext": 5}},
                                  {"metadata": {"annotations": []}, "spec": {"hostPID": "yes"}}])
def test_malformed_pods_never_raise(junk: Any) -> None:
    assert pod_violations(junk) == []


# Fragments the random pods are built from: each shared case's spec, container, annotations and ephemeral container.
def _random_pod(rng: random.Random) -> dict[str, Any]:
    pod: dict[str, Any] = {"metadata": {"name": "r"}, "spec": {"containers": [{"name": "main", "image": "x"}]}}
    for case in rng.sample(CASES, rng.randint(1, 4)):
        part = case.pod("r")
        pod["spec"] = {**pod["spec"], **{k: v for k, v in part["spec"].items() if k != "containers"}}
        main = pod["spec"]["containers"][0]
        for key, value in part["spec"]["containers"][0].items():
            if key == "securityContext" and isinstance(main.get(key), dict):
                main[key] = {**main[key], **value}
            else:
                main[key] = value
        if case.annotations:
            pod["metadata"].setdefault("annotations", {}).update(case.annotations)
    if rng.random() < 0.3:  # the same container again, as an init container or sidecar
        extra = copy.deepcopy(pod["spec"]["containers"][0])
        extra["name"] = "copy"
        if rng.random() < 0.5:
            extra["restartPolicy"] = "Always"
        pod["spec"]["initContainers"] = [*pod["spec"].get("initContainers", []), extra]
        pod["spec"]["containers"][0] = {"name": "main", "image": "x"}
    return pod


def test_evaluator_and_generated_cel_agree_on_random_pods() -> None:
    rng = random.Random(16)
    seen: set[frozenset[str]] = set()
    for _ in range(300):
        pod = _random_pod(rng)
        expected = {v.control for v in pod_violations(pod)}
        assert cel_controls(pod) == expected, json.dumps(pod)
        seen.add(frozenset(expected))
    assert len(seen) > 40  # the random pods cover many combinations


@pytest.mark.parametrize("case", [c for c in CASES if c.needs_exception], ids=lambda c: c.id)
def test_every_violating_case_contains_a_prefilter_key(case: Case) -> None:
    """The scan's SQL prefilter searches the jsonb text for these keys: a violating pod must contain one."""
    text = json.dumps(case.pod("p"), separators=(", ", ": "))
    assert any(key in text for key in prefilter_keys())


def test_an_ordinary_pod_contains_no_prefilter_key() -> None:
    text = json.dumps(next(c for c in CASES if c.id == "clean-minimal").pod("p"), separators=(", ", ": "))
    assert not any(key in text for key in prefilter_keys())


def test_the_quick_classification_agrees_with_the_full_evaluation() -> None:
    """The sync stores `pod_violates_baseline` (prefilter first, then the rules): on every shared case and on random
    pods it says what the full evaluation says, also for pods whose JSON holds a prefilter key without violating."""
    pods = [case.pod("p") for case in CASES]
    rng = random.Random(17)
    pods += [_random_pod(rng) for _ in range(300)]
    verdicts = [(pod_violates_baseline(pod), bool(pod_violations(pod))) for pod in pods]
    assert all(quick == full for quick, full in verdicts)
    assert {full for _, full in verdicts} == {True, False}
    keyed_but_clean = [pod for pod in pods if not pod_violations(pod)
                       and any(key in json.dumps(pod) for key in prefilter_keys())]
    assert keyed_but_clean  # the prefilter alone would have said yes: the rules decided
