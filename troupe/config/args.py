"""pluginConfig: each plugin's arguments with the path of their `args`
(validated by the plugin itself when the profile is built)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from troupe.config.readers import read_list, read_name, read_object, show, suggest
from troupe.config.types import API_VERSION, KUBE_SCHEDULER_PLUGINS, ConfigError

log = logging.getLogger(__name__)


def unknown_plugin(name: str, registry: Mapping[str, type]) -> str:
    if name in KUBE_SCHEDULER_PLUGINS:
        return f'plugin "{name}" is a kube-scheduler plugin that Troupe does not have'
    return f'unknown plugin "{name}"' + suggest(name, registry)


def plugin_args(
    obj: object, path: str, registry: Mapping[str, type]
) -> dict[str, tuple[Mapping[str, Any], str]]:
    """pluginConfig: plugin name -> (args, args path)."""
    out: dict[str, tuple[Mapping[str, Any], str]] = {}
    for j, pc in enumerate(read_list(obj, path)):
        p = f"{path}[{j}]"
        pc = read_object(pc, p, ("name", "args"))
        name = read_name(pc.get("name"), f"{p}.name")
        if name in out:
            raise ConfigError(f"{p}.name", f'duplicate "{name}"')
        args = dict(read_object(pc.get("args"), f"{p}.args"))
        if name not in registry:
            if name not in KUBE_SCHEDULER_PLUGINS:
                raise ConfigError(f"{p}.name", unknown_plugin(name, registry))
            log.info("configuration: %s: ignored, Troupe has no plugin %s", p, name)
            continue
        # A dumped kube-scheduler configuration types its args; the type is the plugin's.
        api_version, kind = args.pop("apiVersion", None), args.pop("kind", None)
        if api_version is not None and api_version != API_VERSION:
            raise ConfigError(
                f"{p}.args.apiVersion", f"expected {API_VERSION}, got {show(api_version)}"
            )
        if kind is not None and kind != f"{name}Args":
            raise ConfigError(f"{p}.args.kind", f"expected {name}Args, got {show(kind)}")
        out[name] = (args, f"{p}.args")
    return out
