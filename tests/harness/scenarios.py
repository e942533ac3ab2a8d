"""The harness's scenario corpus: Kubernetes objects, run the same way through
`troupe simulate` and `troupe run`.

A `Scenario` is what is there before the scheduler starts (`setup`: nodes with
capacity and labels, DeviceClasses and ResourceSlices, PodGroups, volumes,
running pods and the claims they hold) and what arrives while it runs
(`arrivals`: pods, each after the claims it names, created `interval` apart
live and in that order by creationTimestamp in the simulator). Pods whose
placement does not depend on which of them came first share a *class*
(`CLASS` label, a gang's name by default): the harness compares how many of a
class are bound, not which ones or where. `expect` states some of those
counts outright, for faults the simulator shares with the live path (a
differential check cannot see those).

Built here: the device scenarios of issue 33 (a GPU per claim under a burst of
pods, devices with binding conditions, gang preemption for devices, shared
claims and shared devices), gangs with topology and isolated CPUs, quotas, groups
of groups (CompositePodGroup); read from
tests/fixtures: the simulator's own cases (resources, taints, gangs,
preemption, volumes).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tests.builders import make_node, make_pod
from tests.unit.dra_helpers import claim, device, device_class, request, slice_
from troupe.tools.simulate import load_objects

CLASS: Final = "harness.troupe.dev/class"
GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"
FIXTURES: Final = Path(__file__).resolve().parents[1] / "fixtures"
GPU: Final = "gpu.example.com"
NIC: Final = "nic.example.com"
# The condition the harness's driver reports on devices that need it.
ATTACHED: Final = "example.com/attached"


@dataclass(frozen=True)
class Scenario:
    name: str
    setup: tuple[dict[str, Any], ...]
    arrivals: tuple[dict[str, Any], ...]
    interval: float = 0.05
    # Seconds the driver takes to ready devices with binding conditions.
    driver_delay: float = 0.0
    # Bound pods per class, whatever the timing (also checked on the simulator).
    expect: Mapping[str, int] = field(default_factory=dict)
    # KubeSchedulerConfiguration fields beside the defaults (both paths).
    config: Mapping[str, Any] = field(default_factory=dict)
    # The scheduling.k8s.io PodGroup version the API server serves ("v1alpha3"
    # also serves CompositePodGroups); None: only scheduler-plugins' CRDs.
    native_podgroups: str | None = None

    def objects(self) -> list[dict[str, Any]]:
        """Every object, pods stamped in arrival order (the simulator's input)."""
        out = [copy.deepcopy(o) for o in self.setup]
        n = 0
        for o in self.arrivals:
            o = copy.deepcopy(o)
            if o.get("kind") == "Pod":
                md = o.setdefault("metadata", {})
                md["creationTimestamp"] = f"2026-01-01T00:{n // 60:02d}:{n % 60:02d}Z"
                n += 1
            out.append(o)
        return out

    def pods(self) -> list[dict[str, Any]]:
        return [o for o in (*self.setup, *self.arrivals) if o.get("kind") == "Pod"]


def class_of(pod: Mapping[str, Any]) -> str:
    """The pod's class: its CLASS label, else its gang, else its own name."""
    md = pod.get("metadata") or {}
    labels = md.get("labels") or {}
    return str(labels.get(CLASS) or labels.get(GROUP_LABEL) or md.get("name"))


# Builders ------------------------------------------------------------------------


def pod(name: str, cpu: str = "500m", *, klass: str = "", claims: tuple[str, ...] = ()) -> Any:
    b = make_pod(name).req(cpu=cpu, memory="256Mi")
    if klass:
        b = b.label(CLASS, klass)
    if claims:
        b = b.spec(
            resourceClaims=[{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
        )
    return b


def gpu_node(name: str, gpus: int, **labels: str) -> list[dict[str, Any]]:
    """A node and its ResourceSlice of `gpus` GPUs."""
    b = make_node(name).capacity(cpu=16, memory="64Gi", pods=110)
    for k, v in labels.items():
        b = b.label(k, v)
    devices = [device(f"gpu-{i}", model="a100") for i in range(gpus)]
    return [b.obj(), slice_(f"{name}-gpu", *devices, node=name)]


def pod_group(name: str, min_member: int, **annotations: str) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name, "namespace": "default"}
    if annotations:
        md["annotations"] = dict(annotations)
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": md,
        "spec": {"minMember": min_member, "scheduleTimeoutSeconds": 10},
    }


def native_group(
    name: str, min_count: int, parent: str, workload: str, *, composite: bool = False
) -> dict[str, Any]:
    """A scheduling.k8s.io/v1alpha3 gang PodGroup (`minCount`), or a
    CompositePodGroup (`minGroupCount`), child of `parent` ("": a root)."""
    policy = {"minGroupCount": min_count} if composite else {"minCount": min_count}
    spec: dict[str, Any] = {
        "workloadRef": {"workloadName": workload, "templateName": name},
        "schedulingPolicy": {"gang": policy},
    }
    if parent:
        spec["parentCompositePodGroupName"] = parent
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha3",
        "kind": "CompositePodGroup" if composite else "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def allocated(c: dict[str, Any], node: str, dev: str, pod_name: str) -> dict[str, Any]:
    """Claim `c` allocated `dev` on `node` and reserved for the running pod."""
    c = copy.deepcopy(c)
    c["metadata"].pop("uid", None)
    c["metadata"].pop("resourceVersion", None)
    c["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    c["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": GPU, "pool": node, "device": dev}]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": pod_name, "uid": f"uid-default-{pod_name}"}],
    }
    return c


