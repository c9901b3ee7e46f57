"""Cluster registry and the mirrored Kubernetes objects.

Every synced kind shares one abstract base (`KubeObject`): the whole object as JSON plus the columns queries need,
keyed by (cluster, uid). Objects that vanish from the cluster become tombstones (`deleted_at`) so that chargeback
and the CMDB change feed keep their history.
"""

from __future__ import annotations

from typing import Any, Self

from django.db import models
from django.db.models import Q
from django.urls import reverse

from core.types import RequestUser
from inventory.fields import BulkJSONField, EncryptedTextField


class ClusterQuerySet(models.QuerySet["Cluster"]):
    def enabled(self) -> Self:
        return self.filter(sync_enabled=True)


class Cluster(models.Model):
    """A Kubernetes cluster whose objects we mirror. The kubeconfig is a secret: never logged, never rendered."""

    class ConnectionKind(models.TextChoices):
        KUBECONFIG = "kubeconfig", "Kubeconfig content"
        KUBECONFIG_PATH = "kubeconfig_path", "Kubeconfig file path"
        IN_CLUSTER = "in_cluster", "In-cluster service account"

    name = models.SlugField(max_length=63)
    description = models.CharField(max_length=200, blank=True)
    connection = models.CharField(max_length=20, choices=ConnectionKind.choices, default=ConnectionKind.KUBECONFIG)
    kubeconfig = EncryptedTextField(blank=True, help_text="Kubeconfig YAML. Secret: encrypted at rest, never logged or "
                                    "displayed.")
    kubeconfig_path = models.CharField(max_length=500, blank=True)
    context = models.CharField(max_length=200, blank=True, help_text="Kubeconfig context; empty = current-context.")
    sync_enabled = models.BooleanField(default=True)
    server_version = models.CharField(max_length=50, blank=True)
    # The discovery documents that matter (inventory/k8s/discovery.py ApiDiscovery.to_json): which kinds are synced
    # at which version, and why the others are not.
    api_discovery = models.JSONField(default=dict, blank=True)
    discovered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ClusterQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["name"], name="inventory_cluster_unique_name")]

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:  # never include the kubeconfig
        return f"<Cluster {self.pk} {self.name}>"

    def get_absolute_url(self) -> str:
        return reverse("inventory:cluster_detail", kwargs={"pk": self.pk})


class SyncState(models.Model):
    """Where the sync of one (cluster, kind) stands: resume point, fencing token, progress and last error."""

    class Phase(models.TextChoices):
        IDLE = "idle", "Idle"
        LISTING = "listing", "Listing"
        WATCHING = "watching", "Watching"
        ERROR = "error", "Error"
        UNSERVED = "unserved", "Not served"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="sync_states")
    kind = models.CharField(max_length=40)
    resource_version = models.CharField(max_length=64, blank=True)
    # Highest lease token that has written here; a writer holding a lower token has lost its lease.
    fence = models.BigIntegerField(default=0)
    phase = models.CharField(max_length=10, choices=Phase.choices, default=Phase.IDLE)
    list_id = models.BigIntegerField(default=0, help_text="Increments with every full listing.")
    listed_count = models.IntegerField(default=0, help_text="Objects seen so far by the running listing.")
    list_total = models.IntegerField(null=True, blank=True, help_text="Estimated total of the running listing.")
    last_list_started_at = models.DateTimeField(null=True, blank=True)
    last_list_finished_at = models.DateTimeField(null=True, blank=True)
    last_list_seconds = models.FloatField(null=True, blank=True)
    last_event_at = models.DateTimeField(null=True, blank=True, help_text="Last watch event or bookmark applied.")
    last_success_at = models.DateTimeField(null=True, blank=True)
    events_applied = models.BigIntegerField(default=0)
    relists = models.IntegerField(default=0)
    lease_losses = models.IntegerField(default=0, help_text="Windows that ended because their lease was lost.")
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    served_version = models.CharField(max_length=100, blank=True, help_text="apiVersion the kind is synced at.")
    unavailable_reason = models.TextField(blank=True, help_text="Why the cluster does not serve the kind (phase "
                                          "unserved): a state, not an error.")
    # Lease for the embedded (database) lease backend; the Redis backend keeps it in Redis.
    lease_token = models.BigIntegerField(default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster", "kind"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "kind"], name="inventory_syncstate_unique_cluster_kind")
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id}/{self.kind}"


