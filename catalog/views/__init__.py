"""Catalog pages: offerings.py (the tenant's catalog and the curator's pages) and manifests.py (the manifest
generator, the validator and the pod explainer)."""
