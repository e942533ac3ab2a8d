"""ElasticQuotas in the simulator: kept in the simulated cluster (CapacityScheduling
writes their status.used), shown per quota in the JSON, YAML and table output, in
`--compare` and the HTML report; `--explain` names the quota check that refused a
pod; the quota metrics (used, min, max, reclaim victims) as a scrape reads them."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.test_metrics import lint
from troupe.cli import main
from troupe.config import default_config, parse_config
from troupe.config.types import SchedulerConfig
from troupe.core.metrics import Metrics
from troupe.plugins.registry import IN_TREE
from troupe.tools.compare import compare, format_compare
from troupe.tools.report import render_compare_html, render_html
from troupe.tools.simulate import (
    Simulation,
    SimulationResult,
    format_output,
    format_table,
    load_objects,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "quota"
OVER_MAX = str(FIXTURES / "over-max.yaml")
RECLAIM = str(FIXTURES / "reclaim.yaml")
CONFIG = str(FIXTURES / "config.yaml")
MORE_THAN_MAX = (
    "Pod team-a/a3 is rejected in PreFilter because ElasticQuota team-a is more than Max"
)


def quota_config() -> SchedulerConfig:
    return parse_config(yaml.safe_load(Path(CONFIG).read_text()), IN_TREE)


def simulation(path: str, config: SchedulerConfig, **kw: Any) -> Simulation:
    return Simulation(load_objects([path]), config, **kw)


def run(sim: Simulation) -> SimulationResult:
    return asyncio.run(sim.run())


def test_quotas_are_kept_and_their_status_written_back() -> None:
    sim = simulation(RECLAIM, quota_config())
    run(sim)
    kept = sim.cluster.elastic_quotas
    assert set(kept) == {"team-a/team-a", "team-b/team-b"}
    # status.used as scheduler-plugins' controller writes it: the Running pods' use
    assert kept["team-a/team-a"]["status"]["used"] == {"cpu": "2"}
    assert kept["team-b/team-b"]["status"]["used"] == {"cpu": "2"}


def test_output_has_an_elastic_quotas_section() -> None:
    out = run(simulation(RECLAIM, quota_config())).to_json_obj()
    assert out["elasticQuotas"] == {
        "team-a/team-a": {"used": {"cpu": 2}, "min": {"cpu": 1}, "max": {"cpu": 4}},
        "team-b/team-b": {"used": {"cpu": 2}, "min": {"cpu": 3}, "max": {"cpu": 4}},
    }
    victims = {k: p["preemptedBy"] for k, p in out["pods"].items() if p["preemptedBy"]}
    assert victims == {"team-a/a2": "team-b/b1", "team-a/a3": "team-b/b1"}
    assert out["pods"]["team-b/b1"]["node"] == "n1"


def test_without_quotas_the_output_has_no_section() -> None:
    out = run(simulation(str(Path(__file__).parent.parent / "fixtures/sim/ports.yaml"),
                         default_config(IN_TREE))).to_json_obj()  # fmt: skip
    assert "elasticQuotas" not in out


def test_quota_use_is_shown_without_the_plugin_too() -> None:
    """The default profile does not limit the namespace: its quota shows all three pods."""
    out = run(simulation(OVER_MAX, default_config(IN_TREE))).to_json_obj()
    assert out["elasticQuotas"]["team-a/team-a"] == {
        "used": {"cpu": 3},
        "min": {"cpu": 1},
        "max": {"cpu": 2},
    }


def test_table_and_yaml_show_used_min_and_max() -> None:
    result = run(simulation(OVER_MAX, quota_config()))
    table = format_table(result)
    assert "ELASTICQUOTA   USE (used/min/max)" in table
    assert "team-a/team-a  cpu 2/1/2" in table
    assert "team-b/team-b  cpu 0/2/4" in table
    assert yaml.safe_load(format_output(result, "yaml"))["elasticQuotas"]["team-a/team-a"] == {
        "used": {"cpu": 2},
        "min": {"cpu": 1},
        "max": {"cpu": 2},
    }


def test_cli_json_names_the_quota_refusal(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--config", CONFIG, OVER_MAX, "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pods"]["team-a/a3"]["node"] is None
    assert MORE_THAN_MAX in out["pods"]["team-a/a3"]["reason"]
    assert out["elasticQuotas"]["team-a/team-a"]["used"] == {"cpu": 2}


def test_explain_names_the_quota_check_that_refused_the_pod() -> None:
    result = run(simulation(OVER_MAX, quota_config(), explain=["team-a/a3"]))
    e = result.to_json_obj()["explain"]["team-a/a3"]
    text = json.dumps(e)
    assert "CapacityScheduling" in text and MORE_THAN_MAX in text
    table = format_table(result)
    assert f"PreFilter CapacityScheduling: {MORE_THAN_MAX}" in table


def test_compare_shows_use_per_quota() -> None:
    objects = load_objects([OVER_MAX])
    a = asyncio.run(Simulation(copy.deepcopy(objects), default_config(IN_TREE)).run())
    b = asyncio.run(Simulation(copy.deepcopy(objects), quota_config()).run())
    diff = compare(a, b, ("plain", "quota"))
    assert diff["elasticQuotas"][0] == {
        "elasticQuota": "team-a/team-a",
        "min": {"cpu": 1},
        "max": {"cpu": 2},
        "plain": {"cpu": 3},
        "quota": {"cpu": 2},
    }
    text = format_compare(diff)
    assert "ELASTICQUOTA   used plain/quota (min, max)" in text
    assert "team-a/team-a  cpu 3/2 (1, 2)" in text
    assert "team-b/team-b  cpu 0/0 (2, 4)" in text
    page = render_compare_html([a, b], ("plain", "quota"), diff, objects)
    assert page.count("<h2>Use per quota</h2>") == 2


def test_html_report_shows_use_per_quota() -> None:
    objects = load_objects([RECLAIM])
    page = render_html(asyncio.run(Simulation(objects, quota_config()).run()), objects)
    assert "<h2>Use per quota</h2>" in page
    # team-b: 2 used of its max 4 (half the bar), its min 3 marked at three quarters
    row = page[page.index("<td>team-b/team-b</td>") :].split("</tr>")[0]
    assert 'width="80.0"' in row and 'x1="120.0"' in row
    assert '<td class="num">2</td><td class="num">3</td><td class="num">4</td>' in row
    plain = render_html(run(simulation(OVER_MAX.replace("quota/over-max", "sim/ports"),
                                       default_config(IN_TREE))), [])  # fmt: skip
    assert "Use per quota" not in plain


# ---- metrics ---------------------------------------------------------------------------


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(metrics.render().decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def quota_labels(
    ns: str, resource: str = "cpu", unit: str = "cores"
) -> tuple[tuple[str, str], ...]:
    return (("name", ns), ("namespace", ns), ("resource", resource), ("unit", unit))


def test_quota_metrics_used_min_max_and_reclaim_victims() -> None:
    metrics = Metrics()
    run(simulation(RECLAIM, quota_config(), metrics=metrics))
    got = samples(metrics)
    a, b = quota_labels("team-a"), quota_labels("team-b")
    assert got[("scheduler_elastic_quota_used", a)] == 2
    assert got[("scheduler_elastic_quota_minimum", a)] == 1
    assert got[("scheduler_elastic_quota_maximum", a)] == 4
    assert got[("scheduler_elastic_quota_used", b)] == 2
    assert got[("scheduler_elastic_quota_minimum", b)] == 3
    victims = "scheduler_elastic_quota_reclaim_victims_total"
    assert got[(victims, (("name", "team-a"), ("namespace", "team-a")))] == 2
    assert got[(victims, (("name", "team-b"), ("namespace", "team-b")))] == 0


def test_quota_metrics_are_read_at_scrape_time_in_each_unit() -> None:
    metrics = Metrics()
    sim = simulation(OVER_MAX, quota_config(), metrics=metrics)
    before = samples(metrics)
    assert not any(name.startswith("scheduler_elastic_quota") for name, _ in before)
    run(sim)
    got = samples(metrics)
    assert got[("scheduler_elastic_quota_used", quota_labels("team-a"))] == 2
    # An unlimited resource (max leaves it out) has no max sample; none used, no used sample.
    assert ("scheduler_elastic_quota_maximum", quota_labels("team-a", "memory", "bytes")) not in got
    assert ("scheduler_elastic_quota_used", quota_labels("team-b")) not in got


def test_no_quota_plugin_no_quota_metrics() -> None:
    metrics = Metrics()
    run(simulation(OVER_MAX, default_config(IN_TREE), metrics=metrics))
    assert not any(name.startswith("scheduler_elastic_quota") for name, _ in samples(metrics))


def test_quota_families_lint_clean() -> None:
    """promtool's rules (tests/unit/test_metrics.py's lint) on the quota families."""
    metrics = Metrics()
    run(simulation(RECLAIM, quota_config(), metrics=metrics))
    text = metrics.render().decode()
    assert "scheduler_elastic_quota_reclaim_victims_total" in text
    assert lint(text) == []
