"""End-to-end figure: pods/s from creation to bound, with `troupe run` started as
users start it, against the embedded API server.

    python -m bench.e2e [--nodes 5000] [--pods 10000] [--replicas 2]
                             [--runs 2] [--profile DIR] [--quick]

The API server (apiserver) serves from a thread of this process; Troupe
is a child process (`python -m troupe run --kubeconfig F`, see
apiserver/replica.py) with `--qps 5000 --burst 5000`, so the server's
CPU is not Troupe's. Nodes are created before Troupe starts; the clock starts
when the first pod is created and stops when the server has accepted the last
binding. Reported per run:

- pods/s end to end (creation of the first pod to the last binding);
- Troupe's CPU per pod: the leader's user+system time (/proc/PID/stat) from
  the first creation until the last binding *and* the last pod's Scheduled
  Event reached the server, divided by the pods;
- the scheduling cycle's share of it: the sum of
  `scheduler_scheduling_attempt_duration_seconds` (the algorithm, Reserve and
  Permit of each attempt) from the leader's /metrics, per pod and as a share
  of the CPU time;
- Lease renewals under that load: every successful write of the Lease by the
  leader as the server saw it; the largest gap between two (the renewals
  are `retryPeriod` apart when nothing delays them), and between the
  renewTimes the leader wrote (a late elector, rather than a late answer);
  whether the Lease's holder ever changed or a non-leader wrote a binding (with `--replicas 2` a
  standby runs too, watching everything as the leader does).

With `--profile DIR`, py-spy samples the leader during the window (raw folded
stacks in DIR, then a breakdown by where the time went; see bench/spy.py).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from apiserver import ApiServer
from apiserver.replica import Troupe, metrics_reader, until
from apiserver.server import WriteRecord
from bench import spy, workloads

CLK_TCK = os.sysconf("SC_CLK_TCK")
QPS = 5000
BURST = 5000


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def metric_sum(t: Troupe, name: str) -> float:
    """The sum of all samples named `name` (every label set)."""
    from prometheus_client.parser import text_string_to_metric_families

    status, text = t.http("/metrics")
    if status != 200:
        return float("nan")
    families = text_string_to_metric_families(text)
    return sum(s.value for fam in families for s in fam.samples if s.name == name)


class LeaseWatch:
    """Every successful Lease write as the server saw it: when, by whom, and the
    holder the Lease names afterwards (read on the server's loop, in order),
    with the renewTime the writer put in it: the elector's clock when its
    renewal began. A long gap between two server times with renewTimes
    `retryPeriod` apart was a late answer (the server, or the network); a
    long gap in renewTimes was the elector starting late."""

    def __init__(self, srv: ApiServer) -> None:
        self.srv = srv
        self.renewals: list[tuple[float, str, str]] = []  # (time, writer, holder)
        self.renew_times: list[tuple[float, float]] = []  # (server time, spec.renewTime)
        self.bind_writers: set[str] = set()
        self.events = 0  # Events created or patched
        srv.on_write = self._on_write

    def _on_write(self, w: WriteRecord) -> None:
        if w.status >= 300:
            return
        if w.verb == "bind":
            self.bind_writers.add(w.user_agent)
            return
        if w.plural == "events":
            self.events += 1
            return
        if w.plural != "leases" or w.name is None:
            return
        res = self.srv.store.resolve("leases")
        obj = self.srv.store.get(res, w.namespace, w.name)
        spec = (obj or {}).get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        self.renewals.append((w.time, w.user_agent, holder))
        renew = str(spec.get("renewTime") or "")
        if renew:
            at = datetime.datetime.fromisoformat(renew.replace("Z", "+00:00")).timestamp()
            self.renew_times.append((w.time, at))

    def holder(self) -> str:
        return self.renewals[-1][2] if self.renewals else ""

    def largest_gap(self, since: float, until_: float) -> float:
        times = [t for t, _, _ in self.renewals if since <= t <= until_]
        return max((b - a for a, b in itertools.pairwise(times)), default=float("nan"))

    def largest_renew_time_gap(self, since: float, until_: float) -> float:
        """The largest gap between the renewTimes written (the elector's clock)."""
        times = [r for t, r in self.renew_times if since <= t <= until_]
        return max((b - a for a, b in itertools.pairwise(times)), default=float("nan"))

    def renewals_since(self, since: float) -> int:
        return sum(1 for t, _, _ in self.renewals if t >= since)

    def holders(self, since: float) -> set[str]:
        return {h for t, _, h in self.renewals if t >= since}


def run(
    nodes: int,
    pods: int,
    *,
    replicas: int = 1,
    profile: Path | None = None,
    config: Mapping[str, Any] | None = None,
    timeout: float = 900.0,
    min_renewals: int = 0,
) -> dict[str, Any]:
    srv = ApiServer(podgroups=True)
    with srv.start_in_thread(), tempfile.TemporaryDirectory(prefix="troupe-e2e-") as tmp:
        work = Path(tmp)
        for i in range(nodes):
            srv.create(workloads.node(i))
        leases = LeaseWatch(srv)
        kubeconfig = srv.write_kubeconfig(work / "kubeconfig")
        reader = metrics_reader(srv)  # /metrics is read as Prometheus would, with a token
        troupes = [
            Troupe(
                work,
                kubeconfig=kubeconfig,
                identity=f"troupe-{i}",
                config=config,
                args=(f"--qps={QPS}", f"--burst={BURST}"),
                token=reader,
            ).start()
            for i in range(replicas)
        ]
        try:
            for t in troupes:
                t.wait_ready(120)
            leader_id = until(leases.holder, 60, "a leader")
            leader = next(t for t in troupes if t.identity == leader_id)
            assert leader.proc is not None
            pid = leader.proc.pid
            until(
                lambda: leader.metric("leader_election_master_status") == 1, 30, "leader schedules"
            )
            time.sleep(1.0)  # let the Lease settle into its renewal rhythm
            spy_proc = spy.record(pid, profile) if profile is not None else None
            cpu0 = cpu_seconds(pid)
            cyc0 = metric_sum(leader, "scheduler_scheduling_attempt_duration_seconds_sum")
            t0 = time.time()
            m0 = time.monotonic()
            for i in range(pods):
                srv.create(workloads.pod(i))
            created = time.monotonic() - m0
            until(lambda: srv.binds >= pods, timeout, f"{pods} pods bound")
            elapsed = time.monotonic() - m0
            # However fast the binds went, the Lease is watched for `min_renewals`
            # renewals from the start of the load (what a fast machine binds
            # within one retryPeriod would otherwise show a single renewal).
            until(
                lambda: leases.renewals_since(t0) >= min_renewals,
                60,
                f"{min_renewals} Lease renewals",
            )
            t1 = time.time()
            # The Scheduled Events trail the binds: count their CPU too.
            until(lambda: leases.events >= pods, 120, f"{pods} Scheduled events")
            settled = time.monotonic() - m0
            cpu = cpu_seconds(pid) - cpu0
            cyc = metric_sum(leader, "scheduler_scheduling_attempt_duration_seconds_sum") - cyc0
            if spy_proc is not None:
                spy.stop(spy_proc)
            time.sleep(0.5)
            holders = leases.holders(t0)
            result = {
                "nodes": nodes,
                "pods": pods,
                "replicas": replicas,
                "bound": srv.binds,
                "create_seconds": round(created, 2),
                "seconds": round(elapsed, 2),
                "pods_per_s": round(pods / elapsed, 1),
                "events_done_seconds": round(settled, 2),
                "cpu_ms_per_pod": round(1000 * cpu / pods, 3),
                "cpu_share_of_wall": round(cpu / settled, 2),
                "cycle_ms_per_pod": round(1000 * cyc / pods, 3),
                "cycle_share_of_cpu": round(cyc / cpu, 3) if cpu else None,
                "lease_renewals": sum(1 for t, _, _ in leases.renewals if t0 <= t <= t1),
                "lease_largest_gap_s": round(leases.largest_gap(t0, t1), 3),
                "lease_largest_renew_time_gap_s": round(leases.largest_renew_time_gap(t0, t1), 3),
                "lease_holders": sorted(holders),
                "bind_writers": sorted(leases.bind_writers),
                "event_writes": leases.events,
            }
        finally:
            for t in troupes:
                if t.running:
                    t.stop(60)
    if profile is not None:
        result["profile"] = spy.breakdown(profile / f"troupe-{pid}.txt")
    return result


def show(r: Mapping[str, Any]) -> str:
    return (
        f"{r['bound']}/{r['pods']} pods on {r['nodes']} nodes ({r['replicas']} replica(s)): "
        f"{r['seconds']}s = {r['pods_per_s']} pods/s end to end (created in "
        f"{r['create_seconds']}s); Troupe CPU "
        f"{r['cpu_ms_per_pod']} ms/pod "
        f"(until the last Event, at {r['events_done_seconds']}s; "
        f"{r['cpu_share_of_wall']} cores), scheduling cycle "
        f"{r['cycle_ms_per_pod']} ms/pod ({100 * (r['cycle_share_of_cpu'] or 0):.0f}% of CPU); "
        f"Lease: {r['lease_renewals']} renewals, largest gap {r['lease_largest_gap_s']}s "
        f"(renewTimes: {r['lease_largest_renew_time_gap_s']}s), "
        f"holders {r['lease_holders']}; writes: {r['bound']} bindings, "
        f"{r['event_writes']} Event creates/patches"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="2000 pods on 500 nodes, one replica")
    ap.add_argument("--profile", type=Path, help="py-spy the leader; folded stacks go here")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.nodes, args.pods, args.replicas = 500, 2000, 1
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    for _ in range(args.runs):
        r = run(args.nodes, args.pods, replicas=args.replicas, profile=args.profile)
        print(json.dumps(r) if args.json else "e2e: " + show(r))
        if not args.json and "profile" in r:
            print(spy.show(r["profile"]))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
