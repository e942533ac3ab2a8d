"""ImageLocality (cases and expected scores from kube-scheduler's
image_locality_test.go)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from tests.builders import PodBuilder, make_node, make_pod, table_of
from tests.unit.plugins.conftest import make_handle, run_score
from troupe.api.parse import normalized_image_name, parse_node
from troupe.api.types import InvalidObject, Node
from troupe.core.snapshot import NodeTable
from troupe.framework.cycle_state import CycleState
from troupe.plugins.image_locality import ImageLocality, pod_images

MB = 1024 * 1024


def image_node(name: str, *images: tuple[list[str], int]) -> Node:
    obj = make_node(name).obj()
    obj["status"]["images"] = [{"names": names, "sizeBytes": size} for names, size in images]
    n = parse_node(obj)
    assert not isinstance(n, InvalidObject), n.message
    return n


NODE_40_300_2000 = [
    (["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"], 40 * MB),
    (["gcr.io/300:latest", "gcr.io/300:v1"], 300 * MB),
    (["gcr.io/2000:latest"], 2000 * MB),
]
NODE_250_10 = [(["gcr.io/250:latest"], 250 * MB), (["gcr.io/10:latest", "gcr.io/10:v1"], 10 * MB)]
NODE_600_40_900 = [
    (["gcr.io/600:latest"], 600 * MB),
    (["gcr.io/40:latest"], 40 * MB),
    (["gcr.io/900:latest"], 900 * MB),
]
NODE_300_600_900 = [
    (["gcr.io/300:latest"], 300 * MB),
    (["gcr.io/600:latest"], 600 * MB),
    (["gcr.io/900:latest"], 900 * MB),
]
NODE_4000_30 = [(["gcr.io/4000:latest"], 4000 * MB), (["gcr.io/30:latest"], 30 * MB)]
NODE_20_30_40 = [
    (["gcr.io/20:latest"], 20 * MB),
    (["gcr.io/30:latest"], 30 * MB),
    (["gcr.io/40:latest"], 40 * MB),
]


def pod(*images: str) -> PodBuilder:
    p = make_pod("p").image(images[0])
    for image in images[1:]:
        p.container(image)
    return p


@pytest.mark.parametrize(
    ("pod", "nodes", "want"),
    [
        pytest.param(
            # node1: 40M * 1/2 < 23M -> 0; node2: 100 * (250M/2 - 23M) / (1000M*2 - 23M) = 5
            pod("gcr.io/40", "gcr.io/250"),
            [("node1", NODE_40_300_2000), ("node2", NODE_250_10)],
            {"node1": 0, "node2": 5},
            id="upstream: two images spread on two nodes, prefer the larger image one",
        ),
        pytest.param(
            # node1: 100 * ((40M + 300M)/2 - 23M) / (1000M*2 - 23M) = 7
            pod("gcr.io/40", "gcr.io/300"),
            [("node1", NODE_40_300_2000), ("node2", NODE_250_10)],
            {"node1": 7, "node2": 0},
            id="upstream: two images on one node, prefer this node",
        ),
        pytest.param(
            # node1: 4000M/2 >= 1000M*2 -> 100; node2: 10M/2 < 23M -> 0
            pod("gcr.io/10", "gcr.io/4000"),
            [("node1", NODE_4000_30), ("node2", NODE_250_10)],
            {"node1": 100, "node2": 0},
            id="upstream: if exceed limit, use limit",
        ),
        pytest.param(
            # node1: 100 * (4000M/3 - 23M) / (1000M*2 - 23M) = 66
            pod("gcr.io/10", "gcr.io/4000"),
            [("node1", NODE_4000_30), ("node2", NODE_250_10), ("node3", [])],
            {"node1": 66, "node2": 0, "node3": 0},
            id="upstream: if exceed limit, use limit (with node which has no images present)",
        ),
        pytest.param(
            # node1: 100 * (600M*2/3 + 900M*2/3 - 23M) / (1000M*3 - 23M) = 32
            # node2: 100 * (300M/3 + 600M*2/3 + 900M*2/3 - 23M) / (1000M*3 - 23M) = 36
            pod("gcr.io/300", "gcr.io/600", "gcr.io/900"),
            [("node1", NODE_600_40_900), ("node2", NODE_300_600_900), ("node3", [])],
            {"node1": 32, "node2": 36, "node3": 0},
            id="upstream: pod with multiple large images, node2 is preferred",
        ),
        pytest.param(
            # node1: 100 * (30M + 40M/2 - 23M) / (1000M*2 - 23M) = 1; node2: 30M/2 -> 0
            pod("gcr.io/30", "gcr.io/40"),
            [("node1", NODE_20_30_40), ("node2", NODE_4000_30)],
            {"node1": 1, "node2": 0},
            id="upstream: pod with multiple small images",
        ),
        pytest.param(
            # node1: 100 * (300M/2 - 23M) / (1000M*2 - 23M) = 6 (two containers)
            pod("gcr.io/30").spec(initContainers=[{"name": "i", "image": "gcr.io/300"}]),
            [("node1", NODE_40_300_2000), ("node2", NODE_20_30_40)],
            {"node1": 6, "node2": 0},
            id="upstream: include InitContainers: two images spread on two nodes, "
            "prefer the larger one",
        ),
        pytest.param(
            # the same image twice counts twice: 100 * (2 * 2000M/2 - 23M) / (2000M*2 - 23M)
            pod("gcr.io/2000", "gcr.io/2000:latest"),
            [("node1", NODE_40_300_2000), ("node2", NODE_250_10)],
            {"node1": 100 * (2 * 1000 * MB - 23 * MB) // (2000 * MB - 23 * MB), "node2": 0},
            id="an image used by two containers counts twice",
        ),
    ],
)
def test_score(
    pod: PodBuilder, nodes: list[tuple[str, list[tuple[list[str], int]]]], want: dict[str, int]
) -> None:
    table = table_of([image_node(name, *images) for name, images in nodes])
    assert run_score(ImageLocality.new({}, make_handle()), pod.build(), table) == want


def test_skip_when_no_node_has_an_image() -> None:
    table = table_of([image_node("node1", *NODE_250_10)])
    assert (
        run_score(ImageLocality.new({}, make_handle()), pod("gcr.io/nope").build(), table) is None
    )


def test_scores_only_the_given_rows_in_their_order() -> None:
    nodes = [image_node(f"n{i}", *(NODE_4000_30 if i % 3 == 0 else [])) for i in range(9)]
    table = table_of(nodes)
    plugin = ImageLocality.new({}, make_handle())
    p = pod("gcr.io/4000").build()
    state = CycleState()
    rows = np.array([4, 3, 8, 0], dtype=np.intp)
    assert plugin.pre_score(state, p, table, rows).is_success
    # 4000M * 3/9 -> clamped at 1000M for one container -> 100
    assert plugin.score(state, p, table, rows).tolist() == [0, 100, 0, 100]


def test_removed_node_no_longer_scores() -> None:
    table = table_of([image_node("a", *NODE_4000_30), image_node("b", *NODE_4000_30)])
    table.clear_row(table.row_of["a"])
    got = run_score(ImageLocality.new({}, make_handle()), pod("gcr.io/4000").build(), table)
    assert got == {"b": 100}


def fake_digest(content: str) -> str:
    """image_locality_test.go's getImageFakeDigest."""
    return "sha256:" + hashlib.sha256(content.encode()).hexdigest()


