"""Constants shared by the inventory's reads and derivations."""

from __future__ import annotations

# Taint effects that keep ordinary pods (without a matching toleration) off a node or a DRA device.
BLOCKING_TAINT_EFFECTS: tuple[str, ...] = ("NoSchedule", "NoExecute")
