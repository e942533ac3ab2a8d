"""Faults against the deployed path (#14): two replicas of `troupe run
--kubeconfig` on the embedded API server with injected delays, hangs,
conflicts, SIGTERM and SIGKILL. Every case ends by checking the same
invariants on what the API server holds and saw:

* no double bind: each pod was bound by one successful pods/binding call;
* no over-commit: on each node, the bound pods' cpu fits its allocatable;
* no gang below quorum: a PodGroup has 0 or at least minMember bound members;
* every pod is bound or carries a PodScheduled=False condition with a reason;
* exactly one writer: the two replicas' writes of scheduling work never
  interleave in time.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from apiserver import ApiServer
from apiserver.replica import Troupe, metrics_reader, until
from bench.e2e import LeaseWatch
from tests.builders import make_node, make_pod
from troupe.api.quantity import parse_quantity

LEASE = ("leases", "kube-system", "troupe-scheduler")


@pytest.fixture
def api() -> Iterator[ApiServer]:
    srv = ApiServer(podgroups=True)
    with srv.start_in_thread():
        yield srv


def holder(api: ApiServer) -> str | None:
    lease = api.get(*LEASE)
    return None if lease is None else lease.get("spec", {}).get("holderIdentity") or None


def add_nodes(api: ApiServer, n: int, cpu: int) -> None:
    for i in range(n):
        api.create(make_node(f"n{i}").capacity(cpu=cpu, memory="64Gi", pods=110).obj())


def add_pod(api: ApiServer, name: str, cpu: str, group: str | None = None) -> None:
    b = make_pod(name).req(cpu=cpu)
    if group:
        b = b.group(group)
    obj = b.obj()
    obj["metadata"].pop("uid", None)
    api.create(obj)


def add_gang(api: ApiServer, name: str, size: int, min_member: int, cpu: str) -> None:
    api.create(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"minMember": min_member, "scheduleTimeoutSeconds": 10},
        }
    )
    for i in range(size):
        add_pod(api, f"{name}-{i}", cpu, group=name)


def cpu_of(pod: dict[str, Any]) -> Fraction:
    total = Fraction(0)
    for c in pod["spec"]["containers"]:
        total += parse_quantity(((c.get("resources") or {}).get("requests") or {}).get("cpu", "0"))
    return total


def replica_of(user_agent: str) -> str:
    return user_agent.split("(", 1)[-1].split(")", 1)[0]


def check_invariants(api: ApiServer, *, settled: bool = True) -> None:
    binds = Counter(w.name for w in api.writes if w.verb == "bind" and w.status < 300 and w.name)
    assert all(n == 1 for n in binds.values()), f"pods bound twice: {binds}"
    pods = api.objects("pods")
    nodes = {n["metadata"]["name"]: n for n in api.objects("nodes")}
    used: dict[str, Fraction] = {}
    for p in pods:
        node = p["spec"].get("nodeName")
        if node:
            used[node] = used.get(node, Fraction(0)) + cpu_of(p)
    for node, cpu in used.items():
        alloc = parse_quantity(nodes[node]["status"]["allocatable"]["cpu"])
        assert cpu <= alloc, f"node {node} over-committed: {cpu} > {alloc}"
    for pg in api.objects("podgroups"):
        name, mm = pg["metadata"]["name"], pg["spec"]["minMember"]
        members = [
            p
            for p in pods
            if p["metadata"].get("labels", {}).get("scheduling.x-k8s.io/pod-group") == name
        ]
        n_bound = sum(1 for p in members if p["spec"].get("nodeName"))
        assert n_bound == 0 or n_bound >= mm, f"gang {name}: {n_bound} bound < minMember {mm}"
    if settled:
        for p in pods:
            if p["spec"].get("nodeName"):
                continue
            conds = (p.get("status") or {}).get("conditions") or []
            sched = [c for c in conds if c.get("type") == "PodScheduled"]
            assert sched and sched[0]["status"] == "False" and sched[0].get("message"), (
                f"pod {p['metadata']['name']} neither bound nor told why"
            )
    # one writer at a time: the replicas' (non-Lease) writes form disjoint spans
    spans: dict[str, list[float]] = {}
    for w in api.writes:
        if w.plural == "leases" or w.status >= 300 or "troupe-scheduler/" not in w.user_agent:
            continue
        spans.setdefault(replica_of(w.user_agent), []).append(w.time)
    intervals = sorted((min(t), max(t), r) for r, t in spans.items())
    for (_, end_a, ra), (start_b, _, rb) in itertools.pairwise(intervals):
        assert end_a <= start_b, f"{ra} and {rb} wrote at the same time"


def bound_count(api: ApiServer) -> int:
    return sum(1 for p in api.objects("pods") if p["spec"].get("nodeName"))


def settled(api: ApiServer, n: int) -> bool:
    """Every pod bound, or told why not."""
    pods = api.objects("pods")
    if len(pods) != n:
        return False
    return all(p["spec"].get("nodeName") or (p.get("status") or {}).get("conditions") for p in pods)


def two_replicas(tmp_path: Path, kubeconfig: Path) -> tuple[Troupe, Troupe]:
    a = Troupe(tmp_path, kubeconfig=kubeconfig, identity="a").start()
    b = Troupe(tmp_path, kubeconfig=kubeconfig, identity="b").start()
    a.wait_ready()
    b.wait_ready()
    return a, b


def stop_all(*ts: Troupe) -> None:
    for t in ts:
        if t.running:
            t.stop()


def test_sigterm_hand_over_while_binds_are_slow(api: ApiServer, tmp_path: Path) -> None:
    """The leader gets SIGTERM while its binds are queued behind a slow API."""
    kc = api.write_kubeconfig(tmp_path / "kc")
    add_nodes(api, 4, cpu=8)
    a, b = two_replicas(tmp_path, kc)
    try:
        first = until(lambda: holder(api), what="a leader")
        leader, other = (a, b) if first == "a" else (b, a)
        api.delay["/binding"] = 0.3
        for g in range(4):
            add_gang(api, f"g{g}", size=3, min_member=3, cpu="2")
        for i in range(6):
            add_pod(api, f"lone-{i}", "1")
        until(lambda: bound_count(api) >= 2, what="some binds")
        assert leader.stop() == 0  # graceful: in-flight binds end, then the Lease is released
        until(lambda: holder(api) == other.identity, what="hand-over")
        api.delay.clear()
        until(lambda: settled(api, 18), timeout=60, what="all pods bound or told why")
        check_invariants(api)
        assert bound_count(api) == 18
    finally:
        stop_all(a, b)


def test_sigkill_mid_gang_and_restart(api: ApiServer, tmp_path: Path) -> None:
    kc = api.write_kubeconfig(tmp_path / "kc")
    add_nodes(api, 3, cpu=4)
    a = Troupe(tmp_path, kubeconfig=kc, identity="a").start().wait_ready()
    try:
        api.delay["/binding"] = 0.5
        add_gang(api, "job", size=4, min_member=4, cpu="2")
        add_gang(api, "big", size=3, min_member=3, cpu="4")  # cannot fit with job
        until(lambda: bound_count(api) >= 1, what="the first bind")
        a.proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
        a.wait(10)
        api.delay.clear()
        # the Lease expires (4 s); a restarted replica takes over and finishes
        b = Troupe(tmp_path, kubeconfig=kc, identity="b").start().wait_ready()
        try:
            until(lambda: settled(api, 7), timeout=60, what="all pods bound or told why")
            time.sleep(1)  # let any straggler land before checking
            check_invariants(api)
        finally:
            stop_all(b)
    finally:
        stop_all(a)


def test_issue14_recreated_pod_during_binding_is_scheduled(api: ApiServer, tmp_path: Path) -> None:
    """A StatefulSet-style delete and re-create while the bind is in flight: the
    bind fails the UID precondition (409); the new pod must still be bound."""
    kc = api.write_kubeconfig(tmp_path / "kc")
    add_nodes(api, 2, cpu=4)
    with Troupe(tmp_path, kubeconfig=kc) as t:
        t.wait_ready()
        hang = api.hang("/pods/web-0/binding")
        add_pod(api, "web-0", "1")
        until(lambda: hang.waiting >= 1, what="the bind in flight")
        api.delete("pods", "default", "web-0")
        add_pod(api, "web-0", "1")  # same name, new uid
        api.unhang(hang)
        until(
            lambda: (api.get("pods", "default", "web-0") or {}).get("spec", {}).get("nodeName"),
            what="the re-created pod bound",
        )
        conflicts = [w for w in api.writes if w.verb == "bind" and w.status == 409]
        assert conflicts, "the first bind must have met the UID precondition"
        t.stop()
    check_invariants(api)


def test_lease_conflicts_and_api_errors_leave_one_leader(api: ApiServer, tmp_path: Path) -> None:
    kc = api.write_kubeconfig(tmp_path / "kc")
    add_nodes(api, 4, cpu=16)
    api.fail_next["/leases"] = [409, 500, 409, 503, 409]
    a, b = two_replicas(tmp_path, kc)
    stop = threading.Event()

    def churn() -> None:
        i = 0
        while not stop.is_set() and i < 40:
            add_pod(api, f"p{i}", "500m")
            i += 1
            time.sleep(0.1)

    th = threading.Thread(target=churn)
    th.start()
    try:
        until(lambda: holder(api), what="a leader")
        api.fail_next["/binding"] = [500, 503, 500]
        th.join(30)
        until(lambda: settled(api, 40), timeout=60, what="all pods bound")
        check_invariants(api)
        assert bound_count(api) == 40
    finally:
        stop.set()
        th.join(5)
        stop_all(a, b)


# ---- leader election: the replica, its elector child, and their clocks -----------
# (FAST_LEADER_ELECTION: leaseDuration 4s, renewDeadline 3s, retryPeriod 500ms)

LEASE_DURATION = 4.0
RENEW_DEADLINE = 3.0


def elector_of(t: Troupe) -> int:
    """The pid of the replica's leader-election child (a process whose parent it is)."""
    assert t.proc is not None

    def child() -> int | None:
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == t.proc.pid:  # type: ignore[union-attr]
                return int(stat.parent.name)
        return None

    return int(until(child, what=f"{t.identity}'s elector process"))


def gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"  # a zombie has exited


def releases(leases: LeaseWatch, since: float) -> list[float]:
    """Server times of the Lease writes that left it without a holder."""
    return [t for t, _, h in leases.renewals if t >= since and h == ""]


def taken_by(leases: LeaseWatch, who: str, since: float) -> float | None:
    return next((t for t, _, h in leases.renewals if t >= since and h == who), None)


def leader_and_standby(api: ApiServer, a: Troupe, b: Troupe) -> tuple[Troupe, Troupe]:
    first = until(lambda: holder(api), what="a leader")
    leader, other = (a, b) if first == "a" else (b, a)
    leader.token = other.token = metrics_reader(api)
    until(lambda: leader.metric("leader_election_master_status") == 1, what="the leader leads")
    return leader, other


def test_sigterm_gives_the_lease_up_and_the_standby_takes_it_at_once(
    api: ApiServer, tmp_path: Path
) -> None:
    """Found by a hostile probe: the Lease was not given up on SIGTERM (the elector
    child's control reader, left registered, cancelled the release), so every
    rolling update waited the full leaseDuration. The standby now takes over one
    retryPeriod after the release, well within leaseDuration."""
    kc = api.write_kubeconfig(tmp_path / "kc")
    add_nodes(api, 2, cpu=8)
    leases = LeaseWatch(api)
    a, b = two_replicas(tmp_path, kc)
    try:
        leader, other = leader_and_standby(api, a, b)
        t0 = time.time()
        assert leader.stop() == 0
        (released,) = releases(leases, t0)
        taken = until(lambda: taken_by(leases, other.identity, t0), what="hand-over")
        assert taken - released < LEASE_DURATION, (released, taken)
        for i in range(3):
            add_pod(api, f"p{i}", "1")
        until(lambda: settled(api, 3), what="pods bound by the new leader")
        check_invariants(api)
        assert bound_count(api) == 3
    finally:
        stop_all(a, b)


