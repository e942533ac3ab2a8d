"""Checks across profiles: one queueSort, unique names, one isolated-CPU
resource (read once here for the cache and the plugins)."""

from __future__ import annotations

from collections.abc import Sequence

from troupe.api.readers import duplicate, invalid, show
from troupe.api.types import (
    ISOLATED_CPU_ANNOTATION,
    ISOLATED_CPU_RESOURCE,
    IsolatedCPU,
)
from troupe.config.types import (
    NATIVE_RESOURCES,
    QUALIFIED_NAME,
    QUALIFIED_PREFIX,
    ConfigError,
    ProfileConfig,
)


def extended_resource_problem(name: object) -> str | None:
    """Why `name` is not an extended resource name (domain/name, outside
    kubernetes.io, not a native resource such as cpu or hugepages-*), or None."""
    if not isinstance(name, str):
        return "must be a string"
    prefix, slash, rest = name.rpartition("/")
    if name in NATIVE_RESOURCES or name.startswith(("hugepages-", "requests.")) or not slash:
        return "must be an extended resource name (domain/name)"
    if prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io"):
        return "must be outside the kubernetes.io domain"
    if len(prefix) > 253 or not QUALIFIED_PREFIX.fullmatch(prefix):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    if len(rest) > 63 or not QUALIFIED_NAME.fullmatch(rest):
        return "name part must be a qualified name"
    return None


def check_isolated(profiles: Sequence[ProfileConfig]) -> IsolatedCPU:
    """Where isolated pods are charged, read once from NodeResourcesFit's args
    (the cache and the plugins use this): the resource must be an extended
    resource, and the same wherever NodeResourcesFit runs; the annotation is
    the first NodeResourcesFit's."""
    seen: tuple[object, str] | None = None
    found: IsolatedCPU | None = None
    for i, p in enumerate(profiles):
        for specs in p.plugins.values():
            for spec in specs:
                if spec.name != "NodeResourcesFit":
                    continue
                path = f"{spec.args_path or f'profiles[{i}].pluginConfig'}.isolatedCPUResource"
                resource = spec.args.get("isolatedCPUResource", ISOLATED_CPU_RESOURCE)
                problem = extended_resource_problem(resource)
                if problem is not None:
                    raise invalid(path, resource, problem)
                if seen is None:
                    seen = (resource, path)
                elif resource != seen[0]:
                    raise invalid(
                        path,
                        resource,
                        f"must be the same in every profile: {seen[1]} is {show(seen[0])}",
                    )
                if found is None:
                    annotation = spec.args.get("isolatedCPUAnnotation", ISOLATED_CPU_ANNOTATION)
                    found = IsolatedCPU(annotation=str(annotation), resource=str(resource))
    return found if found is not None else IsolatedCPU()


def check_profiles(profiles: Sequence[ProfileConfig]) -> IsolatedCPU:
    """Names are unique; all profiles share one queue, so one queueSort (and its
    args); the isolated-CPU names (`check_isolated`) are returned."""
    isolated = check_isolated(profiles)
    first = profiles[0].plugins["queueSort"][0]
    names: set[str] = set()
    for i, p in enumerate(profiles):
        if p.scheduler_name in names:
            raise duplicate(f"profiles[{i}].schedulerName", p.scheduler_name)
        names.add(p.scheduler_name)
        sort = p.plugins["queueSort"][0]
        if sort.name != first.name:
            raise ConfigError(
                f"profiles[{i}].plugins.queueSort",
                f'must be the same for all profiles: "{sort.name}" here, '
                f'"{first.name}" in profiles[0]',
            )
        if sort.args != first.args:
            raise ConfigError(
                sort.args_path or f"profiles[{i}].pluginConfig",
                f'the args of queueSort plugin "{sort.name}" must be the same for all profiles',
            )
    return isolated
