"""Kubernetes 1.37's workload-scheduling profile, read onto Troupe's plugins.

A kube-scheduler 1.37 profile schedules PodGroups with three plugins that take
no arguments (their `New` ignores them) and three plugin sets besides the
pod's (staging kube-scheduler config/v1 types.go `Plugins`; the plugins under
pkg/scheduler/framework/plugins: gangscheduling, topologyaware,
podgrouppodscount):

    GangScheduling              preEnqueue, permit (and placementFeasible,
                                which is no configuration point)
    TopologyPlacementGenerator  placementGenerate
    PodGroupPodsCount           placementScore (weighted)
    podGroupPostFilter          the point where a PodGroup that cannot be
                                placed preempts (DefaultPreemption)

Troupe does all of it in Coscheduling and its group cycle, so the profile is
read onto those, before the plugin sets are merged and expanded:

- `GangScheduling` enabled at any point is `Coscheduling` there (the one gang
  plugin; an entry naming both is one plugin). Disabling it is refused:
  Coscheduling also sorts Troupe's queue, so disable Coscheduling itself.
- `TopologyPlacementGenerator` enabled at multiPoint or placementGenerate is
  what the group cycle does for a PodGroup with topology constraints; it needs
  Coscheduling in the profile. Disabling it is refused: the group cycle always
  honours a PodGroup's topology constraints.
- `PodGroupPodsCount` enabled at multiPoint or placementScore sets
  Coscheduling's `placementPodsCountWeight` to its weight (the placementScore
  entry's, else multiPoint's; 0 or unset means 1, as score weights); disabled
  (by name, or "*" at placementScore without enabling it there) it is 0. The
  weight must be at most 100 (the argument's bound), and agree with a
  `placementPodsCountWeight` the profile's pluginConfig gives Coscheduling.
- `podGroupPostFilter.enabled` names PostFilter plugins that preempt for gangs
  (Troupe's GroupPreemptionPlugin); each must also run at postFilter, where
  Troupe calls it for gangs too. Disabling one there only is refused: Troupe
  cannot preempt for pods and not for gangs with one plugin.

Every refusal is a ConfigError naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from troupe.api.readers import get_int, get_map, get_name, get_objs
from troupe.config.args import unknown_plugin
from troupe.config.types import ALL, MAX_PLUGIN_WEIGHT, MULTI_POINT, ConfigError
from troupe.framework.interface import (
    GroupPreemptionPlugin,
    GroupSchedulingPlugin,
    PluginSpec,
    implements,
)

GANG_SCHEDULING: Final = "GangScheduling"
TOPOLOGY_PLACEMENT_GENERATOR: Final = "TopologyPlacementGenerator"
POD_GROUP_PODS_COUNT: Final = "PodGroupPodsCount"
COSCHEDULING: Final = "Coscheduling"
PLACEMENT_GENERATE: Final = "placementGenerate"
PLACEMENT_SCORE: Final = "placementScore"
POD_GROUP_POST_FILTER: Final = "podGroupPostFilter"
# The plugin sets of kube-scheduler 1.37's workload scheduling.
WORKLOAD_POINTS: Final = (PLACEMENT_GENERATE, PLACEMENT_SCORE, POD_GROUP_POST_FILTER)
# kube-scheduler 1.37's workload plugins, and the configuration points where
# each may be enabled.
WORKLOAD_PLUGINS: Final = {
    TOPOLOGY_PLACEMENT_GENERATOR: (MULTI_POINT, PLACEMENT_GENERATE),
    POD_GROUP_PODS_COUNT: (MULTI_POINT, PLACEMENT_SCORE),
}
# Coscheduling's argument the PodGroupPodsCount weight becomes, and its bound.
PODS_COUNT_WEIGHT_ARG: Final = "placementPodsCountWeight"
MAX_PODS_COUNT_WEIGHT: Final = 100


@dataclass(frozen=True, slots=True)
class WorkloadProfile:
    """What a profile's workload-scheduling entries ask of Coscheduling, with
    the path of the entry that asked."""

    # The placementPodsCountWeight and where it was set, or None.
    pods_count_weight: tuple[int, str] | None = None
    # Entries that need Coscheduling's group cycle in the profile.
    needs_group_cycle: tuple[tuple[str, str], ...] = ()
    # podGroupPostFilter.enabled: (plugin, path).
    post_filters: tuple[tuple[str, str], ...] = field(default_factory=tuple)


def _subclasses(cls: type, proto: type) -> bool:
    """Whether plugin class `cls` subclasses `proto` (as the runtime tells the
    points a plugin serves: by its class hierarchy)."""
    return proto in cls.__mro__


def _refuse_disabled(m: Mapping[str, Any], point: str, p: str) -> None:
    for q, d in get_objs(m, "disabled", p, ("name", "weight")):
        name = get_name(d, "name", q)
        if name == GANG_SCHEDULING:
            raise ConfigError(
                f"{q}name",
                f'plugin "{GANG_SCHEDULING}" is Coscheduling in Troupe, which also sorts '
                'the queue: disable "Coscheduling" (and enable a queueSort plugin such as '
                "PrioritySort) instead",
            )
        if name == TOPOLOGY_PLACEMENT_GENERATOR:
            raise ConfigError(
                f"{q}name",
                f'plugin "{TOPOLOGY_PLACEMENT_GENERATOR}" cannot be disabled in Troupe: '
                "Coscheduling's group cycle places a PodGroup with topology constraints "
                "in one domain whenever it runs",
            )
        if point == POD_GROUP_POST_FILTER:
            raise ConfigError(
                f"{q}name",
                "cannot be disabled in Troupe: a PostFilter plugin preempts for gangs "
                "wherever it runs at postFilter; disable it at postFilter instead",
            )


def read_workload_plugins(
    plugins: Mapping[str, Any], prefix: str, registry: Mapping[str, type]
) -> tuple[dict[str, Any], WorkloadProfile]:
    """The profile's `plugins` (its path `prefix`, "profiles[0].plugins.") with
    kube-scheduler 1.37's workload entries read onto Troupe's plugins (see the
    module), and what they ask of Coscheduling."""
    out: dict[str, Any] = {k: v for k, v in plugins.items() if k not in WORKLOAD_POINTS}
    weight: tuple[int, str] | None = None
    multi_weight: tuple[int, str] | None = None
    disabled_weight: tuple[int, str] | None = None
    needs: list[tuple[str, str]] = []
    post_filters: list[tuple[str, str]] = []
    for point, raw in plugins.items():
        if raw is None:
            continue
        m = get_map(plugins, point, prefix, ("enabled", "disabled"))
        p = f"{prefix}{point}."
        _refuse_disabled(m, point, p)
        enabled: list[Any] = []
        names = {e.get("name") for e in m.get("enabled") or [] if isinstance(e, Mapping)}
        for q, e in get_objs(m, "enabled", p, ("name", "weight")):
            name = get_name(e, "name", q)
            if name in WORKLOAD_PLUGINS:
                if point not in WORKLOAD_PLUGINS[name]:
                    raise ConfigError(f"{q}name", f'plugin "{name}" does not implement {point}')
                needs.append((name, q[:-1]))
                if name == POD_GROUP_PODS_COUNT:
                    w = get_int(e, "weight", q, 0, MAX_PLUGIN_WEIGHT, strict=True) or 0
                    got = (w or 1, f"{q}weight")
                    if point == PLACEMENT_SCORE:
                        weight = got
                    else:
                        multi_weight = got
                continue
            if point == POD_GROUP_POST_FILTER:
                if name not in registry:
                    raise ConfigError(f"{q}name", unknown_plugin(name, registry))
                if not implements(registry[name], "postFilter") or not _subclasses(
                    registry[name], GroupPreemptionPlugin
                ):
                    raise ConfigError(
                        f"{q}name",
                        f'plugin "{name}" does not implement {POD_GROUP_POST_FILTER} '
                        "(Troupe's group preemption)",
                    )
                post_filters.append((name, q[:-1]))
                continue
            if name == GANG_SCHEDULING:
                if COSCHEDULING in names:
                    continue  # the same plugin, named twice
                enabled.append({**e, "name": COSCHEDULING})
            else:
                enabled.append(e)
        if point == PLACEMENT_SCORE and weight is None:
            off = {get_name(d, "name", q) for q, d in get_objs(m, "disabled", p, ("name",))}
            if ALL in off or POD_GROUP_PODS_COUNT in off:
                disabled_weight = (0, f"{p}disabled")
        if point == MULTI_POINT:
            off = {get_name(d, "name", q) for q, d in get_objs(m, "disabled", p, ("name",))}
            if POD_GROUP_PODS_COUNT in off and multi_weight is None:
                disabled_weight = (0, f"{p}disabled")
        if point in WORKLOAD_POINTS:
            continue
        if "enabled" in m:
            out[point] = {**m, "enabled": enabled}
    return out, WorkloadProfile(
        pods_count_weight=weight or multi_weight or disabled_weight,
        needs_group_cycle=tuple(needs),
        post_filters=tuple(post_filters),
    )


def apply_workload_profile(
    wp: WorkloadProfile,
    specs: Mapping[str, Sequence[PluginSpec]],
    registry: Mapping[str, type],
    plugin_config_path: str,
) -> dict[str, tuple[PluginSpec, ...]]:
    """The expanded plugin sets with what `wp` asks: checked against them (the
    group cycle present, each podGroupPostFilter plugin at postFilter) and the
    PodGroupPodsCount weight given to Coscheduling."""
    gang = [s for s in specs["permit"] if _subclasses(registry[s.name], GroupSchedulingPlugin)]
    for name, path in wp.needs_group_cycle:
        if not gang:
            raise ConfigError(
                f"{path}.name",
                f'plugin "{name}" is Coscheduling\'s group cycle in Troupe, which this '
                "profile does not enable",
            )
    at_post_filter = {s.name for s in specs["postFilter"]}
    for name, path in wp.post_filters:
        if name not in at_post_filter:
            raise ConfigError(
                f"{path}.name",
                f'plugin "{name}" must also be enabled at postFilter: Troupe calls it there '
                "for pods and gangs alike",
            )
    out = {point: tuple(row) for point, row in specs.items()}
    if wp.pods_count_weight is None:
        return out
    weight, path = wp.pods_count_weight
    if weight > MAX_PODS_COUNT_WEIGHT:
        raise ConfigError(
            path,
            f"Invalid value: {weight}: must be at most {MAX_PODS_COUNT_WEIGHT} in Troupe "
            f"(Coscheduling's {PODS_COUNT_WEIGHT_ARG})",
        )
    if not gang:
        return out  # only a disabled PodGroupPodsCount: nothing to weigh
    for point, row in out.items():
        new = []
        for s in row:
            if s.name == COSCHEDULING:
                given = s.args.get(PODS_COUNT_WEIGHT_ARG)
                if given is not None and given != weight:
                    where = f"{s.args_path or plugin_config_path}.{PODS_COUNT_WEIGHT_ARG}"
                    raise ConfigError(
                        where,
                        f"Invalid value: {given!r}: disagrees with {path} ({weight}), "
                        f"which sets it for {POD_GROUP_PODS_COUNT}",
                    )
                s = PluginSpec(
                    s.name, s.weight, {**s.args, PODS_COUNT_WEIGHT_ARG: weight}, s.args_path
                )
            new.append(s)
        out[point] = tuple(new)
    return out
