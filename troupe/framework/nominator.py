"""Nominated pods: pods that preempted others and wait for the room they freed.

As kube-scheduler's nominator (backend/queue/nominator.go): a pod's nomination
comes from its `status.nominatedNodeName` (set by us after a preemption, or read
back from the API) and ends when the pod is bound, deleted, or the nomination
is cleared. Filter counts the nominated pods of equal or higher priority on a
node as if they ran there (the two-pass filter of kube-scheduler's
RunFilterPluginsWithNominatedPods), so that no lower-priority pod takes the
room a preemption freed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from troupe.api.types import NodeName, Pod, PodKey

if TYPE_CHECKING:
    from troupe.core.snapshot import NodeTable


class Nominator:
    def __init__(self) -> None:
        self._node_of: dict[PodKey, NodeName] = {}
        self._by_node: dict[NodeName, dict[PodKey, Pod]] = {}

    def add(self, pod: Pod, node: str) -> None:
        """Nominate `pod` to `node` (replacing any earlier nomination)."""
        self.delete(pod.key)
        name = NodeName(node)
        self._node_of[pod.key] = name
        self._by_node.setdefault(name, {})[pod.key] = pod

    def update(self, pod: Pod) -> None:
        """A newer version of a nominated pod (its priority or requests may change)."""
        node = self._node_of.get(pod.key)
        if node is not None:
            self._by_node[node][pod.key] = pod

    def delete(self, key: PodKey) -> NodeName | None:
        node = self._node_of.pop(key, None)
        if node is not None:
            on_node = self._by_node[node]
            on_node.pop(key, None)
            if not on_node:
                del self._by_node[node]
        return node

    def node_of(self, key: PodKey) -> NodeName | None:
        return self._node_of.get(key)

    def pods_on(self, node: str) -> list[Pod]:
        return list(self._by_node.get(NodeName(node), {}).values())

    def nodes(self) -> Iterator[NodeName]:
        return iter(self._by_node)

    def __len__(self) -> int:
        return len(self._node_of)

    def __contains__(self, key: object) -> bool:
        return key in self._node_of


def nominated_rows(
    nominator: Nominator, nodes: NodeTable, pod: Pod, placed: Callable[[PodKey], bool]
) -> dict[int, list[Pod]]:
    """Per row of `nodes`, the pods nominated there with priority equal to or
    above `pod`'s that the row does not hold yet and that are not placed
    (assumed or bound) elsewhere: what kube-scheduler's addGENominatedPods adds
    for Filter's first pass."""
    if not len(nominator):
        return {}
    out: dict[int, list[Pod]] = {}
    for node in nominator.nodes():
        row = nodes.row_of.get(node)
        if row is None:
            continue
        on_row = nodes.pods[row]
        for p in nominator.pods_on(node):
            if p.key == pod.key or p.priority < pod.priority or p.key in on_row:
                continue
            if placed(p.key):
                continue
            out.setdefault(row, []).append(p)
    return out
