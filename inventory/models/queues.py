"""Mirrored Kueue objects (kueue.x-k8s.io, synced only where the cluster serves the group; stored in the v1beta2
shape, inventory/k8s/conversion.py). The columns are what the catalog, quota and pending pages query; the rest stays
in `raw`. Kueue's own vocabulary: a ClusterQueue holds nominal quota per ResourceFlavor and resource, may borrow
from and lend to its cohort; a LocalQueue points a namespace's work at a ClusterQueue; a Workload is Kueue's record
of one job (its pod sets, and whether quota is reserved and the job admitted)."""

from __future__ import annotations

from django.db import models

from inventory.models.synced import KubeObject, _kube_constraints, _kube_indexes

SERVED_RAW_HELP = "The object as served when the cluster serves Kueue v1beta1 (raw holds it in the v1beta2 shape)."


class Topology(KubeObject):
    """A Kueue Topology (topology-aware scheduling): `levels` are its node labels, widest domain first (block, rack,
    usually ending with kubernetes.io/hostname); a ResourceFlavor names it in `topology_name`."""

    SCOPE_FIELD = None

    levels = models.JSONField(default=list, blank=True, help_text="Node labels of the levels, widest first.")
    served_raw = models.JSONField(null=True, blank=True, help_text=SERVED_RAW_HELP)

    class Meta(KubeObject.Meta):
        constraints = _kube_constraints("topology")
        indexes = _kube_indexes("topology")


class ResourceFlavor(KubeObject):
    """A Kueue ResourceFlavor: which nodes (labels, taints) a flavor of quota stands for, and the Topology its
    nodes are placed by (topology-aware scheduling; "" when none)."""

    SCOPE_FIELD = None

    node_labels = models.JSONField(default=dict, blank=True)
    node_taints = models.JSONField(default=list, blank=True)
    topology_name = models.CharField(max_length=253, blank=True)
    served_raw = models.JSONField(null=True, blank=True, help_text=SERVED_RAW_HELP)

    class Meta(KubeObject.Meta):
        constraints = _kube_constraints("resourceflavor")
        indexes = _kube_indexes("rflavor")


class Cohort(KubeObject):
    """A Kueue Cohort: a group of ClusterQueues that lend to and borrow from each other (may have a parent)."""

    SCOPE_FIELD = None

    parent = models.CharField(max_length=253, blank=True)
    served_raw = models.JSONField(null=True, blank=True, help_text=SERVED_RAW_HELP)

    class Meta(KubeObject.Meta):
        constraints = _kube_constraints("cohort")
        indexes = _kube_indexes("cohort")


class ClusterQueue(KubeObject):
    """A Kueue ClusterQueue. `quotas`: one entry per (flavor, resource) of its resource groups with the nominal quota
    and the borrowing/lending limits as reported; `usage`: the status' flavorsUsage, per (flavor, resource)."""

    SCOPE_FIELD = None

    cohort = models.CharField(max_length=253, blank=True)
    quotas = models.JSONField(default=list, blank=True)
    usage = models.JSONField(default=list, blank=True)
    pending_workloads = models.IntegerField(null=True, blank=True)
    admitted_workloads = models.IntegerField(null=True, blank=True)
    served_raw = models.JSONField(null=True, blank=True, help_text=SERVED_RAW_HELP)

    class Meta(KubeObject.Meta):
        constraints = _kube_constraints("clusterqueue")
        indexes = _kube_indexes("cqueue")


class LocalQueue(KubeObject):
    """A Kueue LocalQueue: the queue a namespace's jobs name (`kueue.x-k8s.io/queue-name`), feeding a ClusterQueue."""

    cluster_queue = models.CharField(max_length=253, blank=True)
    pending_workloads = models.IntegerField(null=True, blank=True)
    admitted_workloads = models.IntegerField(null=True, blank=True)
    served_raw = models.JSONField(null=True, blank=True, help_text=SERVED_RAW_HELP)

    class Meta(KubeObject.Meta):
        constraints = _kube_constraints("localqueue")
        indexes = _kube_indexes("lqueue")


class Workload(KubeObject):
    """A Kueue Workload. `state` is read from its conditions (Finished > Evicted > Admitted > QuotaReserved >
    pending); `requests`: what all its pods ask for together (count times requests, summed over pod sets)."""

    class State(models.TextChoices):
        PENDING = "pending", "Pending (no quota reserved)"
        QUOTA_RESERVED = "quota_reserved", "Quota reserved"
        ADMITTED = "admitted", "Admitted"
        EVICTED = "evicted", "Evicted"
        FINISHED = "finished", "Finished"

    queue_name = models.CharField(max_length=253, blank=True)
    cluster_queue = models.CharField(max_length=253, blank=True, help_text="From status.admission (when reserved).")
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING)
    state_reason = models.CharField(max_length=128, blank=True)
    state_message = models.TextField(blank=True)
    pod_count = models.IntegerField(default=0)
    requests = models.JSONField(default=dict, blank=True)
    served_raw = models.JSONField(null=True, blank=True, help_text=SERVED_RAW_HELP)
    # Where Kueue's visibility API last said the Workload waits (inventory/services/queue_positions.py); not part of
    # the object, so the sync leaves these alone. All empty when Kueue never said, or no longer lists it as pending.
    queue_position = models.PositiveIntegerField(
        null=True, blank=True, help_text="1-based position in its ClusterQueue (Kueue's positionInClusterQueue + 1).")
    queue_waiting = models.PositiveIntegerField(
        null=True, blank=True, help_text="Workloads pending in that ClusterQueue then (empty: only the head was read).")
    local_queue_position = models.PositiveIntegerField(
        null=True, blank=True, help_text="1-based position in its LocalQueue (Kueue's positionInLocalQueue + 1).")
    position_cluster_queue = models.CharField(max_length=253, blank=True,
                                              help_text="The ClusterQueue the position was read from.")
    position_observed_at = models.DateTimeField(null=True, blank=True,
                                                help_text="When Kueue's visibility API gave the position.")

    NOT_SYNCED_FIELDS = ("queue_position", "queue_waiting", "local_queue_position", "position_cluster_queue",
                         "position_observed_at")

    class Meta(KubeObject.Meta):
        constraints = _kube_constraints("workload")
        indexes = [*_kube_indexes("workload"),
                   models.Index(fields=["cluster", "queue_name"], name="inv_workload_queue")]
