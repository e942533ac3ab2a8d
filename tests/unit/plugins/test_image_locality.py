"""ImageLocality (as image_locality_test.go's formula)."""

from __future__ import annotations

from scheduler.plugins.image_locality import ImageLocality
from tests.builders import make_node, make_pod, table_of
from tests.unit.plugins.conftest import make_handle, run_score

MB = 1024 * 1024


def test_prefers_the_node_with_the_larger_image() -> None:
    table = table_of(
        [
            make_node("node1").image("gcr.io/40", 40 * MB).image("gcr.io/300", 300 * MB).build(),
            make_node("node2").image("gcr.io/250", 250 * MB).build(),
            make_node("node3").build(),
        ]
    )
    pod = make_pod("p").image("gcr.io/40").container(image="gcr.io/250").build()
    got = run_score(ImageLocality.new({}, make_handle()), pod, table)
    # node1: 40MB * 1/3 -> below the 23MB threshold after spreading -> 0
    # node2: 250MB * 1/3 = 83.3MB; 100 * (83.3 - 23) / (2000 - 23) = 3
    assert got == {"node1": 0, "node2": 3, "node3": 0}


def test_image_on_every_node_counts_fully() -> None:
    table = table_of([make_node(f"n{i}").image("big", 1000 * MB).build() for i in range(2)])
    pod = make_pod("p").image("big").build()
    assert run_score(ImageLocality.new({}, make_handle()), pod, table) == {"n0": 100, "n1": 100}


def test_untagged_names_match_latest() -> None:
    table = table_of([make_node("n").image("nginx:latest", 500 * MB).build()])
    pod = make_pod("p").image("nginx").build()
    got = run_score(ImageLocality.new({}, make_handle()), pod, table)
    assert got == {"n": 100 * (500 * MB - 23 * MB) // (1000 * MB - 23 * MB)}


def test_skipped_when_no_node_has_the_images() -> None:
    table = table_of([make_node("n").build()])
    assert run_score(ImageLocality.new({}, make_handle()), make_pod("p").build(), table) is None
