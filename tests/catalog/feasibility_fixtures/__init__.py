"""Builders for feasibility tests: small Kubernetes objects as dicts."""
