"""`troupe simulate --output html` in a real browser: Debian's Chromium,
headless, takes a screenshot of the page (no server, no network), and the
screenshot shows the charts: the heat map's cells in the colours of the nodes'
use, and the bars of pending pods."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from tests.builders import make_node, make_pod
from troupe.cli import main
from troupe.tools.report import _heat

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def cluster() -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = []
    for z in ("a", "b"):
        for i in range(6):
            objs.append(
                make_node(f"{z}{i}")
                .capacity(cpu=4, memory="16Gi", pods=110)
                .label("topology.kubernetes.io/zone", f"zone-{z}")
                .label("troupe.dev/rack", f"rack-{z}{i // 3}")
                .obj()
            )
    # zone a full, zone b idle: a pod of 4 cpu pinned to each node of zone a
    for i in range(6):
        objs.append(make_pod(f"fill-{i}").req(cpu="4").node(f"a{i}").obj())
    objs += [make_pod(f"huge-{i}").req(cpu="64").obj() for i in range(3)]
    return objs


def screenshot(page: Path, out: Path) -> Image.Image:
    assert CHROMIUM, "chromium is not installed (make install installs Debian's chromium)"
    subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1200,1400",
            f"--screenshot={out}",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return Image.open(out).convert("RGB")


def count(img: Image.Image, rgb: tuple[int, int, int], tolerance: int = 6) -> int:
    """Pixels of (about) that colour."""
    px = np.asarray(img, dtype=np.int16)
    near = np.abs(px - np.array(rgb, dtype=np.int16)) <= tolerance
    return int(near.all(axis=2).sum())


def rgb(css: str) -> tuple[int, int, int]:
    r, g, b = (int(x) for x in css.removeprefix("rgb(").removesuffix(")").split(","))
    return r, g, b


def test_the_html_report_shows_its_charts_in_a_headless_browser(tmp_path: Path) -> None:
    dump = tmp_path / "cluster.json"
    dump.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": cluster()}))
    page = tmp_path / "report.html"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["simulate", str(dump), "-o", "html"]) == 0
    page.write_text(buf.getvalue())
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<script" not in html and "http" not in html
    img = screenshot(page, tmp_path / "shot.png")
    cell = 26 * 26  # a node's cell, less its rounded corners
    full, idle = rgb(_heat(1.0)), rgb(_heat(0.0))
    # six full nodes (zone a) and six idle ones (zone b), plus the legend's swatches
    assert count(img, full) >= 6 * cell * 0.8
    assert count(img, idle) >= 6 * cell * 0.8
    # the pending pods' bar
    assert count(img, (0xDD, 0x6B, 0x20)) >= 160 * 12 * 0.8
