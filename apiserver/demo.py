"""`make demo`: Troupe against an embedded Kubernetes API server.

Starts the embedded API server (apiserver) on localhost, serving
Kubernetes' own PodGroups (scheduling.k8s.io/v1beta1) as a cluster with the
GenericWorkload gate does, applies the repository's CRDs and the nodes,
PodGroups (of both APIs), storage classes, claims and pods of
manifests/examples/demo-cluster.yaml, writes a kubeconfig for it, and starts
`troupe run --kubeconfig <that file>` as a child process, exactly as a user
would start it against a cluster: kopf watches, the scheduler schedules, binds
through pods/binding and writes conditions, Events and PodGroup status. It
prints the pods as they get bound and the PodGroups as their status changes,
and ends by itself once every pod is bound or has a reason and nothing has
changed for a few seconds. No storage provisioner runs against the embedded
server, so the demo plays one (`provision`): a claim of a class with a
provisioner that Troupe has given a ``volume.kubernetes.io/selected-node`` gets
a PV on that node, bound to it, as a CSI provisioner and the PV controller would
do; the pod waiting for it at PreBind is then bound. Nor does a resourceclaim
controller, so the demo plays that too (`create_claims`): a pod's claim from a
ResourceClaimTemplate is created and recorded in the pod's status, and Troupe
then allocates a device of the demo's fake GPU driver for it.

Its second part (manifests/examples/demo-quotas.yaml) shows quotas: two teams
share a node under ElasticQuotas, scheduled by a second profile,
troupe-quotas, with scheduler-plugins' CapacityScheduling profile (the demo's
configuration unless --config gives one). team-a borrows beyond its min; the
pods annotated `demo.troupe.dev/after: bound` (team-b's) are created once
everything else is decided, and reclaim team-b's min from team-a: the demo
says which pods were preempted and each quota's status.used as Troupe writes
it. For that it plays the kubelet for the teams' pods (a bound pod of a
namespace with a quota becomes Running: status.used counts Running pods, as
scheduler-plugins' controller). It prints the curl
command that reads Troupe's metrics (HTTPS, with the token of a user the embedded
server's RBAC lets read /metrics). With --keep-running it
stays up so you can look with kubectl (`kubectl --kubeconfig <file> get pods -A -o wide`).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from apiserver import ApiServer
from apiserver.replica import Troupe, metrics_reader
from troupe.dra.controller import claim_from_template, pending_template_claims, record_claim
from troupe.tools.simulate import load_objects

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "manifests" / "examples" / "demo-cluster.yaml"
QUOTAS = ROOT / "manifests" / "examples" / "demo-quotas.yaml"
# Pods created only once everything else is bound or has a reason.
AFTER = "demo.troupe.dev/after"
# The demo's profiles: the default one, and scheduler-plugins' CapacityScheduling
# profile for the teams' pods.
CONFIG: dict[str, Any] = {
    "profiles": [
        {"schedulerName": "troupe-scheduler"},
        {
            "schedulerName": "troupe-quotas",
            "plugins": {
                "multiPoint": {"enabled": [{"name": "CapacityScheduling"}]},
                "postFilter": {
                    "enabled": [{"name": "CapacityScheduling"}],
                    "disabled": [{"name": "*"}],
                },
            },
        },
    ]
}
ORDER = (
    "Namespace",
    "PriorityClass",
    "StorageClass",
    "CSIDriver",
    "CSINode",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Node",
    "DeviceClass",
    "ResourceSlice",
    "ResourceClaimTemplate",
    "ResourceClaim",
    "PodGroup",
    "ElasticQuota",
    "Pod",
)
SELECTED_NODE = "volume.kubernetes.io/selected-node"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
# The scheduling.k8s.io version the demo's API server serves.
NATIVE_VERSION = "v1beta1"


def say(msg: str) -> None:
    print(msg, flush=True)


def load(srv: ApiServer, objects: list[dict[str, Any]]) -> None:
    for crd in sorted((ROOT / "crds").glob("*.yaml")):
        for doc in yaml.safe_load_all(crd.read_text()):
            if doc:
                srv.create(doc)
    namespaces = {
        (o.get("metadata") or {}).get("namespace")
        for o in objects
        if (o.get("metadata") or {}).get("namespace")
    }
    for ns in sorted(namespaces - {"default", "kube-system"}):
        if srv.get("namespaces", None, ns) is None:
            srv.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    create(srv, objects)


def create(srv: ApiServer, objects: list[dict[str, Any]]) -> None:
    """Create the objects kind by kind, in the order of `ORDER`."""
    for kind in ORDER:
        for obj in objects:
            if obj.get("kind") == kind:
                o = dict(obj)
                md = dict(o.get("metadata") or {})
                for k in ("uid", "resourceVersion", "creationTimestamp"):
                    md.pop(k, None)  # the API server assigns these
                o["metadata"] = md
                srv.create(o)


def held(obj: dict[str, Any]) -> bool:
    """Whether the demo creates the object only once the rest is decided."""
    return bool(((obj.get("metadata") or {}).get("annotations") or {}).get(AFTER))


def run_quota_pods(srv: ApiServer) -> None:
    """Play the kubelet for the pods of namespaces with an ElasticQuota: bound,
    they are Running."""
    spaces = {q["metadata"]["namespace"] for q in srv.objects("elasticquotas")}
    for pod in srv.objects("pods"):
        st = pod.get("status") or {}
        if (
            pod["metadata"].get("namespace") in spaces
            and (pod.get("spec") or {}).get("nodeName")
            and st.get("phase") != "Running"
        ):
            pod["status"] = {**st, "phase": "Running"}
            srv.apply(pod)


def quotas(srv: ApiServer) -> dict[str, str]:
    """Each ElasticQuota's status.used, min and max in one line."""

    def shown(m: Any) -> str:
        return ", ".join(f"{r} {q}" for r, q in sorted((m or {}).items())) or "-"

    out = {}
    for q in srv.objects("elasticquotas"):
        md, spec = q["metadata"], q.get("spec") or {}
        used = (q.get("status") or {}).get("used")
        out[f"{md['namespace']}/{md['name']}"] = (
            f"used {shown(used)} (min {shown(spec.get('min'))}; max {shown(spec.get('max'))})"
        )
    return out