class SyncIncident(models.Model):
    """Something the sync of a (cluster, kind) lived through that an operator should see: the server's history went
    back (an etcd restore), a lease lost mid-window, a safety-net relist that found the database had drifted."""

    class Cause(models.TextChoices):
        HISTORY_REWOUND = "history_rewound", "Server history went back"
        LEASE_LOST = "lease_lost", "Lease lost"
        RELIST_DRIFT = "relist_drift", "Periodic relist found drift"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="sync_incidents")
    kind = models.CharField(max_length=40)
    cause = models.CharField(max_length=20, choices=Cause.choices)
    detail = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.cluster_id}/{self.kind}: {self.cause}"


class SyncIssue(models.Model):
    """An object from a cluster that could not be stored as-is (e.g. no uid), with the evidence."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="sync_issues")
    kind = models.CharField(max_length=40)
    name = models.CharField(max_length=253, blank=True)
    namespace = models.CharField(max_length=253, blank=True)
    error = models.TextField()
    excerpt = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}: {self.error[:60]}"


class KubeObjectQuerySet(models.QuerySet[Any]):
    def live(self) -> Self:
        return self.filter(deleted_at__isnull=True)

    def visible_to(self, user: RequestUser) -> Self:
        """The one entry point for what a user may see: namespaced kinds only in the namespaces of the user's tenants
        (every namespace for platform roles), cluster-scoped kinds to any signed-in user; nothing when anonymous or
        when no tenancy is registered (inventory.scoping fails closed)."""
        from inventory.scoping import scope_for

        if not getattr(user, "is_authenticated", False):
            return self.none()
        scope_field = self.model.SCOPE_FIELD
        if scope_field is None:
            return self
        return self.filter(scope_for(user).q(namespace_field=scope_field))

    def tombstones(self) -> Self:
        return self.filter(deleted_at__isnull=False)


class KubeObject(models.Model):
    """Abstract base of every mirrored kind: identity, the raw object and sync bookkeeping."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    uid = models.CharField(max_length=128)
    name = models.CharField(max_length=253)
    namespace = models.CharField(max_length=253, blank=True)
    resource_version = models.CharField(max_length=64)
    labels = models.JSONField(default=dict, blank=True)
    # DRA kinds served at an older version hold the v1 shape here (inventory/k8s/conversion.py); their served_raw
    # keeps the object as it was sent.
    raw = BulkJSONField(help_text="The whole object as the cluster sent it (sanitised only for storage).")
    k8s_created_at = models.DateTimeField(null=True, blank=True)
    first_seen_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    list_id = models.BigIntegerField(default=0, help_text="Listing that last saw this object (prune bookkeeping).")
    issues = models.JSONField(default=list, blank=True, help_text="Problems found in the object (bad quantities…).")

    objects = KubeObjectQuerySet.as_manager()
    # Which column holds the namespace that tenant scoping filters on (None: a cluster-scoped kind).
    SCOPE_FIELD: str | None = "namespace"
    # Columns the portal writes from elsewhere than the object (Kueue's queue positions): the sync's upsert leaves
    # them as they are.
    NOT_SYNCED_FIELDS: tuple[str, ...] = ()

    class Meta:
        abstract = True
        ordering = ["namespace", "name"]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def is_deleted(self) -> bool:
        return self.deleted_at is not None


SERVED_RAW_HELP = "The object as served when the cluster serves an older version than v1 (raw holds it converted)."


def _kube_constraints(model: str) -> list[models.BaseConstraint]:
    return [models.UniqueConstraint(fields=["cluster", "uid"], name=f"inventory_{model}_unique_cluster_uid")]


def _kube_indexes(model: str) -> list[models.Index]:
    return [
        models.Index(fields=["cluster", "namespace", "name"], name=f"inv_{model}_ns_name"),
        models.Index(fields=["cluster"], condition=Q(deleted_at__isnull=True), name=f"inv_{model}_live"),
    ]