def test_a_killed_replica_gives_its_lease_up_through_its_elector(
    api: ApiServer, tmp_path: Path
) -> None:
    """The main process dies (SIGKILL): its elector sees the control pipe close,
    releases the Lease and ends; no renewer is left behind."""
    kc = api.write_kubeconfig(tmp_path / "kc")
    add_nodes(api, 2, cpu=8)
    leases = LeaseWatch(api)
    a, b = two_replicas(tmp_path, kc)
    try:
        leader, other = leader_and_standby(api, a, b)
        child = elector_of(leader)
        t0 = time.time()
        leader.kill()
        until(lambda: gone(child), what="the elector ends with its replica")
        assert releases(leases, t0), "the Lease was not given up"
        until(lambda: taken_by(leases, other.identity, t0), what="hand-over")
        add_pod(api, "p", "1")
        until(lambda: settled(api, 1), what="the new leader binds")
        check_invariants(api)
    finally:
        stop_all(a, b)


def test_a_hung_scheduler_lets_its_lease_lapse(api: ApiServer, tmp_path: Path) -> None:
    """Found by a hostile probe: with the main process stopped (SIGSTOP) its
    elector kept renewing, so no replica scheduled. The elector renews only while
    the main process's loop beats; the Lease lapses, the standby takes over and
    schedules, and the old leader, resumed, writes nothing and exits."""
    kc = api.write_kubeconfig(tmp_path / "kc")
    add_nodes(api, 2, cpu=8)
    leases = LeaseWatch(api)
    a, b = two_replicas(tmp_path, kc)
    try:
        leader, other = leader_and_standby(api, a, b)
        assert leader.proc is not None
        t0 = time.time()
        leader.proc.send_signal(signal.SIGSTOP)
        try:
            taken = until(
                lambda: taken_by(leases, other.identity, t0), timeout=60, what="hand-over"
            )
            # renewals stop within renewDeadline of the last beat, then the Lease
            # lapses a leaseDuration after the standby saw the last renewal
            assert taken - t0 >= LEASE_DURATION
            for i in range(3):
                add_pod(api, f"p{i}", "1")
            until(lambda: settled(api, 3), what="pods bound by the new leader")
        finally:
            leader.proc.send_signal(signal.SIGCONT)
        assert leader.wait(30) == 1  # it lost the Lease: it exits, as kube-scheduler
        check_invariants(api)
        assert {replica_of(w.user_agent) for w in api.writes if w.verb == "bind"} == {
            other.identity
        }
    finally:
        stop_all(a, b)


