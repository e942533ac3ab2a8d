"""The HTML report (`troupe simulate -o html`) as an operator keeps it: node
names and units on every heat-map cell, one map per resource switched without
script, colour steps that differ, totals per zone and rack, provenance, the
placements table, and `--compare`'s figures side by side. Run on the demo
cluster (zones, racks, a node with isolated CPUs, DRA GPUs)."""

from __future__ import annotations

import asyncio
import copy
import html
import re
from pathlib import Path
from typing import Any, Final

import pytest

from troupe import __version__
from troupe.cli import main
from troupe.config import default_config, parse_config
from troupe.plugins.registry import IN_TREE
from troupe.tools.compare import compare
from troupe.tools.report import (
    STEP_NAMES,
    STEPS,
    Provenance,
    _heat,
    _step,
    render_compare_html,
    render_html,
)
from troupe.tools.simulate import Simulation, SimulationResult, load_objects

DEMO = str(Path(__file__).parent.parent.parent / "manifests" / "examples" / "demo-cluster.yaml")
NODES = ("worker-a1", "worker-a2", "worker-b1", "gpu-b1", "rt-a1")
MAPS = ("cpu", "memory", "isolated CPUs", "nvidia.com/gpu", "devices: gpu.example.com", "pods")


def demo(strategy: str | None = None) -> tuple[SimulationResult, list[dict[str, Any]]]:
    objects = load_objects([DEMO])
    if strategy is None:
        config = default_config(IN_TREE)
    else:
        config = parse_config(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "profiles": [
                    {
                        "schedulerName": "troupe-scheduler",
                        "pluginConfig": [
                            {
                                "name": "NodeResourcesFit",
                                "args": {"scoringStrategy": {"type": strategy}},
                            }
                        ],
                    }
                ],
            },
            IN_TREE,
        )
    return asyncio.run(Simulation(copy.deepcopy(objects), config).run()), objects


@pytest.fixture(scope="module")
def page() -> str:
    result, objects = demo()
    prov = Provenance(
        ("cluster.yaml", "pods.yaml"), ("proposed.yaml",), 7, time="2026-11-28T10:00:00Z"
    )
    return render_html(result, objects, prov)


def maps(page: str) -> dict[str, str]:
    """Each resource's map by its switch's label."""
    labels = re.findall(r'<label for="a-r(\d+)">([^<]*)</label>', page)
    out = {}
    for i, title in labels:
        start = page.index(f'<div class="map m{i}">')
        end = page.find('<div class="map m', start + 1)
        out[html.unescape(title)] = page[start : end if end > 0 else page.index("<h2>Totals")]
    return out


def cell(map_html: str, node: str) -> str:
    """A node's cell: its style, then what it says."""
    m = re.search(
        rf'<div class="cell" style="([^"]*)" title="{node}"><b>{node}</b>(.*?)</div>', map_html
    )
    assert m, f"no cell for {node}"
    return m.group(1) + " :: " + m.group(2)


