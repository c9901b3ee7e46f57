"""Resource type registry, discovery documents and Table conversion for the simulator."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace

from .apis import (
    ADMISSION_GROUP,
    EVENTS_GROUP,
    KUEUE_GROUP,
    KUEUE_STORAGE_VERSION,
    RESOURCE_GROUP,
    VISIBILITY_GROUP,
    ApiProfile,
    profile,
)

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
INTEGER_COLUMNS = frozenset({"pod_restarts", "cm_data", "vap_validations"})


@dataclass(frozen=True)
class ResourceType:
    """One served kind."""

    plural: str
    singular: str
    kind: str
    group: str
    version: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    has_status: bool = False
    columns: tuple[tuple[str, str], ...] = field(default=(("Name", "name"), ("Age", "age")))
    categories: tuple[str, ...] = ()
    has_generation: bool = True  # metadata.generation is maintained (kinds without spec, like ConfigMap, have none)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return self.kind + "List"


RESOURCES: dict[str, ResourceType] = {
    r.plural: r
    for r in [
        ResourceType(
            "namespaces",
            "namespace",
            "Namespace",
            "",
            "v1",
            False,
            ("ns",),
            True,
            (("Name", "name"), ("Status", "ns_status"), ("Age", "age")),
        ),
        ResourceType(
            "nodes",
            "node",
            "Node",
            "",
            "v1",
            False,
            ("no",),
            True,
            (
                ("Name", "name"),
                ("Status", "node_status"),
                ("Roles", "node_roles"),
                ("Age", "age"),
                ("Version", "node_version"),
            ),
        ),
        ResourceType(
            "pods",
            "pod",
            "Pod",
            "",
            "v1",
            True,
            ("po",),
            True,
            (
                ("Name", "name"),
                ("Ready", "pod_ready"),
                ("Status", "pod_status"),
                ("Restarts", "pod_restarts"),
                ("Age", "age"),
                ("Node", "pod_node"),
            ),
        ),
        ResourceType("resourcequotas", "resourcequota", "ResourceQuota", "", "v1", True, ("quota",), True),
        ResourceType("limitranges", "limitrange", "LimitRange", "", "v1", True, ("limits",), False),
        ResourceType(
            "configmaps",
            "configmap",
            "ConfigMap",
            "",
            "v1",
            True,
            ("cm",),
            False,
            (("Name", "name"), ("Data", "cm_data"), ("Age", "age")),
            has_generation=False,
        ),
        ResourceType(
            "events",
            "event",
            "Event",
            "",
            "v1",
            True,
            ("ev",),
            False,
            (
                ("Last Seen", "ev_last_seen"),
                ("Type", "ev_type"),
                ("Reason", "ev_reason"),
                ("Object", "ev_object"),
                ("Message", "ev_message"),
                ("Name", "name"),
            ),
        ),
        ResourceType(
            "resourceslices",
            "resourceslice",
            "ResourceSlice",
            RESOURCE_GROUP,
            "v1",
            False,
            (),
            False,
            (
                ("Name", "name"),
                ("Node", "slice_node"),
                ("Driver", "slice_driver"),
                ("Pool", "slice_pool"),
                ("Age", "age"),
            ),
        ),
        ResourceType("deviceclasses", "deviceclass", "DeviceClass", RESOURCE_GROUP, "v1", False),
        ResourceType(
            "resourceclaims",
            "resourceclaim",
            "ResourceClaim",
            RESOURCE_GROUP,
            "v1",
            True,
            (),
            True,
            (("Name", "name"), ("State", "claim_state"), ("Age", "age")),
        ),
        ResourceType(
            "resourceclaimtemplates", "resourceclaimtemplate", "ResourceClaimTemplate", RESOURCE_GROUP, "v1", True
        ),
        ResourceType(
            "validatingadmissionpolicies",
            "validatingadmissionpolicy",
            "ValidatingAdmissionPolicy",
            ADMISSION_GROUP,
            "v1",
            False,
            (),
            True,
            (("Name", "name"), ("Validations", "vap_validations"), ("ParamKind", "vap_param_kind"), ("Age", "age")),
            ("api-extensions",),
        ),
        ResourceType(
            "validatingadmissionpolicybindings",
            "validatingadmissionpolicybinding",
            "ValidatingAdmissionPolicyBinding",
            ADMISSION_GROUP,
            "v1",
            False,
            (),
            False,
            (("Name", "name"), ("PolicyName", "vapb_policy"), ("ParamRef", "vapb_param_ref"), ("Age", "age")),
            ("api-extensions",),
        ),
        # Kueue (served only by profiles that install it): stored at its storage version v1beta2.
        ResourceType("topologies", "topology", "Topology", KUEUE_GROUP, KUEUE_STORAGE_VERSION, False),
        ResourceType("resourceflavors", "resourceflavor", "ResourceFlavor", KUEUE_GROUP, KUEUE_STORAGE_VERSION, False,
                     ("flavor", "flavors", "rf")),
        ResourceType("cohorts", "cohort", "Cohort", KUEUE_GROUP, KUEUE_STORAGE_VERSION, False, ("co",), True),
        ResourceType("clusterqueues", "clusterqueue", "ClusterQueue", KUEUE_GROUP, KUEUE_STORAGE_VERSION, False,
                     ("cq",), True),
        ResourceType("localqueues", "localqueue", "LocalQueue", KUEUE_GROUP, KUEUE_STORAGE_VERSION, True,
                     ("queue", "queues", "lq"), True),
        ResourceType("workloads", "workload", "Workload", KUEUE_GROUP, KUEUE_STORAGE_VERSION, True, ("wl",), True),
    ]
}
# The version each named group is stored at (everything else: v1).
STORAGE_VERSIONS = {KUEUE_GROUP: KUEUE_STORAGE_VERSION}

BY_KIND: dict[tuple[str, str], ResourceType] = {(r.api_version, r.kind): r for r in RESOURCES.values()}
# events.k8s.io/v1 Event: a view of the stored core/v1 Events (same store key "events"), in the new field names
EVENTS_V1 = replace(RESOURCES["events"], group=EVENTS_GROUP)


def served_types(api: ApiProfile) -> dict[tuple[str, str], dict[str, ResourceType]]:
    """(group, version) → plural → type, for every group version the profile serves (core first)."""
    served: dict[tuple[str, str], dict[str, ResourceType]] = {("", "v1"): by_group_version("", "v1")}
    for group, versions in api.group_versions().items():
        if group == VISIBILITY_GROUP:  # an aggregated API with no stored kinds (server.py answers it)
            continue
        for version in versions:
            if group == EVENTS_GROUP:
                served[(group, version)] = {"events": EVENTS_V1}
            else:
                stored = by_group_version(group, STORAGE_VERSIONS.get(group, "v1"))
                served[(group, version)] = {p: replace(r, version=version) for p, r in stored.items()}
    return served


def storage_group_served(api: ApiProfile, obj: dict) -> bool:
    """Whether the profile serves the kind of a stored object at all (objects of other kinds are not loaded)."""
    rt = for_object(obj)
    return rt is None or not rt.group or rt.group in api.group_versions()
KIND_ORDER = [
    "namespaces",
    "configmaps",
    "validatingadmissionpolicies",
    "validatingadmissionpolicybindings",
    "nodes",
    "deviceclasses",
    "resourceslices",
    "resourcequotas",
    "limitranges",
    "resourceclaimtemplates",
    "resourceclaims",
    "pods",
    "events",
    "topologies",
    "resourceflavors",
    "cohorts",
    "clusterqueues",
    "localqueues",
    "workloads",
]


def by_group_version(group: str, version: str) -> dict[str, ResourceType]:
    return {r.plural: r for r in RESOURCES.values() if r.group == group and r.version == version}


def for_object(obj: dict) -> ResourceType | None:
    return BY_KIND.get((obj.get("apiVersion", ""), obj.get("kind", "")))


# ----------------------------------------------------------------------------------------------- discovery
def version_doc(api: ApiProfile | None = None) -> dict:
    api = api or profile(None)
    return {
        "major": "1",
        "minor": api.minor,
        "gitVersion": api.git_version,
        "gitCommit": "kubesim",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.25.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions_doc() -> dict:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}],
    }


def _group_doc(group: str, versions: tuple[str, ...]) -> dict:
    gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": gvs, "preferredVersion": gvs[0]}


def api_group_list_doc(api: ApiProfile | None = None) -> dict:
    groups = (api or profile(None)).group_versions()
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group_doc(g, v) for g, v in groups.items()]}


def api_group_doc(group: str = RESOURCE_GROUP, api: ApiProfile | None = None) -> dict:
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_doc(group, (api or profile(None)).group_versions()[group])}


def _visibility_resources() -> list[dict]:
    """Kueue's visibility API: clusterqueues and localqueues exist only to carry their `pendingworkloads`
    subresource (no verbs of their own), whose GET answers a PendingWorkloadsSummary."""
    out = []
    for plural, singular, namespaced in (("clusterqueues", "clusterqueue", False), ("localqueues", "localqueue", True)):
        out.append({"name": plural, "singularName": singular, "namespaced": namespaced,
                    "kind": "PendingWorkloadsSummary", "verbs": []})
        out.append({"name": f"{plural}/pendingworkloads", "singularName": "", "namespaced": namespaced,
                    "kind": "PendingWorkloadsSummary", "verbs": ["get"]})
    return out


def resource_list_doc(group: str, version: str, api: ApiProfile | None = None) -> dict:
    if group == VISIBILITY_GROUP:
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}",
                "resources": _visibility_resources()}
    resources = []
    for r in served_types(api or profile(None)).get((group, version), {}).values():
        entry = {
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": list(VERBS),
            "storageVersionHash": r.kind.lower(),
        }
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if r.group or r.categories:
            entry["categories"] = list(r.categories)
        resources.append(entry)
        if r.plural == "pods":
            resources.append(
                {
                    "name": "pods/ephemeralcontainers",
                    "singularName": "",
                    "namespaced": True,
                    "kind": "Pod",
                    "verbs": ["get", "patch", "update"],
                }
            )
        if r.has_status:
            resources.append(
                {
                    "name": f"{r.plural}/status",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


# ----------------------------------------------------------------------------------------------- tables
def parse_time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def human_duration(seconds: float) -> str:
    """Mimic apimachinery's duration.HumanDuration."""
    s = int(seconds)
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = s // 3600
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if h < 24 * 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    if d < 365 * 2:
        return f"{d}d"
    return f"{d // 365}y{d % 365}d" if d % 365 else f"{d // 365}y"


