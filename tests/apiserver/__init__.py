"""An embedded Kubernetes API server for tests and `make demo` (see server.py for why)."""

from tests.apiserver.resources import PODGROUP, Resource
from tests.apiserver.server import ApiServer, Hang, ServerThread, WriteRecord
from tests.apiserver.store import ApiError

__all__ = ["PODGROUP", "ApiError", "ApiServer", "Hang", "Resource", "ServerThread", "WriteRecord"]