def provision(srv: ApiServer) -> list[str]:
    """Play the provisioner and the PV controller once over the server's claims:
    each unbound claim with a selected node, of a class that has a provisioner,
    gets a PV on that node and is bound to it. Says what it made."""
    classes = {
        sc["metadata"]["name"]: sc.get("provisioner", NO_PROVISIONER)
        for sc in srv.objects("storageclasses")
    }
    made = []
    for claim in srv.objects("persistentvolumeclaims"):
        md, spec = claim["metadata"], claim.get("spec") or {}
        node = (md.get("annotations") or {}).get(SELECTED_NODE)
        provisioner = classes.get(spec.get("storageClassName") or "", NO_PROVISIONER)
        if not node or spec.get("volumeName") or provisioner == NO_PROVISIONER:
            continue
        name = f"pvc-{md['uid']}"
        srv.create(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {
                    "name": name,
                    "annotations": {"pv.kubernetes.io/provisioned-by": provisioner},
                },
                "spec": {
                    "capacity": dict((spec.get("resources") or {}).get("requests") or {}),
                    "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                    "storageClassName": spec.get("storageClassName"),
                    "persistentVolumeReclaimPolicy": "Delete",
                    "csi": {"driver": provisioner, "volumeHandle": name},
                    "claimRef": {
                        "apiVersion": "v1",
                        "kind": "PersistentVolumeClaim",
                        "namespace": md["namespace"],
                        "name": md["name"],
                        "uid": md["uid"],
                    },
                    "nodeAffinity": {
                        "required": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "kubernetes.io/hostname",
                                            "operator": "In",
                                            "values": [node],
                                        }
                                    ]
                                }
                            ]
                        }
                    },
                },
                "status": {"phase": "Bound"},
            }
        )
        spec["volumeName"] = name
        md.setdefault("annotations", {})["pv.kubernetes.io/bind-completed"] = "yes"
        claim["status"] = {"phase": "Bound", "capacity": dict(spec["resources"]["requests"])}
        srv.apply(claim)
        made.append(f"{md['namespace']}/{md['name']} -> PV {name} on {node}")
    return made