class Namespace(KubeObject):
    """A mirrored core/v1 Namespace."""

    SCOPE_FIELD = "name"  # a namespace is visible to the tenants it belongs to

    phase = models.CharField(max_length=20, blank=True)

    class Meta(KubeObject.Meta):
        constraints = _kube_constraints("namespace")
        indexes = _kube_indexes("ns")


class Node(KubeObject):
    """A mirrored core/v1 Node; capacity/allocatable keep the reported quantity strings."""

    SCOPE_FIELD = None

    ready = models.BooleanField(null=True)
    unschedulable = models.BooleanField(default=False)
    capacity = models.JSONField(default=dict, blank=True)
    allocatable = models.JSONField(default=dict, blank=True)
    taints = models.JSONField(default=list, blank=True)
    conditions = models.JSONField(default=list, blank=True)
    kubelet_version = models.CharField(max_length=64, blank=True)

    class Meta(KubeObject.Meta):
        ordering = ["name"]
        constraints = _kube_constraints("node")
        indexes = [
            *_kube_indexes("node"),
            # The node list's order (page and API): a page is an index range, not a sort of every live node.
            models.Index(fields=["name", "id"], condition=Q(deleted_at__isnull=True), name="inv_node_live_order"),
        ]

    def get_absolute_url(self) -> str:
        return reverse("inventory:node_detail", kwargs={"pk": self.pk})

    @property
    def extended_resources(self) -> list[str]:
        """Vendor resources (`vendor/name`, e.g. nvidia.com/gpu); hugepages and cpu/memory are native resources."""
        return sorted(k for k in self.capacity if "/" in k)


class Pod(KubeObject):
    """A mirrored core/v1 Pod."""

    node_name = models.CharField(max_length=253, blank=True)
    phase = models.CharField(max_length=20, blank=True)
    scheduled = models.BooleanField(null=True, help_text="PodScheduled condition status.")
    scheduling_message = models.TextField(blank=True)
    accelerator = models.BooleanField(default=False, help_text="Requests a vendor extended resource or uses a claim.")
    extended_requests = models.JSONField(default=dict, blank=True, help_text="Effective vendor resource requests.")
    claim_names = models.JSONField(default=list, blank=True)
    stage = models.CharField(max_length=24, blank=True)
    stage_layer = models.CharField(max_length=64, blank=True)
    stage_detail = models.TextField(blank=True)
    restarts = models.IntegerField(default=0)
    scheduling_reasons = models.JSONField(default=dict, blank=True, help_text="Parsed FailedScheduling message.")
    baseline_violating = models.BooleanField(
        null=True, help_text="Violates the baseline Pod Security Standard (inventory.k8s.podsecurity), as synced; "
        "null: not known (the violation scan then checks the pod itself).")

    class Meta(KubeObject.Meta):
        constraints = _kube_constraints("pod")
        indexes = [
            *_kube_indexes("pod"),
            models.Index(fields=["cluster", "node_name"], name="inv_pod_node"),
            models.Index(fields=["cluster"], condition=Q(accelerator=True, deleted_at__isnull=True),
                         name="inv_pod_accel"),
            # The accelerator pod list's order (/api/v1/pods/): the first page without sorting every live pod.
            models.Index(fields=["namespace", "name", "id"], condition=Q(accelerator=True, deleted_at__isnull=True),
                         name="inv_pod_accel_order"),
            # The violation scan's candidates (portal/enforcement/violations.py): the few pods that need an exception,
            # and those not classified yet.
            models.Index(fields=["cluster"], condition=(Q(baseline_violating=True) | Q(baseline_violating__isnull=True))
                         & Q(deleted_at__isnull=True), name="inv_pod_baseline"),
        ]


class ResourceQuota(KubeObject):
    """A mirrored core/v1 ResourceQuota."""

    hard = models.JSONField(default=dict, blank=True)
    used = models.JSONField(default=dict, blank=True)

    class Meta(KubeObject.Meta):
        constraints = _kube_constraints("resourcequota")
        indexes = _kube_indexes("quota")


