"""The way to the API server: the only package that talks HTTP to it, and the
only one that imports the kubernetes client (to load credentials, nothing else).

- `credentials`: in-cluster service account, else a kubeconfig, in one place;
- `transport`: the one HTTP stack (aiohttp's parser on the loop; its session
  for watches and proxies), lanes (token bucket, timeouts, retries, fence);
- `errors`: HTTP statuses mapped once into typed errors;
- `client`: the scheduler's calls (`KubeClient`, its ClusterClient) and its lanes;
- `lease`: the leader-election Lease;
- `discovery`: API discovery;
- `reflector`: list, then watch, with client-go's semantics.
"""

from troupe.kube.client import COMPONENT, KubeClient
from troupe.kube.credentials import (
    Connection,
    Credentials,
    credentials_of,
    default_identity,
    load_configuration,
    load_connection,
)
from troupe.kube.discovery import discover_native_pod_groups, discover_version
from troupe.kube.errors import ApiError, Gone, NoAnswer, error_of
from troupe.kube.lease import KubeLease, LeaseConflict, LeaseRecord

__all__ = [
    "COMPONENT",
    "ApiError",
    "Connection",
    "Credentials",
    "Gone",
    "KubeClient",
    "KubeLease",
    "LeaseConflict",
    "LeaseRecord",
    "NoAnswer",
    "credentials_of",
    "default_identity",
    "discover_native_pod_groups",
    "discover_version",
    "error_of",
    "load_configuration",
    "load_connection",
]
