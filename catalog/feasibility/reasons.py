"""The kube-scheduler's reason strings (current releases) for the plugins this package reproduces."""

from __future__ import annotations

REASON_UNSCHEDULABLE = "node(s) were unschedulable"  # NodeUnschedulable
REASON_NODE_NAME = "node(s) didn't match the requested node name"  # NodeName
REASON_TAINT = "node(s) had untolerated taint(s)"  # TaintToleration (kubernetes#134740; before: "... taint {k: v}")
REASON_AFFINITY = "node(s) didn't match Pod's node affinity/selector"  # NodeAffinity
REASON_PREFILTER_AFFINITY = "node(s) didn't satisfy plugin(s) [NodeAffinity]"  # nodes left out by its PreFilter
REASON_CONFLICT = "pod affinity terms conflict"  # NodeAffinity PreFilter: the named nodes cannot match
REASON_PORTS = "node(s) didn't have free ports for the requested pod ports"  # NodePorts
REASON_TOO_MANY_PODS = "Too many pods"  # NodeResourcesFit; also "Insufficient <resource>"
REASON_DRA = "cannot allocate all claims"  # DynamicResources
REASON_DRA_UNAVAILABLE = "resourceclaim not available on the node"  # DynamicResources, allocated claims
NO_NODES = "no nodes available to schedule pods"  # ErrNoNodesAvailable

# The plugins in the order the default profile runs their Filter (DynamicResources is inserted before
# DefaultPreemption, i.e. after every other filter).
FILTER_ORDER = (
    "NodeUnschedulable",
    "NodeName",
    "TaintToleration",
    "NodeAffinity",
    "NodePorts",
    "NodeResourcesFit",
    "DynamicResources",
)
