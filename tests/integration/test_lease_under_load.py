"""Leases never lapse under load: two replicas of `troupe run`, one of them
binding 1000 pods as fast as it can, while the server records every Lease
write, through the load and until the Lease has been renewed several times
whatever the machine's speed. The leader's renewals stay about `retryPeriod` apart (client-go's
rhythm: the next try starts `retryPeriod` after the last one ended), no other
replica ever holds the Lease, and only the leader binds. The full-size run
(10000 pods on 5000 nodes) is `make bench` (bench/e2e.py)."""

from __future__ import annotations

from apiserver.replica import FAST_LEADER_ELECTION
from bench import e2e

# retryPeriod of FAST_LEADER_ELECTION (500ms), plus what a renewal may take
# while the leader's other threads hold the interpreter; well under
# renewDeadline (3s), past which the leader would step down.
RETRY_PERIOD = 0.5
MARGIN = 0.75
# Renewals watched from the start of the load, however fast the binds go.
RENEWALS = 6


def test_the_leader_renews_on_time_while_binding_and_alone() -> None:
    assert FAST_LEADER_ELECTION["retryPeriod"] == "500ms"
    r = e2e.run(200, 1000, replicas=2, timeout=120, min_renewals=RENEWALS)
    assert r["bound"] == 1000
    assert r["lease_renewals"] >= RENEWALS
    assert r["lease_largest_gap_s"] < RETRY_PERIOD + MARGIN, r
    assert len(r["lease_holders"]) == 1, r
    (holder,) = r["lease_holders"]
    assert len(r["bind_writers"]) == 1 and f"({holder})" in r["bind_writers"][0], r
