"""Timing profiles of a live run: the faults the embedded API server injects
(apiserver.faults), named so that a failure says which one it ran under."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from apiserver.faults import ANY, Faults, Latency


@dataclass(frozen=True)
class Profile:
    name: str
    # Every write (any verb, any resource) unless `writes` names the (verb, plural).
    write: Latency = field(default_factory=Latency)
    writes: Mapping[tuple[str, str], Latency] = field(default_factory=dict)
    # Watch events held back per plural ("*": every resource), released in bursts.
    watch: Mapping[str, Latency] = field(default_factory=dict)
    conflict_rate: float = 0.0
    bind_conflict_rate: float = 0.0
    # The share of a write's latency before it reaches the store (the rest delays its answer).
    before_commit: float = 0.5

    def faults(self, seed: int) -> Faults:
        latency = {(ANY, ANY): self.write, **self.writes}
        return Faults(
            seed=seed,
            latency=latency,
            watch_hold=dict(self.watch),
            conflict_rate=self.conflict_rate,
            bind_conflict_rate=self.bind_conflict_rate,
            before_commit=self.before_commit,
        )


PROFILES: Final[dict[str, Profile]] = {
    p.name: p
    for p in (
        Profile("instant"),
        Profile("writes-50ms", write=Latency(0.05)),
        Profile("writes-200ms", write=Latency(0.2)),
        Profile("jitter", write=Latency(0.0, 0.25), watch={ANY: Latency(0.0, 0.1)}),
        # The answer as soon as the write is made, its watch event later: what a
        # busy kube-apiserver does (the watch cache lags the write).
        Profile(
            "late-watches",
            write=Latency(0.2),
            before_commit=1.0,
            watch={ANY: Latency(0.15, 0.05)},
        ),
        Profile(
            "bunched-watches",
            write=Latency(0.05),
            watch={"pods": Latency(0.3, 0.2), "resourceclaims": Latency(0.3, 0.2)},
        ),
        Profile(
            "slow-claims",
            write=Latency(0.02),
            writes={
                ("patch", "resourceclaims"): Latency(0.2, 0.1),
                ("update", "resourceclaims"): Latency(0.2, 0.1),
            },
        ),
        Profile("conflicts", write=Latency(0.02, 0.05), conflict_rate=0.1),
        # A bind made but answered 409 (as a retried bind is): Troupe reads the pod
        # back, finds it bound and forgets it, running Unreserve as kube-scheduler does.
        Profile("bind-conflicts", write=Latency(0.02, 0.05), bind_conflict_rate=0.1),
    )
}