def create_claims(srv: ApiServer) -> list[str]:
    """Play the resourceclaim controller once over the server's PodGroups
    (scheduling.k8s.io) and pods: each claim one takes from a
    ResourceClaimTemplate is created (owned by it) and recorded in its
    status.resourceClaimStatuses; a pod's claim that its PodGroup lists is the
    group's. Says what it made."""
    made = []
    groups = {
        (g["metadata"].get("namespace"), g["metadata"]["name"]): g
        for g in srv.objects("podgroups.scheduling.k8s.io")
    }
    for obj in [*groups.values(), *srv.objects("pods")]:
        ns = obj["metadata"].get("namespace") or "default"
        group = groups.get(
            (ns, ((obj.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName"))
        )
        shared = list(((group or {}).get("spec") or {}).get("resourceClaims") or [])
        if obj.get("kind") == "PodGroup":
            shared = []
        for owner_claim, template_name in pending_template_claims(obj, shared):
            template = srv.get("resourceclaimtemplates", ns, template_name)
            if template is None:
                continue  # as the controller: nothing to create from yet
            claim = srv.create(claim_from_template(obj, owner_claim, template))
            record_claim(obj, owner_claim, claim["metadata"]["name"])
            srv.apply(obj)
            what = f"{obj['kind'].lower()} {ns}/{obj['metadata']['name']}"
            made.append(f"{ns}/{claim['metadata']['name']} for {what}")
    return made


def _devices(srv: ApiServer, pod: dict[str, Any]) -> str:
    """The devices allocated to the pod's claims, as `claim: driver/pool/device`."""
    ns = pod["metadata"].get("namespace") or "default"
    names = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    out = []
    for c in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = c.get("resourceClaimName") or names.get(c.get("name"))
        claim = srv.get("resourceclaims", ns, name) if name else None
        results = (((claim or {}).get("status") or {}).get("allocation") or {}).get("devices", {})
        for r in results.get("results") or []:
            out.append(f"{c['name']}: {r['driver']}/{r['pool']}/{r['device']}")
    return ", ".join(out)


def snapshot(srv: ApiServer) -> tuple[dict[str, tuple[bool, str]], dict[str, dict[str, Any]]]:
    """Each pod as (bound, its node or why it waits: "pending" until Troupe has
    said) and each PodGroup's status."""
    pods: dict[str, tuple[bool, str]] = {}
    groups: dict[str, dict[str, Any]] = {}
    for raw in srv.objects("pods"):
        md = raw["metadata"]
        node = (raw.get("spec") or {}).get("nodeName")
        conds = (raw.get("status") or {}).get("conditions") or []
        key = f"{md['namespace']}/{md['name']}"
        if node:
            devices = _devices(srv, raw)
            pods[key] = (True, f"{node} ({devices})" if devices else node)
        else:
            pods[key] = (False, conds[0]["message"] if conds else "pending")
    for raw in srv.objects("podgroups.scheduling.x-k8s.io"):
        md = raw["metadata"]
        groups[f"{md['namespace']}/{md['name']}"] = dict(raw.get("status") or {})
    for raw in srv.objects("podgroups.scheduling.k8s.io"):
        md = raw["metadata"]
        groups[f"{md['namespace']}/{md['name']} (scheduling.k8s.io)"] = dict(
            raw.get("status") or {}
        )
    return pods, groups


def describe_group(status: dict[str, Any]) -> str:
    """A PodGroup's status in one line: scheduler-plugins' phase and counts, or a
    native group's condition."""
    for c in status.get("conditions") or []:
        return f"{c.get('type')}={c.get('status')} reason={c.get('reason')}"
    return (
        f"phase={status.get('phase')} running={status.get('running')} "
        f"succeeded={status.get('succeeded')}"
    )


def demo(args: argparse.Namespace) -> int:
    objects = load_objects([str(args.file), *(str(f) for f in args.also)])
    later = [o for o in objects if held(o)]
    objects = [o for o in objects if not held(o)]
    srv = ApiServer(port=args.port or 0, native_podgroups=NATIVE_VERSION)
    with srv.start_in_thread(), tempfile.TemporaryDirectory(prefix="troupe-demo-") as tmp:
        work = Path(tmp)
        load(srv, objects)
        kubeconfig = srv.write_kubeconfig(
            Path(args.kubeconfig) if args.kubeconfig else work / "kubeconfig"
        )
        say(f"Embedded Kubernetes API: {srv.url}")
        say(f"  kubectl --kubeconfig {kubeconfig} get pods -A -o wide")
        say(
            "  (no kubelet runs here: kubectl shows the nodes Unknown and bound pods Pending;"
            " NODE is where Troupe put them)"
        )
        config: dict[str, Any] = CONFIG
        if args.config:
            config = yaml.safe_load(Path(args.config).read_text()) or {}
        token = metrics_reader(srv, "demo-viewer")
        troupe = Troupe(
            work,
            kubeconfig=kubeconfig,
            identity="troupe-demo",
            config=config,
            port=args.metrics_port,
            token=token,
        )
        # Served as kube-scheduler serves its port: HTTPS (a self-signed certificate),
        # a token the API server authenticates, a user its RBAC lets read /metrics.
        say(
            f'Metrics: curl -k -H "Authorization: Bearer {token}" '
            f"https://127.0.0.1:{args.metrics_port}/metrics"
        )
        say(f"Starting: troupe run --kubeconfig {kubeconfig}")
        seen_pods: dict[str, tuple[bool, str]] = {}
        seen_groups: dict[str, dict[str, Any]] = {}
        seen_quotas: dict[str, str] = {}
        preempted: list[str] = []
        quiet = 0.0
        deadline = time.monotonic() + args.timeout
        with troupe:
            while troupe.running:
                time.sleep(0.25)
                changed = False
                for what in provision(srv):
                    say(f"  provisioner: {what}")
                    changed = True
                for what in create_claims(srv):
                    say(f"  resourceclaim controller: {what}")
                    changed = True
                run_quota_pods(srv)
                pods, groups = snapshot(srv)
                for key in sorted(seen_pods.keys() - pods.keys()):
                    # only the scheduler deletes pods here: a preemption's victim
                    say(f"  pod {key:<28} preempted (deleted)")
                    del seen_pods[key]
                    preempted.append(key)
                    changed = True
                for key, (bound, where) in sorted(pods.items()):
                    if seen_pods.get(key) != (bound, where):
                        seen_pods[key] = (bound, where)
                        if not bound and where == "pending":
                            continue  # not tried yet
                        say(f"  pod {key:<28} {'-> ' + where if bound else 'pending: ' + where}")
                        changed = True
                for key, st in sorted(groups.items()):
                    if st and seen_groups.get(key) != st:
                        say(f"  podgroup {key:<23} {describe_group(st)}")
                        seen_groups[key] = st
                        changed = True
                for key, line in sorted(quotas(srv).items()):
                    if seen_quotas.get(key) != line:
                        say(f"  elasticquota {key:<19} {line}")
                        seen_quotas[key] = line
                        changed = True
                quiet = 0.0 if changed else quiet + 0.25
                decided = bool(seen_pods) and all(
                    b or w != "pending" for b, w in seen_pods.values()
                )
                if decided and later and quiet >= 1.0:
                    say("Creating the pods held back: " + ", ".join(_key(o) for o in later))
                    create(srv, later)
                    later, quiet, decided = [], 0.0, False
                if not args.keep_running and (
                    (decided and quiet >= 3.0) or time.monotonic() > deadline
                ):
                    break
            exited = not troupe.running
            status = troupe.stop() if troupe.running else troupe.wait()
        if status != 0:
            say(f"troupe run exited with {status}:\n{troupe.log()[-3000:]}")
            if exited:  # it ended by itself (a port taken, a bad configuration): no summary
                lines = troupe.log().strip().splitlines()
                say(f"troupe run failed: {lines[-1] if lines else f'exit status {status}'}")
                return 1
        bound = sum(1 for b, _ in seen_pods.values() if b)
        gone = f", {len(preempted)} preempted" if preempted else ""
        say(f"{bound} of {len(seen_pods)} pods bound{gone}; the rest say why they wait.")
        return 0 if bound and status == 0 else 1


def _key(o: dict[str, Any]) -> str:
    md = o.get("metadata") or {}
    return f"{md.get('namespace') or 'default'}/{md.get('name')}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("file", nargs="?", default=EXAMPLE, type=Path)
    ap.add_argument(
        "--also",
        nargs="*",
        default=[QUOTAS],
        type=Path,
        help="more objects to load (default: the quota part; none: --also)",
    )
    ap.add_argument("--config", default=None)
    ap.add_argument("--port", type=int, default=None, help="API server port (default: any)")
    ap.add_argument("--metrics-port", type=int, default=10259)
    ap.add_argument(
        "--kubeconfig", default=None, help="where to write the kubeconfig (default: a temp dir)"
    )
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument(
        "--keep-running", action="store_true", help="stay up until Ctrl-C so kubectl can look"
    )
    args = ap.parse_args(argv)
    try:
        return demo(args)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
