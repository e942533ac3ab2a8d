"""One live run of a scenario: the embedded API server with a timing profile, two
`troupe run` replicas, the scenario's pods created over time, the leader killed
once mid-run if asked, and the API's final state once the run has settled.

The harness plays the controllers a cluster has and Troupe waits for, in a
thread polling the API server (what the simulator plays in memory):

- the device driver: a claim allocated devices with binding conditions gets
  them reported True in status.devices `driver_delay` seconds after the harness
  first saw the allocation (`ready_at` records when, for the invariants);
- the resourceclaim controller's part: a pod that is gone (a preemption's
  victim) leaves its claims' reservedFor, and a claim nobody uses any more is
  deallocated and loses its finalizer;
- the PV controller and a provisioner: a PV whose claimRef names an unbound
  claim binds it; a claim with a selected node, of a class with a provisioner,
  gets a PV on that node.

Its writes are compare-and-swap on resourceVersion: a write of Troupe's in
between is never undone. Everything listens on 127.0.0.1 and every wait is
bounded: a run that does not settle within `timeout` ends all the same, with
`settled` False.
"""

from __future__ import annotations

import copy
import signal
import subprocess
import threading
import time
import traceback
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from apiserver import ApiError, ApiServer
from apiserver.replica import Troupe, until
from tests.harness.invariants import COMPOSITE_PODGROUPS, NATIVE_PODGROUPS, FinalState
from tests.harness.profiles import Profile
from tests.harness.scenarios import Scenario
from troupe.dra.controller import readied_devices

LEASE: Final = ("leases", "kube-system", "troupe-scheduler")
# FinalState's key -> the resource read. Scheduler-plugins' PodGroups by their
# full name: where Kubernetes' own are served too, `podgroups` alone is either.
PLURALS: Final = {
    "pods": "pods",
    "nodes": "nodes",
    "resourceclaims": "resourceclaims",
    "resourceslices": "resourceslices",
    "deviceclasses": "deviceclasses",
    "podgroups": "podgroups.scheduling.x-k8s.io",
    "persistentvolumes": "persistentvolumes",
    "persistentvolumeclaims": "persistentvolumeclaims",
    "csinodes": "csinodes",
    "elasticquotas": "elasticquotas",
}
# Writes that mean the scheduler (or a controller it waits for) is still at work.
BUSY_PLURALS: Final = frozenset(
    {
        "pods",
        "resourceclaims",
        "podgroups",
        "compositepodgroups",
        "persistentvolumes",
        "persistentvolumeclaims",
    }
)
DELETE_PROTECTION: Final = "resource.kubernetes.io/delete-protection"
SELECTED_NODE: Final = "volume.kubernetes.io/selected-node"
HOSTNAME: Final = "kubernetes.io/hostname"


@dataclass
class LiveRun:
    state: FinalState
    settled: bool
    seconds: float
    injected: Counter[str]
    killed: str | None = None
    controller_errors: list[str] = field(default_factory=list)
    logs: dict[str, Path] = field(default_factory=dict)

    def log_tail(self, lines: int = 40) -> str:
        out = []
        for who, path in self.logs.items():
            try:
                text = path.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            out.append(f"--- {who} ---\n" + "\n".join(text))
        return "\n".join(out)


def holder(api: ApiServer) -> str | None:
    lease = api.get(*LEASE)
    return None if lease is None else (lease.get("spec") or {}).get("holderIdentity") or None


def _cas(
    api: ApiServer, plural: str, body: Mapping[str, Any], subresource: str = ""
) -> float | None:
    """Update the object as `body` says if its resourceVersion is still body's:
    when it was written (on the server's loop, as its write log times writes),
    or None if it was not."""
    res = api.store.resolve(plural)
    md = body["metadata"]

    def write() -> float | None:
        try:
            api.store.update(res, md.get("namespace"), md["name"], body, subresource)
        except ApiError:
            return None
        return time.time()

    return api._sync(write)


