"""kubesim: an in-process Kubernetes API simulator speaking the real REST protocol over HTTP."""

from .errors import ApiError
from .server import Simulator
from .store import Store

__all__ = ["ApiError", "Simulator", "Store"]