def _cell(obj: dict, how: str, now: dt.datetime):
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if how == "name":
        return meta.get("name", "")
    if how == "age":
        ts = parse_time(meta.get("creationTimestamp"))
        return "<unknown>" if ts is None else human_duration((now - ts).total_seconds())
    if how == "ns_status":
        return status.get("phase", "Active")
    if how.startswith("node_"):
        return _node_cell(how, meta, spec, status)
    if how.startswith("pod_"):
        return _pod_cell(how, spec, status)
    if how.startswith("ev_"):
        return _event_cell(obj, how, meta, now)
    if how.startswith(("slice_", "claim_")):
        return _dra_cell(how, spec, status)
    return _admission_cell(obj, how, spec)


def _node_cell(how: str, meta: dict, spec: dict, status: dict) -> str:
    if how == "node_status":
        ready = "Unknown"
        for c in status.get("conditions") or []:
            if c.get("type") == "Ready":
                ready = "Ready" if c.get("status") == "True" else "NotReady"
        if spec.get("unschedulable"):
            ready += ",SchedulingDisabled"
        return ready
    if how == "node_roles":
        roles = sorted(
            k.split("/", 1)[1] for k in (meta.get("labels") or {}) if k.startswith("node-role.kubernetes.io/")
        )
        return ",".join(r for r in roles if r) or "<none>"
    if how == "node_version":
        return (status.get("nodeInfo") or {}).get("kubeletVersion", "")
    return ""