def fresh_claim(name: str, *requests: dict[str, Any]) -> dict[str, Any]:
    c = claim(name, *requests)
    c["metadata"].pop("uid", None)
    c["metadata"].pop("resourceVersion", None)
    return c


# The device scenarios of issue 33 --------------------------------------------------


def gpu_rush(pods: int = 14) -> Scenario:
    """8 GPUs on two nodes, `pods` pods claiming one each, a pod every 50 ms: 8 bound.
    Live with 200 ms writes, one GPU went to 4 claims (the finalizer write's
    watch event replaced the in-memory allocation)."""
    setup = [device_class(GPU), *gpu_node("g0", 4), *gpu_node("g1", 4)]
    arrivals: list[dict[str, Any]] = []
    for i in range(pods):
        arrivals.append(fresh_claim(f"gpu-{i}", request()))
        arrivals.append(pod(f"trainer-{i}", klass="trainer", claims=(f"gpu-{i}",)).obj())
    return Scenario("gpu-rush", tuple(setup), tuple(arrivals), expect={"trainer": min(8, pods)})


def binding_conditions() -> Scenario:
    """Two GPUs whose driver must attach them first (binding conditions), three
    pods claiming one each: two bound, and only after the driver said so."""
    setup: list[dict[str, Any]] = [device_class(GPU)]
    for n in ("f0", "f1"):
        node = make_node(n).capacity(cpu=16, memory="64Gi", pods=110).obj()
        dev = device("gpu-0", model="a100")
        dev["bindingConditions"] = [ATTACHED]
        dev["bindingFailureConditions"] = ["example.com/attach-failed"]
        dev["bindsToNode"] = True
        setup += [node, slice_(f"{n}-gpu", dev, node=n)]
    arrivals: list[dict[str, Any]] = []
    for i in range(3):
        arrivals.append(fresh_claim(f"fabric-{i}", request()))
        arrivals.append(pod(f"fabric-{i}", klass="fabric", claims=(f"fabric-{i}",)).obj())
    return Scenario(
        "binding-conditions",
        tuple(setup),
        tuple(arrivals),
        driver_delay=1.5,
        expect={"fabric": 2},
    )