def test_a_hung_elector_stops_its_leader(api: ApiServer, tmp_path: Path) -> None:
    """Found by a hostile probe: with the elector child stopped (SIGSTOP), the old
    leader stayed up, /livez 200 and leader_election_master_status 1, until the
    child resumed. The main process sees the fence lapse without a word from its
    child, stops leading and exits; the standby takes over once the Lease lapses."""
    kc = api.write_kubeconfig(tmp_path / "kc")
    add_nodes(api, 2, cpu=8)
    leases = LeaseWatch(api)
    a, b = two_replicas(tmp_path, kc)
    child = 0
    try:
        leader, other = leader_and_standby(api, a, b)
        child = elector_of(leader)
        t0 = time.time()
        os.kill(child, signal.SIGSTOP)
        assert leader.wait(30) == 1
        until(lambda: taken_by(leases, other.identity, t0), timeout=60, what="hand-over")
        add_pod(api, "p", "1")
        until(lambda: settled(api, 1), what="the new leader binds")
        check_invariants(api)
    finally:
        if child and not gone(child):
            os.kill(child, signal.SIGCONT)
        stop_all(a, b)


def faketime(offset: str) -> dict[str, str]:
    """The environment that sets a replica's wall clock `offset` off (libfaketime,
    Debian's faketime package; `make install` installs it). The monotonic clock
    is left alone, as two machines' monotonic clocks are simply unrelated."""
    libs = sorted(Path("/usr/lib").glob("*/faketime/libfaketimeMT.so.1"))
    assert libs, "libfaketime is missing: apt-get install faketime (make install does)"
    return {"LD_PRELOAD": str(libs[0]), "FAKETIME": offset, "DONT_FAKE_MONOTONIC": "1"}


@pytest.mark.parametrize("offset", ["+20s", "-20s"])
def test_a_standby_with_a_skewed_clock_never_takes_a_renewed_lease(
    api: ApiServer, tmp_path: Path, offset: str
) -> None:
    """Found by a hostile probe: a standby whose clock ran ~13 s or more ahead took
    the Lease from a healthy leader (it compared the renewTime the leader wrote
    with its own clock), and both wrote. With the standby's clock 20 s ahead or
    behind: it never takes the Lease while the leader renews, and when the
    leader hangs it takes over within leaseDuration of the last renewal it saw
    (the skew adds nothing), one writer at a time throughout."""
    kc = api.write_kubeconfig(tmp_path / "kc")
    add_nodes(api, 4, cpu=8)
    leases = LeaseWatch(api)
    a = Troupe(tmp_path, kubeconfig=kc, identity="a").start().wait_ready()
    b = None
    try:
        until(lambda: holder(api) == "a", what="a leads")
        b = Troupe(tmp_path, kubeconfig=kc, identity="b", env=faketime(offset)).start()
        b.wait_ready()
        t0 = time.time()
        for i in range(30):
            add_pod(api, f"p{i}", "500m")
            time.sleep(0.2)  # the load spans many renewals (retryPeriod 500ms)
        until(lambda: settled(api, 30), what="pods bound")
        assert {h for t, _, h in leases.renewals if t >= t0} == {"a"}
        b.token = metrics_reader(api)
        assert b.metric("leader_election_master_status") == 0
        assert a.proc is not None
        a.proc.send_signal(signal.SIGSTOP)
        try:
            cut = time.time()
            taken = until(lambda: taken_by(leases, "b", cut), timeout=60, what="hand-over")
            last = max(t for t, _, h in leases.renewals if h == "a")
            # renewals stop within renewDeadline; the standby waits leaseDuration
            # from the last change it saw, on its own clock: not 20 s more or less
            assert LEASE_DURATION <= taken - last < LEASE_DURATION + RENEW_DEADLINE + 2
            add_pod(api, "after", "500m")
            until(lambda: settled(api, 31), what="the new leader binds")
        finally:
            a.proc.send_signal(signal.SIGCONT)
        assert a.wait(30) == 1
        check_invariants(api)
    finally:
        stop_all(*(t for t in (a, b) if t is not None))
