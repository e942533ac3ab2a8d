"""CapacityScheduling with gangs, where Troupe goes beyond scheduler-plugins:
a gang is admitted only if its quorum fits its quota together (each member
placed in the group trial is charged to the quota before the next is
searched), nothing stays charged when it is not, and the refused gang's
reason names the quota. Gang preemption counts the members it has placed so
far against their quota, and takes over-min quotas' gangs whole."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from tests.builders import make_node, make_pod
from tests.unit.plugins.test_capacity_scheduling import Cluster, kept_totals_agree, plugin
from troupe.api.types import PodKey
from troupe.core.topology import REQUIRED_ANNOTATION


def pod_group(h: Cluster, ns: str, name: str, min_member: int) -> None:
    obj = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}"},
        "spec": {"minMember": min_member},
    }
    h.cluster.pod_groups[f"{ns}/{name}"] = copy.deepcopy(obj)
    h.s.on_pod_group(obj)


def gang(
    h: Cluster, ns: str, name: str, members: int, min_member: int, cpu: str, priority: int = 0
) -> list[PodKey]:
    pod_group(h, ns, name, min_member)
    keys = []
    for i in range(members):
        obj: dict[str, Any] = (
            make_pod(f"{name}-{i}", ns).req(cpu=cpu).priority(priority).group(name).obj()
        )
        obj["spec"]["terminationGracePeriodSeconds"] = 1
        keys.append(h.add(obj))
    return keys


def counted(h: Cluster, ns: str) -> dict[str, int]:
    info = plugin(h.s).quotas.infos[ns]
    return {r: q for r, q in info.used.items() if q}


def test_a_gang_over_its_quotas_max_is_refused_whole_and_nothing_stays_charged() -> None:
    """4 members of 2 cpu under max 4 cpu: each alone fits the quota, together
    they do not; none binds, and the quota keeps nothing of the trial."""
    h = Cluster(nodes=4, cpu="2")

    async def go() -> None:
        h.quota("team", {"cpu": 4}, {"cpu": 4})
        keys = gang(h, "team", "job", 4, 4, "2")
        await h.drain()
        assert [k for k in keys if h.node_of(k)] == []
        assert counted(h, "team") == {}
        for k in keys:
            assert h.reason(k) == (
                'PodGroup "team/job": 2 of minMember 4 pods fit; 0/4 nodes are available: '
                "Pod team/job-2 is rejected in PreFilter because ElasticQuota team is more "
                "than Max."
            )
        kept_totals_agree(plugin(h.s))
        # The quota is whole: a gang that fits it is admitted.
        small = gang(h, "team", "small", 2, 2, "2")
        await h.drain()
        assert all(h.node_of(k) for k in small)
        assert counted(h, "team") == {"cpu": 4000}
        kept_totals_agree(plugin(h.s))

    asyncio.run(go())


def test_a_gang_within_its_quota_is_admitted_and_counted_once() -> None:
    h = Cluster(nodes=4, cpu="2")

    async def go() -> None:
        h.quota("team", {"cpu": 8}, {"cpu": 8})
        keys = gang(h, "team", "job", 4, 4, "2")
        await h.drain()
        assert all(h.node_of(k) for k in keys)
        assert counted(h, "team") == {"cpu": 8000}
        h.running_all()
        await h.advance(1)
        assert h.used("team/team") == {"cpu": "8"}
        kept_totals_agree(plugin(h.s))

    asyncio.run(go())


def test_a_gang_over_the_sum_of_min_is_refused_whole() -> None:
    """The total-min check sees the members placed before: two quotas of min 2
    cpu each (4 in all) and max 8; a gang of 3 members of 2 cpu would take the
    total to 6."""
    h = Cluster(nodes=4, cpu="2")

    async def go() -> None:
        h.quota("a", {"cpu": 2}, {"cpu": 8})
        h.quota("b", {"cpu": 2}, {"cpu": 8})
        keys = gang(h, "a", "job", 3, 3, "2")
        await h.drain()
        assert [k for k in keys if h.node_of(k)] == []
        assert counted(h, "a") == {}
        assert "because total ElasticQuota used is more than min" in h.reason(keys[0])
        assert 'PodGroup "a/job": 2 of minMember 3 pods fit' in h.reason(keys[0])

    asyncio.run(go())


def test_gang_reclaim_counts_the_members_placed_and_takes_over_min_gangs_whole() -> None:
    """Team a borrows: its gang of 4 x 2 cpu runs on 8 cpus with min 2. Team b,
    within its min of 6, reclaims for its gang of 3 x 2 cpu: a's gang is over
    its min and goes whole (not 3 of its 4 members), and b's members are counted
    against b's quota as they are placed in the plan."""
    h = Cluster(nodes=4, cpu="2")

    async def go() -> None:
        h.quota("a", {"cpu": 2}, {"cpu": 8})
        h.quota("b", {"cpu": 6}, {"cpu": 6})
        a = gang(h, "a", "borrow", 4, 4, "2")
        await h.drain()
        assert all(h.node_of(k) for k in a)
        h.running_all()
        b = gang(h, "b", "reclaim", 3, 3, "2", priority=10)
        await h.drain()
        deleted = sorted(k for k, _ in h.cluster.deletions)
        assert deleted == sorted(a)  # whole: a's gang keeps no partial quorum
        assert counted(h, "b") == {}  # nothing of b charged while it waits
        await h.advance(2)
        assert all(h.node_of(k) for k in b)
        assert counted(h, "b") == {"cpu": 6000}
        assert counted(h, "a") == {}
        kept_totals_agree(plugin(h.s))

    asyncio.run(go())


