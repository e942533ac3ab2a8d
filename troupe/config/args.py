"""pluginConfig: each plugin's arguments with the path of their `args`
(validated by the plugin itself when the profile is built)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from troupe.api.readers import duplicate, get_map, get_name, get_objs, suggest, unsupported
from troupe.config.types import API_VERSION, KUBE_SCHEDULER_PLUGINS, ConfigError

log = logging.getLogger(__name__)


def unknown_plugin(name: str, registry: Mapping[str, type]) -> str:
    if name in KUBE_SCHEDULER_PLUGINS:
        return f'plugin "{name}" is a kube-scheduler plugin that Troupe does not have'
    return f'unknown plugin "{name}"' + suggest(name, registry)


def plugin_args(
    profile: Mapping[str, Any], prefix: str, registry: Mapping[str, type]
) -> dict[str, tuple[Mapping[str, Any], str]]:
    """A profile's pluginConfig: plugin name -> (args, args path)."""
    out: dict[str, tuple[Mapping[str, Any], str]] = {}
    for p, pc in get_objs(profile, "pluginConfig", prefix, ("name", "args")):
        name = get_name(pc, "name", p)
        if name in out:
            raise duplicate(f"{p}name", name)
        args = dict(get_map(pc, "args", p))
        if name not in registry:
            if name not in KUBE_SCHEDULER_PLUGINS:
                raise ConfigError(f"{p}name", unknown_plugin(name, registry))
            log.info("configuration: %s: ignored, Troupe has no plugin %s", p[:-1], name)
            continue
        # A dumped kube-scheduler configuration types its args; the type is the plugin's.
        api_version, kind = args.pop("apiVersion", None), args.pop("kind", None)
        if api_version is not None and api_version != API_VERSION:
            raise unsupported(f"{p}args.apiVersion", api_version, (API_VERSION,))
        if kind is not None and kind != f"{name}Args":
            raise unsupported(f"{p}args.kind", kind, (f"{name}Args",))
        out[name] = (args, f"{p}args")
    return out