@pytest.mark.parametrize(
    ("image", "want"),
    [
        pytest.param("root", "root:latest", id="add :latest postfix 1"),
        pytest.param("gcr.io:5000/root", "gcr.io:5000/root:latest", id="add :latest postfix 2"),
        pytest.param("root:tag", "root:tag", id="keep it as is 1"),
        pytest.param(
            "root@" + fake_digest("root"), "root@" + fake_digest("root"), id="keep it as is 2"
        ),
    ],
)
def test_normalized_image_name(image: str, want: str) -> None:
    """TestNormalizedImageName: one function normalizes the pod's images and the node's."""
    assert normalized_image_name(image) == want


def test_pod_images_count_init_containers() -> None:
    p = pod("a", "b:1").spec(initContainers=[{"name": "i", "image": "reg:5000/c"}]).build()
    assert pod_images(p) == (("reg:5000/c:latest", "a:latest", "b:1"), 3)


def test_a_container_without_an_image_counts() -> None:
    # as Score's len(InitContainers) + len(Containers): the threshold is per container
    p = pod("a").spec(initContainers=[{"name": "i"}]).build()
    assert pod_images(p) == (("a:latest",), 2)


def test_untagged_names_on_the_node_and_in_the_pod_meet() -> None:
    table = table_of([image_node("a", (["gcr.io:5000/big"], 2000 * MB)), image_node("b")])
    p = pod("gcr.io:5000/big", "gcr.io:5000/big:latest").build()
    got = run_score(ImageLocality.new({}, make_handle()), p, table)
    # 2000M on one of two nodes, twice: 2 x 1000M for two containers -> 100
    assert got == {"a": 100, "b": 0}


