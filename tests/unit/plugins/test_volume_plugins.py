"""VolumeZone, VolumeRestrictions and NodeVolumeLimits (cases named after
their upstream tests where ported)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.builders import make_node, make_pod
from tests.volume_builders import (
    World,
    csi_node,
    pv,
    pvc,
    storage_class,
    with_claims,
    with_volume,
)
from troupe.api.parse import parse_pod
from troupe.api.storage import migrated_source, parse_storage_object
from troupe.api.types import IsolatedCPU, Pod
from troupe.core.snapshot import pod_charge
from troupe.framework.cycle_state import CycleState
from troupe.framework.events import (
    EventResource,
    QueueingHint,
)
from troupe.plugins.node_volume_limits import (
    ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED,
    NodeVolumeLimits,
)
from troupe.plugins.volume_restrictions import (
    ERR_REASON_DISK_CONFLICT,
    ERR_REASON_RWOP_CONFLICT,
    VolumeRestrictions,
)
from troupe.plugins.volume_zone import ERR_REASON_CONFLICT, VolumeZone

OK: list[str] = []
ZONE = "topology.kubernetes.io/zone"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"


def zone_nodes() -> list[dict[str, Any]]:
    return [
        make_node("a1").label(ZONE, "a").obj(),
        make_node("b1").label(BETA_ZONE, "b").obj(),
        make_node("plain").obj(),
    ]


ZONE_CASES: list[tuple[str, list[dict[str, Any]], list[str], Any]] = [
    ("pod without volume", [], [], "Skip"),
    (
        "label zone failure domain matched",
        [pvc("c", volume="v"), pv("v", labels={ZONE: "a"}, phase="Bound")],
        ["c"],
        {"a1": OK, "b1": [ERR_REASON_CONFLICT], "plain": OK},
    ),
    (
        "beta PV label matched by a GA node label, and several zones",
        [pvc("c", volume="v"), pv("v", labels={BETA_ZONE: "a__b"}, phase="Bound")],
        ["c"],
        {"a1": OK, "b1": OK, "plain": OK},
    ),
    (
        "zones joined by commas (LabelZonesToSet), beta key on a GA-labelled node",
        [pvc("c", volume="v"), pv("v", labels={BETA_ZONE: "a, b"}, phase="Bound")],
        ["c"],
        {"a1": OK, "b1": OK, "plain": OK},
    ),
    (
        "an empty zone in a PV label is an error",
        [pvc("c", volume="v"), pv("v", labels={BETA_ZONE: "a,,b"}, phase="Bound")],
        ["c"],
        'ERROR: comma separated list of zones ("a,,b") must not contain an empty zone',
    ),
    (
        "a GA PV label is not matched by a beta node label",
        [pvc("c", volume="v"), pv("v", labels={ZONE: "b"}, phase="Bound")],
        ["c"],
        {"a1": [ERR_REASON_CONFLICT], "b1": [ERR_REASON_CONFLICT], "plain": OK},
    ),
    (
        "a region on the PV and zoned nodes without a region label",
        [
            pvc("c", volume="v"),
            pv("v", labels={"topology.kubernetes.io/region": "r"}, phase="Bound"),
        ],
        ["c"],
        {"a1": [ERR_REASON_CONFLICT], "b1": [ERR_REASON_CONFLICT], "plain": OK},
    ),
    (
        "unbound WaitForFirstConsumer claim is skipped",
        [storage_class("wait"), pvc("c", sc="wait")],
        ["c"],
        "Skip",
    ),
    (
        "unbound immediate claim",
        [storage_class("imm", wffc=False), pvc("c", sc="imm")],
        ["c"],
        "UNSCHEDULABLE_AND_UNRESOLVABLE: PersistentVolume had no name",
    ),
    (
        "claim without volume or class",
        [pvc("c", sc=None)],
        ["c"],
        "UNSCHEDULABLE_AND_UNRESOLVABLE: "
        "PersistentVolumeClaim had no pv name and storageClass name",
    ),
]


@pytest.mark.parametrize(
    ("name", "objs", "claims", "want"), ZONE_CASES, ids=[c[0] for c in ZONE_CASES]
)
def test_volume_zone(name: str, objs: list[dict[str, Any]], claims: list[str], want: Any) -> None:
    w = World(zone_nodes()).add(*objs)
    got = w.filter(VolumeZone.new({}, w.handle), with_claims(make_pod("p").obj(), *claims))
    assert got == want


def gce(pd: str, ro: bool = False) -> dict[str, Any]:
    return {"name": "d", "gcePersistentDisk": {"pdName": pd, "readOnly": ro}}


def aws(vid: str) -> dict[str, Any]:
    return {"name": "d", "awsElasticBlockStore": {"volumeID": vid}}


def rbd(mons: list[str], image: str, ro: bool = False) -> dict[str, Any]:
    return {"name": "d", "rbd": {"monitors": mons, "pool": "p", "image": image, "readOnly": ro}}


def iscsi(iqn: str, ro: bool = False) -> dict[str, Any]:
    return {"name": "d", "iscsi": {"iqn": iqn, "lun": 0, "targetPortal": "x", "readOnly": ro}}


DISK_CASES = [
    ("nothing", gce("foo"), gce("bar"), OK),
    ("same gce pd", gce("foo"), gce("foo"), [ERR_REASON_DISK_CONFLICT]),
    ("same gce pd both read-only", gce("foo", True), gce("foo", True), OK),
    ("same aws volume", aws("foo"), aws("foo"), [ERR_REASON_DISK_CONFLICT]),
    ("different aws volume", aws("foo"), aws("bar"), OK),
    (
        "rbd overlapping monitors",
        rbd(["a", "b"], "i"),
        rbd(["b", "c"], "i"),
        [ERR_REASON_DISK_CONFLICT],
    ),
    ("rbd disjoint monitors", rbd(["a"], "i"), rbd(["c"], "i"), OK),
    ("rbd read-only", rbd(["a"], "i", True), rbd(["a"], "i", True), OK),
    ("same iscsi iqn", iscsi("q"), iscsi("q"), [ERR_REASON_DISK_CONFLICT]),
    ("iscsi read-only", iscsi("q", True), iscsi("q", True), OK),
]


@pytest.mark.parametrize(
    ("name", "existing", "new", "want"), DISK_CASES, ids=[c[0] for c in DISK_CASES]
)
def test_disk_conflicts(
    name: str, existing: dict[str, Any], new: dict[str, Any], want: Any
) -> None:
    w = World(2).place(with_volume(make_pod("old").obj(), existing), "n0")
    got = w.filter(VolumeRestrictions.new({}, w.handle), with_volume(make_pod("p").obj(), new))
    assert got == {"n0": want, "n1": OK}


def test_read_write_once_pod() -> None:
    w = World(2).add(pvc("c", volume="v", modes=("ReadWriteOncePod",)), pvc("d", volume="v2"))
    plugin = VolumeRestrictions.new({}, w.handle)
    # Upstream's PreFilter skips when no pod uses the ReadWriteOncePod claim yet.
    assert w.filter(plugin, with_claims(make_pod("p").obj(), "c")) == "Skip"
    w.place(with_claims(make_pod("old").obj(), "c"), "n0")
    want = [ERR_REASON_RWOP_CONFLICT]
    assert w.filter(plugin, with_claims(make_pod("p").obj(), "c")) == {"n0": want, "n1": want}
    # A ReadWriteOnce claim shared on a node is not a conflict.
    w.place(with_claims(make_pod("old2").obj(), "d"), "n0")
    assert w.filter(plugin, with_claims(make_pod("p").obj(), "d")) == "Skip"
    assert w.filter(plugin, make_pod("p").obj()) == "Skip"


def test_missing_claim_is_unresolvable_but_ephemeral_claims_are_not_looked_up() -> None:
    """readWriteOncePodPVCsForPod reads persistentVolumeClaim volumes only: a
    generic ephemeral volume's claim not created yet is VolumeBinding's to
    report ("waiting for ephemeral volume controller...")."""
    w = World(1)
    plugin = VolumeRestrictions.new({}, w.handle)
    got = w.filter(plugin, with_claims(make_pod("p").obj(), "gone"))
    assert got == 'UNSCHEDULABLE_AND_UNRESOLVABLE: persistentvolumeclaim "gone" not found'
    eph = with_volume(make_pod("p").obj(), {"name": "scratch", "ephemeral": {}})
    assert w.filter(plugin, eph) == "Skip"


def test_disk_conflict_is_the_reason_before_read_write_once_pod() -> None:
    """Filter checks satisfyVolumeConflicts first and returns its reason."""
    w = World(2).add(pvc("c", volume="v", modes=("ReadWriteOncePod",)))
    w.place(with_claims(with_volume(make_pod("old").obj(), gce("pd")), "c"), "n0")
    new = with_claims(with_volume(make_pod("p").obj(), gce("pd")), "c")
    got = w.filter(VolumeRestrictions.new({}, w.handle), new)
    assert got == {"n0": [ERR_REASON_DISK_CONFLICT], "n1": [ERR_REASON_RWOP_CONFLICT]}


def _run(
    w: World, plugin: VolumeRestrictions, obj: dict[str, Any], charges: list[tuple[str, Pod, int]]
) -> dict[str, Any]:
    """PreFilter on the snapshot, then the `charges` (node, pod, +1 | -1) the
    scheduler makes between them (nominated pods charged for a pass, a dry
    run's victims taken off), then Filter: the reasons per node. The charges
    are undone afterwards."""
    pod = parse_pod(obj)
    assert isinstance(pod, Pod)
    snap = w.table()
    state = CycleState()
    _, st = plugin.pre_filter(state, pod, snap)
    assert st.is_success, st
    for node, p, sign in charges:
        snap.charge(snap.row_of[node], p, pod_charge(p, IsolatedCPU()), sign)
    try:
        rows = snap.valid_rows()
        res = plugin.filter(state, pod, snap, rows)
    finally:
        for node, p, sign in reversed(charges):
            snap.charge(snap.row_of[node], p, pod_charge(p, IsolatedCPU()), -sign)
    return {
        snap.names[r]: [res.reasons[j] for j in np.flatnonzero(res.rejected[i]).tolist()]
        for i, r in enumerate(rows.tolist())
    }


def test_a_user_taken_off_in_a_dry_run_does_not_conflict_there() -> None:
    """RemovePod: preemption's dry run on n0 takes the pod using the
    ReadWriteOncePod claim (and the disk) off n0; n0 then fits, n1 does not."""
    w = World(2).add(pvc("c", volume="v", modes=("ReadWriteOncePod",)))
    old = with_claims(with_volume(make_pod("old").obj(), aws("vol-1")), "c")
    w.place(old, "n0")
    victim = parse_pod(old)
    assert isinstance(victim, Pod)
    plugin = VolumeRestrictions.new({}, w.handle)
    new = with_claims(with_volume(make_pod("p").obj(), aws("vol-1")), "c")
    got = _run(w, plugin, new, [("n0", victim, -1)])
    assert got == {"n0": OK, "n1": [ERR_REASON_RWOP_CONFLICT]}
    got = _run(w, plugin, new, [])
    assert got == {"n0": [ERR_REASON_DISK_CONFLICT], "n1": [ERR_REASON_RWOP_CONFLICT]}


def test_a_nominated_pod_charged_to_a_node_conflicts_there() -> None:
    """AddPod: a nominated pod of equal or higher priority, charged to n1 for
    the pass, uses the ReadWriteOncePod claim (by name) and the disk."""
    w = World(3).add(
        pvc("c", volume="v", modes=("ReadWriteOncePod",)),
        pvc("other", volume="v3"),
    )
    w.place(with_claims(make_pod("user").obj(), "c"), "n2")
    nominated = parse_pod(with_claims(with_volume(make_pod("nom").obj(), gce("pd")), "c"))
    assert isinstance(nominated, Pod)
    w.handle.nominator.add(nominated, "n1")
    plugin = VolumeRestrictions.new({}, w.handle)
    new = with_claims(with_volume(make_pod("p").obj(), gce("pd")), "other")
    got = _run(w, plugin, new, [("n1", nominated, +1)])
    assert got == {"n0": OK, "n1": [ERR_REASON_DISK_CONFLICT], "n2": OK}
    # Not charged for this pass (lower priority): no conflict.
    got = _run(w, plugin, new, [])
    assert got == {"n0": OK, "n1": OK, "n2": OK}
    new = with_claims(make_pod("p").obj(), "c")
    got = _run(w, plugin, new, [("n1", nominated, +1)])
    assert got == {n: [ERR_REASON_RWOP_CONFLICT] for n in ("n0", "n1", "n2")}


def test_node_volume_limits() -> None:
    w = World(3).add(
        csi_node("n0", ebs_csi_aws_com=2),
        csi_node("n1", ebs_csi_aws_com=1),
        storage_class("ebs", provisioner="ebs.csi.aws.com"),
        *[pvc(f"c{i}", volume=f"v{i}") for i in range(3)],
        *[pv(f"v{i}", csi=("ebs.csi.aws.com", f"h{i}"), phase="Bound") for i in range(3)],
        pvc("new", sc="ebs"),
    )
    plugin = NodeVolumeLimits.new({}, w.handle)
    assert w.filter(plugin, make_pod("p").obj()) == "Skip"
    w.place(with_claims(make_pod("a").obj(), "c0"), "n0")
    w.place(with_claims(make_pod("b").obj(), "c1"), "n1")
    got = w.filter(plugin, with_claims(make_pod("p").obj(), "c2"))
    # n0: 1 attached + 1 new <= 2; n1: 1 + 1 > 1; n2: no CSINode, no limit.
    assert got == {"n0": OK, "n1": [ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED], "n2": OK}
    # A volume already attached on the node does not count twice.
    assert w.filter(plugin, with_claims(make_pod("p").obj(), "c1"))["n1"] == OK  # type: ignore[index]
    # An unbound claim counts for its class's provisioner.
    got = w.filter(plugin, with_claims(make_pod("p").obj(), "new", "c2"))
    assert got["n0"] == [ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED]  # type: ignore[index]


# ---- NodeVolumeLimits as csi.go (TestCSILimits' cases by kind) ----------------------

EBS = "ebs.csi.aws.com"


def _ebs_pv(name: str, volume_id: str) -> dict[str, Any]:
    obj = pv(name, phase="Bound")
    obj["spec"]["awsElasticBlockStore"] = {"volumeID": volume_id}
    return obj


def _nvl(w: World, obj: dict[str, Any], charges: list[tuple[str, Pod, int]]) -> Any:
    plugin = NodeVolumeLimits.new({}, w.handle)
    pod = parse_pod(obj)
    assert isinstance(pod, Pod)
    snap = w.table()
    state = CycleState()
    _, st = plugin.pre_filter(state, pod, snap)
    if st.is_skip:
        return "Skip"
    for node, p, sign in charges:
        snap.charge(snap.row_of[node], p, pod_charge(p, IsolatedCPU()), sign)
    try:
        rows = snap.valid_rows()
        res = plugin.filter(state, pod, snap, rows)
    finally:
        for node, p, sign in reversed(charges):
            snap.charge(snap.row_of[node], p, pod_charge(p, IsolatedCPU()), -sign)
    return {
        snap.names[r]: ([res.reasons[j] for j in np.flatnonzero(res.rejected[i]).tolist()])
        for i, r in enumerate(rows.tolist())
    }


def test_inline_csi_volumes_do_not_count() -> None:
    """filterAttachableVolumes counts inline volumes only when CSI migration
    translates them; an inline `csi` volume is skipped at PreFilter."""
    w = World(1).add(csi_node("n0", ebs_csi_aws_com=0))
    inline = {"name": "i", "csi": {"driver": EBS, "volumeAttributes": {}}}
    assert _nvl(w, with_volume(make_pod("p").obj(), inline), []) == "Skip"


def test_claim_not_found_is_unresolvable_on_every_node() -> None:
    w = World(2)
    got = _nvl(w, with_claims(make_pod("p").obj(), "gone"), [])
    msg = 'looking up PVC default/gone: persistentvolumeclaim "gone" not found'
    assert got == {"n0": [msg], "n1": [msg]}


def test_migrated_in_tree_volumes_count_as_their_csi_driver() -> None:
    """An in-tree EBS PV and an inline EBS volume translate to ebs.csi.aws.com
    with the same handle (the `aws://zone/` prefix dropped): one attachment."""
    w = World(2).add(
        csi_node("n0", ebs_csi_aws_com=1),
        csi_node("n1", ebs_csi_aws_com=1),
        pvc("c", volume="ebs-1"),
        _ebs_pv("ebs-1", "aws://us-east-1a/vol-1"),
    )
    w.place(with_claims(make_pod("a").obj(), "c"), "n0")
    same = with_volume(make_pod("p").obj(), aws("vol-1"))
    other = with_volume(make_pod("p").obj(), aws("aws://us-east-1a/vol-2"))
    assert _nvl(w, same, []) == {"n0": OK, "n1": OK}
    assert _nvl(w, other, []) == {"n0": [ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED], "n1": OK}
    # An inline EBS volume on a node counts against a PV-backed one there.
    w.place(with_volume(make_pod("b").obj(), aws("vol-3")), "n1")
    got = _nvl(w, with_claims(make_pod("p").obj(), "c"), [])
    assert got == {"n0": OK, "n1": [ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED]}


def test_unbound_claim_counts_for_the_migrated_provisioner() -> None:
    """getCSIDriverInfoFromSC: kubernetes.io/gce-pd provisions through
    pd.csi.storage.gke.io; a claim whose PV is gone falls back to its class."""
    w = World(1).add(
        csi_node("n0", pd_csi_storage_gke_io=0),
        storage_class("std", provisioner="kubernetes.io/gce-pd"),
        pvc("new", sc="std"),
        pvc("lost", sc="std", volume="gone"),
    )
    assert _nvl(w, with_claims(make_pod("p").obj(), "new"), []) == {
        "n0": [ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED]
    }
    assert _nvl(w, with_claims(make_pod("p").obj(), "lost"), []) == {
        "n0": [ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED]
    }


def test_attached_volumes_are_those_of_the_pods_in_the_snapshot() -> None:
    """Filter counts nodeInfo's pods: a dry run's victim frees its slot, a
    nominated pod charged for the pass takes one."""
    w = World(2).add(
        csi_node("n0", ebs_csi_aws_com=1),
        csi_node("n1", ebs_csi_aws_com=1),
        *[pvc(f"c{i}", volume=f"v{i}") for i in range(3)],
        *[pv(f"v{i}", csi=(EBS, f"h{i}"), phase="Bound") for i in range(3)],
    )
    old = with_claims(make_pod("old").obj(), "c0")
    w.place(old, "n0")
    victim = parse_pod(old)
    nominated = parse_pod(with_claims(make_pod("nom").obj(), "c1"))
    assert isinstance(victim, Pod) and isinstance(nominated, Pod)
    w.handle.nominator.add(nominated, "n1")
    new = with_claims(make_pod("p").obj(), "c2")
    full = [ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED]
    assert _nvl(w, new, []) == {"n0": full, "n1": OK}
    assert _nvl(w, new, [("n0", victim, -1)]) == {"n0": OK, "n1": OK}
    assert _nvl(w, new, [("n1", nominated, +1)]) == {"n0": full, "n1": full}


def test_node_volume_limits_hints() -> None:
    plugin = NodeVolumeLimits.new({}, World(1).handle)
    hints = {h.event.resource: h.hint for h in plugin.events_to_register()}
    waiting = parse_pod(with_claims(make_pod("p").obj(), "c"))
    assert isinstance(waiting, Pod)
    pending = parse_pod(with_claims(make_pod("q").obj(), "d"))
    placed = parse_pod(with_claims(make_pod("q").node("n0").obj(), "d"))
    plain = parse_pod(make_pod("q").node("n0").obj())
    deleted = hints[EventResource.ASSIGNED_POD]
    assert deleted is not None
    assert deleted(waiting, pending, None) is QueueingHint.SKIP  # never on a node
    assert deleted(waiting, plain, None) is QueueingHint.SKIP  # no volumes
    assert deleted(waiting, placed, None) is QueueingHint.QUEUE
    added = hints[EventResource.PERSISTENT_VOLUME_CLAIM]
    assert added is not None
    claim = parse_storage_object("PersistentVolumeClaim", pvc("c"))
    other = parse_storage_object("PersistentVolumeClaim", pvc("c", namespace="x"))
    assert added(waiting, None, claim) is QueueingHint.QUEUE
    assert added(waiting, None, other) is QueueingHint.SKIP


@pytest.mark.parametrize(
    ("spec", "labels", "want"),
    [
        ({"awsElasticBlockStore": {"volumeID": "vol-1"}}, {}, (EBS, "vol-1")),
        ({"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/vol-1"}}, {}, (EBS, "vol-1")),
        (
            {"gcePersistentDisk": {"pdName": "pd"}},
            {"topology.kubernetes.io/zone": "us-central1-a"},
            ("pd.csi.storage.gke.io", "projects/UNSPECIFIED/zones/us-central1-a/disks/pd"),
        ),
        (
            {"gcePersistentDisk": {"pdName": "pd"}},
            {"failure-domain.beta.kubernetes.io/zone": "us-central1-a__us-central1-b"},
            ("pd.csi.storage.gke.io", "projects/UNSPECIFIED/regions/us-central1/disks/pd"),
        ),
        (
            {"gcePersistentDisk": {"pdName": "pd"}},
            {},
            ("pd.csi.storage.gke.io", "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/pd"),
        ),
        (
            {"azureDisk": {"diskURI": "/sub/d", "diskName": "d"}},
            {},
            ("disk.csi.azure.com", "/sub/d"),
        ),
        ({"cinder": {"volumeID": "c1"}}, {}, ("cinder.csi.openstack.org", "c1")),
        ({"nfs": {"server": "s", "path": "/"}}, {}, ("", "")),
    ],
)
def test_in_tree_pv_translation(spec: dict[str, Any], labels: dict[str, str], want: Any) -> None:
    """csi-translation-lib's TranslateInTreePVToCSI: driver and volume handle."""
    assert migrated_source(spec, labels) == want
