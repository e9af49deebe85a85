"""The PVE API schema shipped with the double: path templates, methods, parameter schemas.

Loads the flat ``{path: {METHOD: info}}`` JSON files in ``schema/`` (extracted from the official
PVE 9.1 ``apidata.js``; see ``schema/README.md``) and matches request paths to templates such as
``/nodes/{node}/lxc/{vmid}/config``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

SCHEMA_FILES = ("pve-api-lxc-subset.json", "pve-api-access-subset.json")


@dataclass(frozen=True)
class PathMatch:
    template: str
    params: dict[str, str]


class ApiSchema:
    """Path templates and method descriptions of the PVE API subset the double serves."""

    def __init__(self, paths: dict[str, dict[str, dict[str, Any]]]) -> None:
        self.paths = paths
        # literal segments outrank placeholders, so "/nodes/{node}/lxc" never shadows a longer path
        self._templates = sorted(
            ((template, template.strip("/").split("/")) for template in paths),
            key=lambda item: [seg.startswith("{") for seg in item[1]],
        )

    @classmethod
    def load(cls) -> ApiSchema:
        return _load_default()

    def match(self, path: str) -> PathMatch | None:
        """The template for ``path`` (segments already URL-decoded), or None."""
        segments = path.strip("/").split("/") if path.strip("/") else []
        for template, parts in self._templates:
            if len(parts) != len(segments):
                continue
            params: dict[str, str] = {}
            for part, segment in zip(parts, segments, strict=True):
                if part.startswith("{") and part.endswith("}"):
                    if not segment:
                        break
                    params[part[1:-1]] = segment
                elif part != segment:
                    break
            else:
                return PathMatch(template, params)
        return None

    def method(self, template: str, method: str) -> dict[str, Any] | None:
        return self.paths.get(template, {}).get(method)

    def parameters(self, template: str, method: str) -> dict[str, Any]:
        info = self.method(template, method) or {}
        parameters: dict[str, Any] = info.get("parameters") or {}
        return parameters


@cache
def _load_default() -> ApiSchema:
    paths: dict[str, dict[str, dict[str, Any]]] = {}
    folder = resources.files("dflashops.lab.pve").joinpath("schema")
    for name in SCHEMA_FILES:
        paths.update(json.loads(folder.joinpath(name).read_text(encoding="utf-8")))
    return ApiSchema(paths)
