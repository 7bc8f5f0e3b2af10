"""Build hook: put the page's npm libraries, with their licences, into the wheel and the sdist (issue 14).

The page imports markdown-it and highlight.js from ``/static/vendor/``. A source checkout serves them from
``node_modules``; an installed wheel has no ``node_modules``, so the files ``src/tokenrelay/web/vendor.json``
names are copied into the package at ``tokenrelay/web/vendor/`` (each with ``<package>.LICENSE``). The sdist
carries the same files under ``src/tokenrelay/web/vendor/``, so a wheel built from it needs no npm either.
Editable installs are left alone: they serve from the checkout, ``node_modules`` included.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

WEB = Path("src") / "tokenrelay" / "web"


class VendorHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "editable":
            return
        root = Path(self.root)
        manifest: dict[str, dict[str, str]] = json.loads((root / WEB / "vendor.json").read_text("utf-8"))
        prefix = "tokenrelay/web/vendor" if self.target_name == "wheel" else f"{WEB.as_posix()}/vendor"
        for name, entry in manifest.items():
            licence = license_name(entry["package"])
            for file, source in ((name, entry["path"]), (licence, entry["license"])):
                path = find(root, entry["package"], source, file)
                build_data["force_include"][str(path)] = f"{prefix}/{file}"


def license_name(package: str) -> str:
    """``@highlightjs/cdn-assets`` → ``highlightjs-cdn-assets.LICENSE``."""
    return package.lstrip("@").replace("/", "-") + ".LICENSE"


def find(root: Path, package: str, path: str, name: str) -> Path:
    """The file from ``node_modules``, or the copy an sdist carries; a clear error when neither exists."""
    for candidate in (root / "node_modules" / package / path, root / WEB / "vendor" / name):
        if candidate.is_file():
            return candidate
    raise RuntimeError(
        f"cannot build tokenrelay: the page needs node_modules/{package}/{path}; run `npm ci` first"
    )