def _pod_cell(how: str, spec: dict, status: dict) -> str | int:
    if how == "pod_ready":
        cs = status.get("containerStatuses") or []
        total = len(spec.get("containers") or []) or len(cs)
        return f"{sum(1 for c in cs if c.get('ready'))}/{total}"
    if how == "pod_status":
        return status.get("reason") or status.get("phase", "Pending")
    if how == "pod_restarts":
        return sum(int(c.get("restartCount", 0)) for c in status.get("containerStatuses") or [])
    if how == "pod_node":
        return spec.get("nodeName") or "<none>"
    return ""


def _event_cell(obj: dict, how: str, meta: dict, now: dt.datetime) -> str:
    if how == "ev_last_seen":
        ts = parse_time(obj.get("lastTimestamp") or obj.get("eventTime") or meta.get("creationTimestamp"))
        return "<unknown>" if ts is None else human_duration((now - ts).total_seconds())
    if how == "ev_object":
        io = obj.get("involvedObject") or {}
        return f"{(io.get('kind') or '').lower()}/{io.get('name', '')}"
    if how == "ev_type":
        return obj.get("type", "")
    if how == "ev_reason":
        return obj.get("reason", "")
    if how == "ev_message":
        return obj.get("message", "")
    return ""


def _dra_cell(how: str, spec: dict, status: dict) -> str:
    """Cells of ResourceSlices and ResourceClaims."""
    if how == "slice_node":
        return spec.get("nodeName") or ""
    if how == "slice_driver":
        return spec.get("driver", "")
    if how == "slice_pool":
        return (spec.get("pool") or {}).get("name", "")
    if how == "claim_state":
        if status.get("allocation"):
            return "allocated,reserved" if status.get("reservedFor") else "allocated"
        return "pending"
    return ""


