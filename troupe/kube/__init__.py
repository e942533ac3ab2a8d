"""The way to the API server: the only package that imports the kubernetes
client (and the operator's reflectors' HTTP).

- `credentials`: in-cluster service account, else a kubeconfig, in one place;
- `transport`: lanes (token bucket, timeouts, retries, fence), aiohttp on the loop;
- `errors`: HTTP statuses mapped once into typed errors;
- `client`: the writes (`KubeClient`, the scheduler's ClusterClient);
- `lease`: the leader-election Lease;
- `discovery`: API discovery;
- `reflector`: list, then watch, with client-go's semantics.
"""

from troupe.kube.client import COMPONENT, KubeClient
from troupe.kube.credentials import (
    Credentials,
    credentials_of,
    default_identity,
    load_api_client,
    load_configuration,
)
from troupe.kube.discovery import discover_native_pod_groups, discover_version
from troupe.kube.errors import ApiError, api_error
from troupe.kube.lease import KubeLease

__all__ = [
    "COMPONENT",
    "ApiError",
    "Credentials",
    "KubeClient",
    "KubeLease",
    "api_error",
    "credentials_of",
    "default_identity",
    "discover_native_pod_groups",
    "discover_version",
    "load_api_client",
    "load_configuration",
]