def gang_preemption_devices() -> Scenario:
    """Four low-priority pods hold the four GPUs; a gang of two (priority 100)
    claims a GPU per member, and devices are the only shortage: the gang
    preempts two of them and runs (it waited forever when the dry run did not
    count devices)."""
    setup: list[dict[str, Any]] = [device_class(GPU), *gpu_node("p0", 2), *gpu_node("p1", 2)]
    holders = []
    for i, (node, dev) in enumerate(
        (("p0", "gpu-0"), ("p0", "gpu-1"), ("p1", "gpu-0"), ("p1", "gpu-1"))
    ):
        name = f"filler-{i}"
        setup.append(pod(name, klass="filler", claims=(f"held-{i}",)).node(node).obj())
        holders.append(allocated(fresh_claim(f"held-{i}", request()), node, dev, name))
    setup += holders
    setup.append(pod_group("train", 2))
    arrivals: list[dict[str, Any]] = []
    for i in range(2):
        arrivals.append(fresh_claim(f"train-{i}", request()))
        member = pod(f"train-{i}", claims=(f"train-{i}",)).group("train").priority(100)
        arrivals.append(member.obj())
    return Scenario(
        "gang-preemption-devices",
        tuple(setup),
        tuple(arrivals),
        expect={"train": 2, "filler": 2},
    )


def shared_claims() -> Scenario:
    """One claim shared by three pods (they go where its GPU is), and a NIC
    that allows several allocations, 10G of bandwidth for claims of 3G: three fit."""
    nic = device("nic-0")
    nic["allowMultipleAllocations"] = True
    nic["capacity"] = {
        "bandwidth": {
            "value": "10G",
            "requestPolicy": {"default": "1G", "validRange": {"min": "1G", "step": "1G"}},
        }
    }
    nic_class = device_class(NIC, f'device.driver == "{NIC}" && device.allowMultipleAllocations')
    setup = [
        device_class(GPU),
        nic_class,
        *gpu_node("s0", 1),
        *gpu_node("s1", 1),
        slice_("s1-nic", nic, node="s1", driver=NIC, pool="s1-nic"),
        fresh_claim("shared", request()),
    ]
    arrivals: list[dict[str, Any]] = []
    for i in range(3):
        arrivals.append(pod(f"shared-{i}", klass="shared", claims=("shared",)).obj())
    for i in range(5):
        r = request("nic", cls=NIC)
        r["exactly"]["capacity"] = {"requests": {"bandwidth": "3G"}}
        arrivals.append(fresh_claim(f"net-{i}", r))
        arrivals.append(pod(f"net-{i}", klass="net", claims=(f"net-{i}",)).obj())
    return Scenario("shared-claims", tuple(setup), tuple(arrivals), expect={"shared": 3, "net": 3})


def gangs_topology() -> Scenario:
    """Five racks of two 4-CPU nodes and a node of isolated cores. Gang `a`
    (4 x 2 CPUs) fills a rack, `b` (3 x 2) most of another, `huge` (3 x 4 CPUs,
    one rack) can never fit; two isolated pods of which one fits; lone pods last."""
    setup: list[dict[str, Any]] = []
    for r in range(5):
        for j in range(2):
            n = make_node(f"r{r}-{j}").capacity(cpu=4, memory="16Gi", pods=110)
            setup.append(n.label("troupe.dev/rack", f"r{r}").obj())
    iso = (
        make_node("iso").capacity(cpu=4, memory="16Gi", pods=110).ext("troupe.dev/isolated-cpu", 4)
    )
    setup.append(iso.obj())
    rack = {"troupe.dev/topology-required": "troupe.dev/rack"}
    setup += [pod_group("a", 4, **rack), pod_group("b", 3, **rack), pod_group("huge", 3, **rack)]
    arrivals: list[dict[str, Any]] = []
    for g, size, cpu in (("a", 4, "2"), ("b", 3, "2"), ("huge", 3, "4")):
        arrivals += [pod(f"{g}-{i}", cpu).group(g).obj() for i in range(size)]
    # which of the two gets the isolated cores depends on which is tried first
    # (pods created within a second tie): one of them, either way
    arrivals.append(pod("iso-4", "4", klass="isolated").isolated().obj())
    arrivals.append(pod("iso-1", "1", klass="isolated").isolated().obj())
    arrivals += [pod(f"lone-{i}", "1", klass="lone").obj() for i in range(4)]
    return Scenario(
        "gangs-topology",
        tuple(setup),
        tuple(arrivals),
        expect={"a": 4, "b": 3, "huge": 0, "isolated": 1, "lone": 4},
    )