class LimitRange(KubeObject):
    """A mirrored core/v1 LimitRange: its Container `default` / `defaultRequest` are what a pod's containers get for
    the resources they leave out (the validator's quota layer applies them as the API server's LimitRanger does)."""

    class Meta(KubeObject.Meta):
        constraints = _kube_constraints("limitrange")
        indexes = _kube_indexes("limitrange")


class Event(KubeObject):
    """A mirrored core/v1 Event (FailedScheduling and friends)."""

    type = models.CharField(max_length=20, blank=True)
    reason = models.CharField(max_length=128, blank=True)
    message = models.TextField(blank=True)
    involved_kind = models.CharField(max_length=64, blank=True)
    involved_name = models.CharField(max_length=253, blank=True)
    involved_uid = models.CharField(max_length=128, blank=True)
    count = models.IntegerField(null=True, blank=True)
    last_timestamp = models.DateTimeField(null=True, blank=True)

    class Meta(KubeObject.Meta):
        constraints = _kube_constraints("event")
        indexes = [*_kube_indexes("event"), models.Index(fields=["cluster", "involved_uid"], name="inv_event_inv")]


class ResourceSlice(KubeObject):
    """A mirrored resource.k8s.io/v1 ResourceSlice (devices or shared counters of one driver pool)."""

    SCOPE_FIELD = None

    driver = models.CharField(max_length=253, blank=True)
    pool_name = models.CharField(max_length=253, blank=True)
    pool_generation = models.BigIntegerField(null=True, blank=True)
    pool_slice_count = models.BigIntegerField(null=True, blank=True)
    node_name = models.CharField(max_length=253, blank=True)
    device_count = models.IntegerField(default=0)
    served_raw = models.JSONField(null=True, blank=True, help_text=SERVED_RAW_HELP)

    class Meta(KubeObject.Meta):
        ordering = ["name"]
        constraints = _kube_constraints("resourceslice")
        indexes = [*_kube_indexes("slice"), models.Index(fields=["cluster", "driver", "pool_name"], name="inv_slice_pool")]


class DeviceClass(KubeObject):
    """A mirrored resource.k8s.io/v1 DeviceClass."""

    SCOPE_FIELD = None

    extended_resource_name = models.CharField(max_length=253, blank=True)
    served_raw = models.JSONField(null=True, blank=True, help_text=SERVED_RAW_HELP)

    class Meta(KubeObject.Meta):
        ordering = ["name"]
        constraints = _kube_constraints("deviceclass")
        indexes = _kube_indexes("devclass")


class ResourceClaim(KubeObject):
    """A mirrored resource.k8s.io/v1 ResourceClaim."""

    allocated = models.BooleanField(default=False)
    reserved_for_count = models.IntegerField(default=0)
    served_raw = models.JSONField(null=True, blank=True, help_text=SERVED_RAW_HELP)

    class Meta(KubeObject.Meta):
        constraints = _kube_constraints("resourceclaim")
        indexes = _kube_indexes("claim")


class ResourceClaimTemplate(KubeObject):
    """A mirrored resource.k8s.io/v1 ResourceClaimTemplate."""

    served_raw = models.JSONField(null=True, blank=True, help_text=SERVED_RAW_HELP)

    class Meta(KubeObject.Meta):
        constraints = _kube_constraints("resourceclaimtemplate")
        indexes = _kube_indexes("claimtemplate")


class ConfigMap(KubeObject):
    """A mirrored core/v1 ConfigMap of the portal's own namespace (the privileged-exception object)."""

    class Meta(KubeObject.Meta):
        constraints = _kube_constraints("configmap")
        indexes = _kube_indexes("cm")


class AdmissionPolicy(KubeObject):
    """A mirrored admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy."""

    SCOPE_FIELD = None

    class Meta(KubeObject.Meta):
        ordering = ["name"]
        constraints = _kube_constraints("admissionpolicy")
        indexes = _kube_indexes("vap")


class AdmissionPolicyBinding(KubeObject):
    """A mirrored admissionregistration.k8s.io/v1 ValidatingAdmissionPolicyBinding."""

    SCOPE_FIELD = None

    class Meta(KubeObject.Meta):
        ordering = ["name"]
        constraints = _kube_constraints("admissionpolicybinding")
        indexes = _kube_indexes("vapb")
