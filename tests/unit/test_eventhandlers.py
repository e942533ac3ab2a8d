"""The event dispatch: each watched kind's events go to the handler its row of
`troupe.api.kinds.KINDS` names, for every version a reflector may watch."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from tests.builders import make_node
from troupe.api.kinds import KINDS, WATCHED, Kind
from troupe.api.types import GroupKey
from troupe.config import default_config
from troupe.core.clock import VirtualClock
from troupe.core.memory_cluster import InMemoryCluster
from troupe.core.scheduler import Scheduler
from troupe.plugins.registry import IN_TREE


def scheduler() -> Scheduler:
    return Scheduler(default_config(IN_TREE), InMemoryCluster(), VirtualClock(), registry=IN_TREE)


def test_every_reflector_has_a_handler_in_the_table_order() -> None:
    assert list(scheduler().events.handlers()) == list(WATCHED)


@pytest.mark.parametrize(
    "kind", [k for k in KINDS if k.watched], ids=lambda k: k.key(k.versions[0])
)
def test_a_kind_goes_to_the_handler_its_row_names(kind: Kind) -> None:
    handlers = scheduler().events.handlers()
    for key in kind.keys:
        h: Any = handlers[key]
        if isinstance(h, functools.partial):  # a handler of several kinds, told which
            assert h.args == (kind.kind,)
            h = h.func
        assert h.__name__ == kind.handler


def test_an_unwatched_kind_has_no_handler() -> None:
    (template,) = [k for k in KINDS if k.kind == "ResourceClaimTemplate"]
    with pytest.raises(ValueError, match="ResourceClaimTemplate is not watched"):
        scheduler().events.handler(template)


def test_objects_delivered_by_key_reach_their_stores() -> None:
    s = scheduler()
    handlers = s.events.handlers()
    handlers["Node"](make_node("n1").obj(), False)
    handlers["DeviceClass"](
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"}},
        False,
    )
    native = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
    }
    handlers["PodGroup.scheduling.k8s.io/v1alpha2"](native, False)
    assert s.cache.node("n1") is not None
    assert s.cache.devices.device_class("gpu") is not None
    key = GroupKey("scheduling.k8s.io/default/train")
    assert s.cache.pod_group(key) is not None
    handlers["PodGroup.scheduling.k8s.io/v1alpha2"](native, True)
    assert s.cache.pod_group(key) is None
    assert not s.invalid
