"""The Kubernetes limits on a DRA CEL selector: its length, its estimated cost and the worst-case device sizes."""

MAX_EXPRESSION_LENGTH = 10 * 1024  # resourceapi.CELSelectorExpressionMaxLength, in bytes (Go's len())
MAX_COST = 1_000_000  # resourceapi.CELSelectorExpressionMaxCost

# Worst-case sizes of the `device` variable, as Kubernetes declares them for its cost estimator (docs/cel.md).
MAX_ENTRIES_PER_DEVICE = 32  # attributes and capacities per device (per domain map and domains per device)
MAX_DOMAIN_LENGTH = 63
MAX_ID_LENGTH = 32
MAX_DRIVER_LENGTH = 63
MAX_ATTRIBUTE_LENGTH = 64  # a string attribute value; also our bound for the entries of a list attribute
UNKNOWN_SIZE = 64  # a list or string whose size the estimator cannot bound
