"""An embedded Kubernetes API server for tests and `make demo` (why: see server.py).

Not part of Troupe's distribution: it lives beside the `troupe` package so that
the demo (`python -m apiserver.demo`), the benchmarks (bench/) and the tests
(tests/integration/test_apiserver.py checks it) share it.

    async with ApiServer(podgroups=True) as srv:      # or srv.start_in_thread() for sync code
        srv.write_kubeconfig(tmp / "kubeconfig")      # kubectl, kopf, the kubernetes client
        srv.create(node); srv.fail_next["pods/binding"] = [500]
        ...                                           # srv.objects("pods"), srv.binds, srv.writes

Modules: `store` (objects, resourceVersions, event log, watch fan-out), `server`
(HTTP, discovery, watch streams, faults, TLS/token), `selectors`, `patch`,
`tables` (Table output for kubectl get), `resources` (served kinds, CRDs),
`protobuf` (typed clients' bodies), `kubectl` and `helm` (the real binaries),
`replica` (`troupe run` as a child process) and `demo` (`make demo`).

Where it knowingly differs from kube-apiserver:
- a pod created with a status keeps it (kube resets it to Pending), so a test can
  seed running pods in one request; a CRD with a status subresource drops it, as kube;
- deletion is immediate unless finalizers are set (no graceful deletion of bound
  pods); deleting a namespace does not delete its contents; a namespace that does
  not exist is created on first use unless `strict_namespaces=True` (then 404);
- lists are served from the latest state (a list's resourceVersion is not a
  snapshot; continue tokens resume by key);
- no validation against schemas, no admission, no RBAC on its own requests (one
  bearer token or none); TokenReview and SubjectAccessReview creates are answered,
  the latter from the RBAC objects (apiserver/reviews.py);
- server-side apply merges the intent without field ownership (no managedFields);
- responses are always JSON; protobuf request bodies are read for Namespace,
  ConfigMap, ServiceAccount, Secret, PriorityClass and DeleteOptions only
  (others 415);
- /openapi/v2 is an empty document (enough for kubectl's validation), /openapi/v3
  is 404 (so `kubectl explain` does not work); aggregated discovery is not served
  (kubectl falls back to the legacy documents).
"""

from apiserver.resources import PODGROUP, Resource
from apiserver.server import ApiServer, Hang, ServerThread, WriteRecord
from apiserver.store import ApiError

__all__ = ["PODGROUP", "ApiError", "ApiServer", "Hang", "Resource", "ServerThread", "WriteRecord"]