QUOTA_PROFILE: Final = {
    "schedulerName": "troupe-scheduler",
    "plugins": {
        "multiPoint": {"enabled": [{"name": "CapacityScheduling"}]},
        "postFilter": {"enabled": [{"name": "CapacityScheduling"}], "disabled": [{"name": "*"}]},
    },
}
GPU_QUOTA: Final = f"deviceclass.resource.kubernetes.io/{GPU}"


def elastic_quota(ns: str, min_: dict[str, Any], max_: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": ns, "namespace": ns},
        "spec": {"min": min_, "max": max_},
    }


def quota_rush() -> Scenario:
    """Three teams under ElasticQuotas (CapacityScheduling), everything arriving
    at once: team-a's 8 one-CPU pods under max 4 CPUs (4 bound), team-b's gang of
    3 x 1 CPU under max 2 (none bound: a gang fits its quota whole or not at
    all), and 4 pods of `default` claiming a GPU each under max 2 GPUs counted
    through their claims (2 bound). Live, with slow writes, the quota's own
    status writes and the claims' come back through the watch meanwhile."""
    mem = {"memory": "64Gi"}
    setup: list[dict[str, Any]] = [device_class(GPU), *gpu_node("g0", 4)]
    setup.append(make_node("c0").capacity(cpu=16, memory="64Gi", pods=110).obj())
    setup += [
        elastic_quota("team-a", {"cpu": 2, **mem}, {"cpu": 4, **mem}),
        elastic_quota("team-b", {"cpu": 2, **mem}, {"cpu": 2, **mem}),
        elastic_quota(
            "default", {"cpu": 16, **mem, GPU_QUOTA: 2}, {"cpu": 16, **mem, GPU_QUOTA: 2}
        ),
    ]
    group = pod_group("b", 3)
    group["metadata"]["namespace"] = "team-b"
    setup.append(group)
    arrivals: list[dict[str, Any]] = []
    for i in range(8):
        b = make_pod(f"a-{i}", "team-a").req(cpu="1", memory="256Mi").label(CLASS, "a")
        arrivals.append(b.obj())
    for i in range(3):
        b = make_pod(f"b-{i}", "team-b").req(cpu="1", memory="256Mi").group("b")
        arrivals.append(b.obj())
    for i in range(4):
        arrivals.append(fresh_claim(f"gpu-{i}", request()))
        arrivals.append(pod(f"gpu-{i}", klass="gpu", claims=(f"gpu-{i}",)).obj())
    return Scenario(
        "quota-rush",
        tuple(setup),
        tuple(arrivals),
        expect={"a": 4, "b": 0, "gpu": 2},
        config={"profiles": [QUOTA_PROFILE]},
    )


COMPOSITE_GATE: Final = {"troupe": {"featureGates": {"CompositePodGroup": True}}}


def composite_rush() -> Scenario:
    """Groups of groups (CompositePodGroup, Kubernetes 1.37) on three 4-CPU
    nodes, every pod arriving at once: `job` (minGroupCount 2) of gangs a and b
    (2 x 2 CPUs each) fits whole; `big` (minGroupCount 2) of c (2 x 1 CPU, fits
    alone) and d (2 x 5 CPUs, never fits) binds nothing, not even c; `half`
    (minGroupCount 1) of h1 (2 x 1 CPU) and h2 (2 x 5 CPUs) binds h1 alone.
    Live, the composites' status writes and the pods' binds come back through
    the watch meanwhile."""
    setup: list[dict[str, Any]] = [
        make_node(f"n{i}").capacity(cpu=4, memory="16Gi", pods=110).obj() for i in range(3)
    ]
    children = {"job": (2, ("a", "b")), "big": (2, ("c", "d")), "half": (1, ("h1", "h2"))}
    cpus = {"a": "2", "b": "2", "c": "1", "d": "5", "h1": "1", "h2": "5"}
    arrivals: list[dict[str, Any]] = []
    for root, (count, kids) in children.items():
        setup.append(native_group(root, count, "", root, composite=True))
        for kid in kids:
            setup.append(native_group(kid, 2, root, root))
            for i in range(2):
                arrivals.append(pod(f"{kid}-{i}", cpus[kid], klass=kid).scheduling_group(kid).obj())
    return Scenario(
        "composite-rush",
        tuple(setup),
        tuple(arrivals),
        interval=0.0,
        expect={"a": 2, "b": 2, "c": 0, "d": 0, "h1": 2, "h2": 0},
        config=COMPOSITE_GATE,
        native_podgroups="v1alpha3",
    )