def _admission_cell(obj: dict, how: str, spec: dict) -> str | int:
    """Cells of ConfigMaps and admission policies (as the API server's printers fill them)."""
    if how == "cm_data":
        return len(obj.get("data") or {}) + len(obj.get("binaryData") or {})
    if how == "vap_validations":
        return len(spec.get("validations") or [])
    if how == "vap_param_kind":
        kind = spec.get("paramKind")
        return f"{kind.get('apiVersion', '')}/{kind.get('kind', '')}" if isinstance(kind, dict) else "<unset>"
    if how == "vapb_policy":
        return spec.get("policyName", "")
    if how == "vapb_param_ref":
        return _param_ref_cell(spec.get("paramRef"))
    return ""


def _param_ref_cell(ref: object) -> str:
    if not isinstance(ref, dict):
        return "<unset>"
    if ref.get("name"):
        return f"{ref.get('namespace') or '*'}/{ref['name']}"
    if isinstance(ref.get("selector"), dict):
        return _go_label_selector_string(ref["selector"])
    return "<unset>"


def _go_label_selector_string(selector: dict) -> str:
    """metav1.LabelSelector.String() (the generated Go form), e.g. `&LabelSelector{MatchLabels:map[string]string{},...}`."""
    labels = selector.get("matchLabels") or {}
    exprs = selector.get("matchExpressions") or []
    label_text = "".join(f"{k}: {labels[k]}," for k in sorted(labels))
    expr_text = "".join(
        f"LabelSelectorRequirement{{Key:{e.get('key', '')},Operator:{e.get('operator', '')},"
        f"Values:[{' '.join(e.get('values') or [])}],}},"
        for e in exprs
        if isinstance(e, dict)
    )
    return (
        f"&LabelSelector{{MatchLabels:map[string]string{{{label_text}}},"
        f"MatchExpressions:[]LabelSelectorRequirement{{{expr_text}}},}}"
    )


def column_definitions(rt: ResourceType) -> list[dict]:
    return [
        {
            "name": name,
            "type": "integer" if how in INTEGER_COLUMNS else "string",
            "format": "name" if how == "name" else "",
            "description": name,
            "priority": 1 if how == "pod_node" or (rt.plural == "events" and how == "name") else 0,
        }
        for name, how in rt.columns
    ]


def table_row(rt: ResourceType, obj: dict, include_object: str, now: dt.datetime) -> dict:
    row: dict = {"cells": [_cell(obj, how, now) for _, how in rt.columns]}
    if include_object == "Object":
        row["object"] = obj
    elif include_object != "None":
        meta = dict(obj.get("metadata") or {})
        meta.pop("managedFields", None)
        row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}
    return row


def table(rt: ResourceType, objs: list[dict], include_object: str, list_meta: dict, with_columns: bool = True) -> dict:
    now = dt.datetime.now(dt.UTC)
    doc: dict = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta}
    if with_columns:
        doc["columnDefinitions"] = column_definitions(rt)
    doc["rows"] = [table_row(rt, o, include_object, now) for o in objs]
    return doc


# ----------------------------------------------------------------------------------------------- openapi v3
def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def openapi_v3_root(api: ApiProfile | None = None) -> dict:
    paths = {}
    for group, version in served_types(api or profile(None)):
        p = _gv_path(group, version)
        paths[p] = {"serverRelativeURL": f"/openapi/v3/{p}?hash=kubesim"}
    return {"paths": paths}


def openapi_v3_doc(gv_path: str, api: ApiProfile | None = None) -> dict | None:
    """A minimal OpenAPI v3 document: enough for kubectl's query-parameter (fieldValidation/dryRun) checks."""
    served = served_types(api or profile(None))
    found = [gv for gv in served if _gv_path(*gv) == gv_path]
    if not found:
        return None
    group, version = found[0]
    params = [
        {"name": n, "in": "query", "schema": {"type": "string"}, "uniqueItems": True}
        for n in ("dryRun", "fieldManager", "fieldValidation", "force", "pretty")
    ]
    paths: dict = {}
    schemas: dict = {}
    for rt in served[(group, version)].values():
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        base = f"/{gv_path}/" + ("namespaces/{namespace}/" if rt.namespaced else "") + rt.plural + "/{name}"
        schema_name = f"io.k8s.kubesim.{rt.group or 'core'}.{rt.version}.{rt.kind}"
        op = {
            "operationId": f"patch{rt.kind}",
            "parameters": params,
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": gvk,
            "responses": {
                "200": {
                    "description": "OK",
                    "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema_name}"}}},
                }
            },
        }
        paths[base] = {"patch": op}
        schemas[schema_name] = {
            "type": "object",
            "x-kubernetes-group-version-kind": [gvk],
            "x-kubernetes-preserve-unknown-fields": True,
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": (api or profile(None)).git_version},
        "paths": paths,
        "components": {"schemas": schemas},
    }