def test_takes_no_arguments() -> None:
    with pytest.raises(ValueError, match="no arguments"):
        ImageLocality.new({"x": 1}, make_handle())


def reference(table: NodeTable, images: list[str]) -> dict[str, int]:
    """image_locality.go, one node at a time."""
    total = table.num_nodes
    out = {}
    for row in table.valid_rows().tolist():
        acc = 0
        for image in images:
            by_row = table.image_index.get(image, {})
            if row in by_row:
                acc += int(float(by_row[row]) * (len(by_row) / total))
        hi = 1000 * MB * len(images)
        acc = min(max(acc, 23 * MB), hi)
        out[table.names[row]] = 100 * (acc - 23 * MB) // (hi - 23 * MB)
    return out


def test_widespread_images_follow_table_changes() -> None:
    # 400 nodes hold the big image (read through the per-image row cache), a few
    # the small one (read from the index); the same plugin instance scores the same
    # table across "cycles" while nodes change.
    def images(i: int) -> list[tuple[list[str], int]]:
        out = [(["base:1"], (500 + i % 7 * 200) * MB)] if i % 5 else []
        return out + ([(["tool:latest"], 800 * MB)] if i % 50 == 0 else [])

    table = table_of([image_node(f"n{i}", *images(i)) for i in range(500)])
    plugin = ImageLocality.new({}, make_handle())
    p = pod("base:1", "tool").build()
    assert run_score(plugin, p, table) == reference(table, ["base:1", "tool:latest"])

    table.set_node(table.row_of["n1"], image_node("n1", (["base:1"], 3000 * MB)))
    table.set_node(table.row_of["n2"], image_node("n2"))
    table.set_node(table.row_of["n5"], image_node("n5", (["base:1"], 100 * MB)))
    table.clear_row(table.row_of["n3"])
    table.set_node(table.allocate_row("new"), image_node("new", (["base:1"], 900 * MB)))
    assert run_score(plugin, p, table) == reference(table, ["base:1", "tool:latest"])

    # Sizes move but no node gains or loses the image (same spread): only the
    # rows that moved are scaled again.
    table.set_node(table.row_of["n1"], image_node("n1", (["base:1"], 40 * MB)))
    table.set_node(table.row_of["n6"], image_node("n6", (["base:1"], 2000 * MB)))
    assert run_score(plugin, p, table) == reference(table, ["base:1", "tool:latest"])

    for i in range(100, 300):  # many rows change: the cache is rebuilt
        table.set_node(table.row_of[f"n{i}"], image_node(f"n{i}", (["base:1"], 50 * MB)))
    assert run_score(plugin, p, table) == reference(table, ["base:1", "tool:latest"])
    fresh = ImageLocality.new({}, make_handle())
    assert run_score(fresh, p, table) == run_score(plugin, p, table)


def test_small_images_everywhere_score_zero_until_a_node_gets_a_big_one() -> None:
    # Every node has the pod's images but too small to pass the 23 MiB floor: all
    # score 0 without arrays (largest size per image, kept while the index's
    # version holds); a node given a big image, or one removed, is seen at once.
    table = table_of(
        [image_node(f"n{i}", (["pause:3"], MB), (["app:1"], 20 * MB)) for i in range(300)]
    )
    plugin = ImageLocality.new({}, make_handle())
    p = pod("pause:3", "app:1").build()
    state = CycleState()
    assert plugin.pre_score(state, p, table, table.valid_rows()).is_success
    assert plugin._all_zero(table, ("pause:3", "app:1"))
    assert run_score(plugin, p, table) == reference(table, ["pause:3", "app:1"])
    assert set(reference(table, ["pause:3", "app:1"]).values()) == {0}

    table.set_node(table.row_of["n7"], image_node("n7", (["app:1"], 4000 * MB)))
    assert not plugin._all_zero(table, ("pause:3", "app:1"))
    got = run_score(plugin, p, table)
    assert got == reference(table, ["pause:3", "app:1"])
    assert got is not None and got["n7"] > 0

    table.clear_row(table.row_of["n7"])
    assert plugin._all_zero(table, ("pause:3", "app:1"))
    assert run_score(plugin, p, table) == reference(table, ["pause:3", "app:1"])
