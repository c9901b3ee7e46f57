"""kubesim: an in-process Kubernetes API simulator speaking the real REST protocol over HTTP."""

from .server import Simulator
from .store import ApiError, Store

__all__ = ["ApiError", "Simulator", "Store"]