def test_the_page_is_self_contained_and_script_free(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page and "http" not in page and " on" + "click" not in page


def test_every_resource_has_a_map_with_every_node_named(page: str) -> None:
    by_title = maps(page)
    assert tuple(by_title) == MAPS
    for title, body in by_title.items():
        for node in NODES:
            assert f'title="{node}"><b>{node}</b>' in body, (title, node)
    # the first map (cpu) is shown; one :checked rule per map selects the others
    assert page.count('type="radio" name="a-use"') == len(MAPS)
    assert page.count(" checked>") == 1 and 'id="a-r0" checked' in page
    for i in range(len(MAPS)):
        assert f".switch>input:nth-of-type({i + 1}):checked~.m{i}" in page
    # printed, every map shows
    assert "@media print{.switch>.map{display:block}" in page


def test_cells_carry_values_with_units_and_percentages(page: str) -> None:
    by_title = maps(page)
    assert "3 / 8 cores<br>38 %" in cell(by_title["cpu"], "rt-a1")
    assert "8.2 / 16 cores<br>51 %" in cell(by_title["cpu"], "gpu-b1")
    assert "9Gi / 32Gi<br>28 %" in cell(by_title["memory"], "rt-a1")
    assert "2.5Gi / 16Gi<br>16 %" in cell(by_title["memory"], "worker-b1")
    # rt-a1's isolated CPUs, all taken; nodes without any say so
    assert "4 / 4 CPUs<br>100 %" in cell(by_title["isolated CPUs"], "rt-a1")
    assert cell(by_title["isolated CPUs"], "worker-a1").endswith(":: none")
    # the GPUs of the DeviceClass that selects the driver, per node
    assert "2 / 2 devices<br>100 %" in cell(by_title["devices: gpu.example.com"], "gpu-b1")
    assert "5 / 110 pods<br>5 %" in cell(by_title["pods"], "rt-a1")
    assert "9663676416" not in page  # rt-a1's memory requested, never in raw bytes


def test_colour_steps_tell_half_from_three_quarters(page: str) -> None:
    assert len(set(STEPS)) == len(STEPS) == len(STEP_NAMES)
    assert _step(0.5) != _step(0.75) and _step(0.0) == 0 and _step(1.0) == 5
    assert _step(0.99) == 4 and _step(1.2) == 5
    assert _heat(1.0) == "rgb(68,1,84)" and _heat(0.0) == "rgb(253,231,37)"
    cpu = maps(page)["cpu"]
    assert f"background:{STEPS[5]};color:#fff" in cell(cpu, "worker-a1")  # 100 %
    assert f"background:{STEPS[2]};color:#111" in cell(cpu, "worker-a2")  # 50 %
    # the legend names each step's range
    for colour, name in zip(STEPS, STEP_NAMES, strict=True):
        assert f'<span style="background:{colour}"></span>{name}' in cpu


def test_totals_per_zone_and_rack(page: str) -> None:
    table = page[page.index('<table class="totals">') :].split("</table>")[0]
    rows = [re.sub(r"<[^>]+>", "|", r) for r in table.split("</tr>")]
    zone_a = next(r for r in rows if "|zone-a||all|" in r)
    assert "9 / 16 cores (56 %)" in zone_a and "4 / 4 CPUs (100 %)" in zone_a
    assert "21Gi / 64Gi (33 %)" in zone_a and "|3|" in zone_a
    rack_a1 = next(r for r in rows if "|rack-a1|" in r)
    assert "6 / 8 cores (75 %)" in rack_a1 and "|2|" in rack_a1
    cluster = next(r for r in rows if "|cluster|" in r)
    assert "18.4 / 36 cores (51 %)" in cluster and "4 / 4 devices (100 %)" in cluster
    assert "14 / 550 pods (3 %)" in cluster


def test_provenance(page: str) -> None:
    prov = page[page.index('<table class="prov">') :].split("</table>")[0]
    assert "<td>input files</td><td>cluster.yaml<br>pods.yaml</td>" in prov
    assert "<td>configuration</td><td>proposed.yaml</td>" in prov
    assert "<td>seed</td><td>7</td>" in prov
    assert f"<td>Troupe version</td><td>{__version__}</td>" in prov
    assert "<td>generated (UTC)</td><td>2026-11-28T10:00:00Z</td>" in prov
    # without one: the default profile, the version, the time of rendering
    result, objects = demo()
    bare = render_html(result, objects)
    assert "<td>configuration</td><td>default profile</td>" in bare
    assert re.search(r"<td>generated \(UTC\)</td><td>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ</td>", bare)


def test_placements_table(page: str) -> None:
    table = page[page.index('<table class="placements">') :].split("</table>")[0]
    assert "<tr><td>net/packet-processor</td><td>rt-a1</td><td>zone-a</td><td>rack-a2</td>" in table
    assert "<td>shop/huge</td><td>-</td><td>-</td><td>-</td><td>pending</td>" in table
    assert "<td>gpu.example.com/gpu-b1/gpu-0</td>" in table  # a claim's device
    assert table.count("<tr>") == 1 + 19  # the head and every pod


def test_compare_shows_both_runs_figures_side_by_side() -> None:
    (a, objects), (b, _) = demo("LeastAllocated"), demo("MostAllocated")
    names = ("least", "most")
    diff = compare(a, b, names)
    page = render_compare_html(
        [a, b], names, diff, objects, Provenance(("demo.yaml",), ("least.yaml", "most.yaml"))
    )
    assert "<script" not in page
    assert "<td>configuration</td><td>least: least.yaml<br>most: most.yaml</td>" in page
    counts = page[page.index('<table class="counts">') :].split("</table>")[0]
    assert '<td>pods placed</td><td class="num">14</td><td class="num">14</td>' in counts
    assert '<td>pods pending</td><td class="num">5</td><td class="num">5</td>' in counts
    # use per node under both runs, bold where they differ
    rt = page[page.index("<tr><td>rt-a1</td>") :].split("</tr>")[0]
    assert "<td>zone-a</td><td>rack-a2</td><td>least<br>most</td>" in rt
    assert '<td class="num chg">3 / 8 cores (38 %)<br>0 / 8 cores (0 %)</td>' in rt
    assert '<td class="num">4 / 4 CPUs (100 %)<br>4 / 4 CPUs (100 %)</td>' in rt
    # per zone and rack
    assert "<tr><td>zone-a</td><td>rack-a1</td><td>least<br>most</td>" in page
    # pods moved, with where they went
    assert f"placed on other nodes ({len(diff['moved'])})" in page and diff["moved"]
    assert (
        "<tr><td>shop/web-0</td><td>rt-a1 (zone-a / rack-a2)</td>"
        "<td>worker-b1 (zone-b / rack-b1)</td></tr>"
    ) in page
    assert "placed under least only (0)" in page
    # both runs in full, each with its own switch
    assert page.count('name="run0-use"') == page.count('name="run1-use"') == len(MAPS)


def test_the_cli_names_its_inputs_on_the_page(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", DEMO, "-o", "html", "--seed", "3"]) == 0
    page = capsys.readouterr().out
    assert f"<td>input files</td><td>{html.escape(DEMO)}</td>" in page
    assert "<td>configuration</td><td>default profile</td>" in page
    assert "<td>seed</td><td>3</td>" in page


def one_node_run(placed: bool) -> SimulationResult:
    """A node n1 (zone z, rack r), a pod on it, and a pod placed only if `placed`."""
    cpu = 3 if placed else 1
    nodes: dict[str, dict[str, dict[str, float | int]]] = {
        "n1": {"cpu": {"requested": cpu, "allocatable": 4}}
    }
    pods = {
        "ns/a": {"node": "n1", "reason": None, "preemptedBy": None},
        "ns/b": {
            "node": "n1" if placed else None,
            "reason": None if placed else "0/1 nodes are available: 1 Insufficient cpu.",
            "preemptedBy": None,
        },
    }
    quotas: dict[str, dict[str, dict[str, float | int]]] = {
        "ns/q": {"min": {"memory": 2**30}, "max": {"memory": 4 * 2**30}, "used": {"memory": 2**31}}
    }
    return SimulationResult(pods, {}, nodes, 1.0, 2, elastic_quotas=quotas)


NODE_N1: Final = {
    "kind": "Node",
    "metadata": {
        "name": "n1",
        "labels": {"topology.kubernetes.io/zone": "z", "troupe.dev/rack": "r"},
    },
}


def test_compare_names_pods_pending_under_one_run_only() -> None:
    a, b = one_node_run(True), one_node_run(False)
    diff = compare(a, b, ("a", "b"))
    page = render_compare_html([a, b], ("a", "b"), diff, [NODE_N1])
    assert "placed under a only (1)" in page and "placed under b only (0)" in page
    assert (
        "<tr><td>ns/b</td><td>n1 (z / r)</td>"
        "<td>0/1 nodes are available: 1 Insufficient cpu.</td></tr>"
    ) in page
    counts = page[page.index('<table class="counts">') :].split("</table>")[0]
    assert (
        '<tr class=chg><td>pods pending</td><td class="num">0</td><td class="num">1</td>'
        '<td class="num">+1</td></tr>'
    ) in counts
    assert '<td class="num chg">3 / 4 cores (75 %)<br>1 / 4 cores (25 %)</td>' in page


def test_quota_use_in_binary_units() -> None:
    page = render_html(one_node_run(True), [NODE_N1])
    row = page[page.index("<td>ns/q</td>") :].split("</tr>")[0]
    assert '<td class="num">2Gi</td><td class="num">1Gi</td><td class="num">4Gi</td>' in row