class Controllers:
    """The cluster's controllers Troupe waits for, played from a thread."""

    def __init__(self, api: ApiServer, driver_delay: float, period: float = 0.05) -> None:
        self.api = api
        self.driver_delay = driver_delay
        self.period = period
        self.ready_at: dict[str, float] = {}
        self.errors: list[str] = []
        self._seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="harness-controllers", daemon=True)

    def start(self) -> Controllers:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)

    @property
    def waiting(self) -> bool:
        """A claim still waits for the driver."""
        return bool(self._seen)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            for step in (self._driver, self._release, self._volumes):
                try:
                    step()
                except Exception:
                    self.errors.append(traceback.format_exc())

    def _driver(self) -> None:
        now = time.time()
        pending = set()
        for c in self.api.objects("resourceclaims"):
            md = c["metadata"]
            key = f"{md['namespace']}/{md['name']}"
            devices = readied_devices(c, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)))
            if devices is None:
                continue
            pending.add(key)
            first = self._seen.setdefault(key, now)
            if now - first < self.driver_delay:
                continue
            body = {"metadata": dict(md), "status": {**(c.get("status") or {}), "devices": devices}}
            written = _cas(self.api, "resourceclaims", body, "status")
            if written is not None:
                self.ready_at[key] = written
                pending.discard(key)
        for key in set(self._seen) - pending:
            del self._seen[key]

    def _release(self) -> None:
        claims = self.api.objects("resourceclaims")  # first: a pod reserved is listed next
        uids = {p["metadata"]["uid"] for p in self.api.objects("pods")}
        for c in claims:
            status = c.get("status") or {}
            reserved = status.get("reservedFor") or []
            rest = [r for r in reserved if r.get("resource") != "pods" or r.get("uid") in uids]
            if len(rest) == len(reserved):
                continue
            new_status = {k: v for k, v in status.items() if k != "reservedFor"}
            if rest:
                new_status["reservedFor"] = rest
            else:
                new_status.pop("allocation", None)
                new_status.pop("devices", None)
            if _cas(self.api, "resourceclaims", {**c, "status": new_status}, "status") is None:
                continue
            if not rest:
                cur = self.api.get(
                    "resourceclaims", c["metadata"]["namespace"], c["metadata"]["name"]
                )
                if cur is None or (cur.get("status") or {}).get("allocation"):
                    continue
                md = cur["metadata"]
                fin = [f for f in md.get("finalizers") or [] if f != DELETE_PROTECTION]
                if fin != (md.get("finalizers") or []):
                    _cas(self.api, "resourceclaims", {**cur, "metadata": {**md, "finalizers": fin}})

    def _volumes(self) -> None:
        pvcs = {
            (c["metadata"]["namespace"], c["metadata"]["name"]): c
            for c in self.api.objects("persistentvolumeclaims")
        }
        if not pvcs:
            return
        pvs = self.api.objects("persistentvolumes")
        for pv in pvs:
            ref = (pv.get("spec") or {}).get("claimRef") or {}
            claim = pvcs.get((ref.get("namespace") or "default", ref.get("name")))
            if claim is not None and not (claim.get("spec") or {}).get("volumeName"):
                self._bind(pv, claim)
        classes = {s["metadata"]["name"]: s for s in self.api.objects("storageclasses")}
        for claim in pvcs.values():
            md, spec = claim["metadata"], claim.get("spec") or {}
            node = (md.get("annotations") or {}).get(SELECTED_NODE)
            sc = classes.get(spec.get("storageClassName") or "")
            if not node or spec.get("volumeName") or sc is None:
                continue
            if sc.get("provisioner") in (None, "", "kubernetes.io/no-provisioner"):
                continue
            size = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
            term = {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [node]}]}
            pv = {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": f"pvc-{md['uid']}"},
                "spec": {
                    "capacity": {"storage": size},
                    "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
                    "storageClassName": spec.get("storageClassName"),
                    "nodeAffinity": {"required": {"nodeSelectorTerms": [term]}},
                    "claimRef": {
                        "namespace": md["namespace"],
                        "name": md["name"],
                        "uid": md["uid"],
                    },
                },
                "status": {"phase": "Available"},
            }
            if self.api.get("persistentvolumes", None, pv["metadata"]["name"]) is None:
                pv = self.api.create(pv)
                self._bind(pv, claim)

    def _bind(self, pv: dict[str, Any], claim: dict[str, Any]) -> None:
        """The PV controller's syncClaim: the claim names the volume, both Bound."""
        md = copy.deepcopy(claim["metadata"])
        ann = md.setdefault("annotations", {})
        ann["pv.kubernetes.io/bind-completed"] = "yes"
        ann["pv.kubernetes.io/bound-by-controller"] = "yes"
        body = {
            **claim,
            "metadata": md,
            "spec": {**claim["spec"], "volumeName": pv["metadata"]["name"]},
        }
        if _cas(self.api, "persistentvolumeclaims", body) is None:
            return
        cur = self.api.get("persistentvolumeclaims", md["namespace"], md["name"])
        if cur is not None:
            _cas(
                self.api, "persistentvolumeclaims", {**cur, "status": {"phase": "Bound"}}, "status"
            )
        cur_pv = self.api.get("persistentvolumes", None, pv["metadata"]["name"])
        if cur_pv is not None:
            _cas(self.api, "persistentvolumes", {**cur_pv, "status": {"phase": "Bound"}}, "status")


def _strip(obj: Mapping[str, Any]) -> dict[str, Any]:
    o = copy.deepcopy(dict(obj))
    md = o.setdefault("metadata", {})
    for k in ("uid", "resourceVersion", "creationTimestamp"):
        md.pop(k, None)
    return o