def test_gang_reclaim_takes_an_over_min_gang_whole_whatever_its_priority() -> None:
    """As a lone pod's reclaim, a gang's ignores priorities: b's gang of the
    same priority as a's (0) reclaims b's min, and a's gang goes whole."""
    h = Cluster(nodes=4, cpu="2")

    async def go() -> None:
        h.quota("a", {"cpu": 2}, {"cpu": 8})
        h.quota("b", {"cpu": 6}, {"cpu": 6})
        a = gang(h, "a", "borrow", 4, 4, "2")
        await h.drain()
        assert all(h.node_of(k) for k in a)
        h.running_all()
        b = gang(h, "b", "reclaim", 3, 3, "2")
        await h.drain()
        assert sorted(k for k, _ in h.cluster.deletions) == sorted(a)
        await h.advance(2)
        assert all(h.node_of(k) for k in b)
        kept_totals_agree(plugin(h.s))

    asyncio.run(go())


def test_a_gang_over_its_min_never_takes_another_quotas_gang() -> None:
    """Over its min, a gang preempts only lower-priority pods of its own quota:
    b has no min, so its gang of a's priority does not reclaim, and a's
    borrowing gang stays."""
    h = Cluster(nodes=4, cpu="2")

    async def go() -> None:
        h.quota("a", {"cpu": 4}, {"cpu": 8})
        h.quota("b", {"cpu": 0}, {"cpu": 8})
        h.quota("c", {"cpu": 4}, {"cpu": 4})
        a = gang(h, "a", "borrow", 4, 4, "2")
        await h.drain()
        assert all(h.node_of(k) for k in a)
        h.running_all()
        b = gang(h, "b", "big", 2, 2, "2")
        await h.drain()
        assert h.cluster.deletions == []
        assert not any(h.node_of(k) for k in b)

    asyncio.run(go())


def test_gang_reclaim_over_its_own_max_evicts_nothing() -> None:
    """A gang whose quorum exceeds its own max cannot be helped by preemption:
    the plan counts the members placed before against the quota, and evicts
    nothing."""
    h = Cluster(nodes=4, cpu="2")

    async def go() -> None:
        h.quota("a", {"cpu": 2}, {"cpu": 8})
        h.quota("b", {"cpu": 4}, {"cpu": 4})
        h.quota("c", {"cpu": 2}, {"cpu": 2})
        a = gang(h, "a", "borrow", 4, 4, "2")
        await h.drain()
        assert all(h.node_of(k) for k in a)
        h.running_all()
        b = gang(h, "b", "big", 3, 3, "2", priority=10)
        await h.drain()
        assert h.cluster.deletions == []
        assert not any(h.node_of(k) for k in b)
        assert "because total ElasticQuota used is more than min" in h.reason(b[0])
        assert counted(h, "b") == {}

    asyncio.run(go())


def test_a_gang_with_a_required_topology_fits_its_quota_together_in_its_domain() -> None:
    """Topology and quota in the same trial: racks of two 2-cpu nodes; a gang of
    2 x 2 cpu that must share a rack fits max 6 cpu and is placed in one rack; a
    second such gang has a rack left but only 2 cpu of quota: each member alone
    would fit, together they do not, so it is refused whole, its reason the
    quota's, nothing charged."""
    h = Cluster(nodes=0, cpu="2")
    for i in range(4):
        h.s.on_node(
            make_node(f"n{i}").capacity(cpu="2", pods=110).label("rack", f"r{i // 2}").obj()
        )

    async def go() -> None:
        h.quota("team", {"cpu": 6}, {"cpu": 6})

        def racked(name: str) -> list[PodKey]:
            pod_group(h, "team", name, 2)
            pg = h.cluster.pod_groups[f"team/{name}"]
            pg["metadata"]["annotations"] = {REQUIRED_ANNOTATION: "rack"}
            h.s.on_pod_group(copy.deepcopy(pg))
            return [
                h.add(make_pod(f"{name}-{i}", "team").req(cpu="2").group(name).obj())
                for i in range(2)
            ]

        first = racked("first")
        await h.drain()
        nodes = [h.node_of(k) for k in first]
        assert all(nodes) and len({int(str(n)[1:]) // 2 for n in nodes}) == 1
        second = racked("second")
        await h.drain()
        assert not any(h.node_of(k) for k in second)
        assert "ElasticQuota team is more than Max" in h.reason(second[0])
        assert counted(h, "team") == {"cpu": 4000}
        kept_totals_agree(plugin(h.s))

    asyncio.run(go())