def seventeen_racks() -> Scenario:
    """17 racks of two 4-CPU nodes; the first 16 are tainted, so the gang (two
    members of 2 CPUs, one rack required) fits only in rack 17. It waited
    forever when only the first `topologyDomainsPerCycle` (16) domains in
    predicted order were ever tried, the prediction blind to taints."""
    setup: list[dict[str, Any]] = []
    for r in range(17):
        for j in range(2):
            n = make_node(f"rack{r:02d}-{j}").capacity(cpu=4, memory="16Gi", pods=110)
            n = n.label("troupe.dev/rack", f"rack{r:02d}")
            if r < 16:
                n = n.taint("maintenance", "true")
            setup.append(n.obj())
    setup.append(pod_group("ring", 2, **{"troupe.dev/topology-required": "troupe.dev/rack"}))
    arrivals = tuple(pod(f"ring-{i}", "2").group("ring").obj() for i in range(2))
    return Scenario("seventeen-racks", tuple(setup), arrivals, expect={"ring": 2})


# Scenarios read from tests/fixtures ----------------------------------------------------


def from_fixture(path: str, classes: Mapping[str, str] | None = None) -> Scenario:
    """A simulator fixture as a scenario: running pods and everything else are
    there first, pending pods arrive in their creationTimestamp (then file) order.
    `classes` (pod name -> class) groups interchangeable pods."""
    objects = load_objects([str(FIXTURES / path)])
    setup, pending = [], []
    for i, o in enumerate(objects):
        o = copy.deepcopy(o)
        is_pending = o.get("kind") == "Pod" and not (o.get("spec") or {}).get("nodeName")
        if is_pending:
            ts = str((o.get("metadata") or {}).get("creationTimestamp") or "")
            pending.append((ts == "", ts, i, o))
        else:
            setup.append(o)
    pending.sort(key=lambda t: t[:3])
    arrivals = []
    for *_, o in pending:
        md = o.setdefault("metadata", {})
        md.pop("creationTimestamp", None)
        name = md.get("name")
        if classes and name in classes:
            md.setdefault("labels", {})[CLASS] = classes[name]
        arrivals.append(o)
    # A second apart: the API server stamps creationTimestamp to the second, and
    # pods of one second are sorted by name (Coscheduling's QueueSort), which
    # need not be the fixture's order.
    name = path.removesuffix(".yaml").replace("/", "-")
    return Scenario(name, tuple(setup), tuple(arrivals), interval=1.05)


BUILT: Final[dict[str, Callable[[], Scenario]]] = {
    "gpu-rush": gpu_rush,
    "binding-conditions": binding_conditions,
    "gang-preemption-devices": gang_preemption_devices,
    "shared-claims": shared_claims,
    "gangs-topology": gangs_topology,
    "seventeen-racks": seventeen_racks,
    "quota-rush": quota_rush,
    "composite-rush": composite_rush,
}
# Fixtures whose outcome does not depend on which pod of a class came first.
FIXTURE_SCENARIOS: Final[dict[str, Callable[[], Scenario]]] = {
    "sim-resources": lambda: from_fixture("sim/resources.yaml"),
    "sim-isolated": lambda: from_fixture("sim/isolated.yaml"),
    "sim-taints": lambda: from_fixture("sim/taints.yaml"),
    "gang-three-gangs": lambda: from_fixture("gang/three-gangs.yaml"),
    "preemption-single": lambda: from_fixture("preemption/single.yaml"),
    "preemption-gang-whole": lambda: from_fixture("preemption/gang-whole.yaml"),
    "volumes-static-pv": lambda: from_fixture("volumes/static-pv.yaml"),
    "volumes-wffc-provisioned": lambda: from_fixture("volumes/wffc-provisioned.yaml"),
    "volumes-csi-limit": lambda: from_fixture("volumes/csi-limit.yaml"),
}
CORPUS: Final[dict[str, Callable[[], Scenario]]] = {**BUILT, **FIXTURE_SCENARIOS}


def scenario(name: str) -> Scenario:
    return CORPUS[name]()