def admitted(api: ApiServer, obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object to create, as kube's Priority admission plugin passes a pod: its
    priorityClassName's value in spec.priority (the embedded API server has no
    admission; without it every such pod would have priority 0)."""
    body = _strip(obj)
    spec = body.get("spec") or {}
    name = spec.get("priorityClassName")
    if body.get("kind") == "Pod" and name and "priority" not in spec:
        pc = api.get("priorityclasses", None, str(name))
        if pc is not None:
            spec["priority"] = int(pc.get("value") or 0)
    return body


def load_setup(api: ApiServer, scenario: Scenario) -> None:
    """The scenario's setup into the API: pods before the claims they hold (whose
    reservedFor then names the pods' new uids)."""
    objects = [dict(o) for o in scenario.setup]
    order = {"Pod": 1, "ResourceClaim": 2}
    uids: dict[str, str] = {}
    for o in sorted(objects, key=lambda o: order.get(str(o.get("kind")), 0)):
        body = admitted(api, o)
        if o.get("kind") == "ResourceClaim":
            for r in (body.get("status") or {}).get("reservedFor") or []:
                r["uid"] = uids.get(str(r.get("uid")), r.get("uid"))
        made = api.create(body)
        if o.get("kind") == "Pod":
            uids[str((o.get("metadata") or {}).get("uid"))] = made["metadata"]["uid"]


def _settled(api: ApiServer, scenario: Scenario, controllers: Controllers, quiet: float) -> bool:
    if controllers.waiting:
        return False
    names = {
        (p["metadata"].get("namespace") or "default", p["metadata"]["name"])
        for p in scenario.pods()
    }
    for p in api.objects("pods"):
        if (p["metadata"]["namespace"], p["metadata"]["name"]) not in names:
            continue
        spec = p.get("spec") or {}
        if spec.get("nodeName") or spec.get("schedulerName") != "troupe-scheduler":
            continue
        conds = (p.get("status") or {}).get("conditions") or []
        if not any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conds):
            return False
    last = max(
        (w.time for w in list(api.writes) if w.plural in BUSY_PLURALS and w.status < 300),
        default=0.0,
    )
    return time.time() - last >= quiet


def run_live(
    scenario: Scenario,
    profile: Profile,
    workdir: Path,
    *,
    seed: int = 0,
    kill_leader: bool = False,
    timeout: float = 90.0,
    quiet: float = 2.0,
    simulated: Mapping[str, int] | None = None,
) -> LiveRun:
    """Run `scenario` live under `profile`; the final state once settled (or at `timeout`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    api = ApiServer(podgroups=True, native_podgroups=scenario.native_podgroups)
    replicas: list[Troupe] = []
    controllers = Controllers(api, scenario.driver_delay)
    killed = None
    settled = False
    with api.start_in_thread():
        try:
            load_setup(api, scenario)
            api.faults = profile.faults(seed)
            kc = api.write_kubeconfig(workdir / "kubeconfig")
            for who in ("a", "b"):
                t = Troupe(workdir, kubeconfig=kc, identity=who, config=scenario.config)
                replicas.append(t.start())
            for t in replicas:
                t.wait_ready(60)
            until(lambda: holder(api), 60, "a leader")
            controllers.start()
            pods = [o for o in scenario.arrivals if o.get("kind") == "Pod"]
            half = len(pods) // 2
            made = 0
            for o in scenario.arrivals:
                api.create(admitted(api, o))
                if o.get("kind") != "Pod":
                    continue
                made += 1
                if kill_leader and made == half and killed is None:
                    killed = _kill_leader(api, replicas)
                time.sleep(scenario.interval)
            if killed is not None:
                until(lambda: holder(api) not in (None, killed), 60, "a new leader")
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                if _settled(api, scenario, controllers, quiet):
                    settled = True
                    break
                time.sleep(0.1)
        finally:
            try:
                controllers.stop()
            finally:
                stop_all(replicas)
        state = FinalState(
            scenario,
            {key: api.objects(res) for key, res in plurals(scenario).items()},
            writes=list(api.writes),
            ready_at=dict(controllers.ready_at),
            simulated=simulated,
        )
        injected = Counter(api.faults.injected) if api.faults is not None else Counter()
    return LiveRun(
        state,
        settled,
        time.monotonic() - started,
        injected,
        killed,
        controllers.errors,
        {t.identity: t.log_path for t in replicas},
    )


def plurals(scenario: Scenario) -> dict[str, str]:
    """What the final state reads: FinalState's key -> the resource."""
    out = dict(PLURALS)
    if scenario.native_podgroups is not None:  # Kubernetes' own PodGroups too
        out[NATIVE_PODGROUPS] = NATIVE_PODGROUPS
    if scenario.native_podgroups == "v1alpha3":  # the version with composites
        out[COMPOSITE_PODGROUPS] = COMPOSITE_PODGROUPS
    return out


def stop_all(replicas: list[Troupe], timeout: float = 30.0) -> None:
    """SIGTERM to every replica at once, then wait for each (SIGKILL past `timeout`)."""
    running = [t for t in replicas if t.proc is not None and t.running]
    for t in running:
        t.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
    for t in running:
        try:
            t.wait(timeout)
        except subprocess.TimeoutExpired:
            t.kill()


def _kill_leader(api: ApiServer, replicas: list[Troupe]) -> str | None:
    """SIGKILL the replica holding the Lease (if it still runs): its name."""
    who = holder(api)
    for t in replicas:
        if t.identity == who and t.running:
            t.kill()
            return who
    return None
