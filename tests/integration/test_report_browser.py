"""`troupe simulate --output html` in a real browser: Debian's Chromium,
headless, takes a screenshot of the page (no server, no network), and the
screenshot shows the charts: the heat map's cells in the colours of the nodes'
use, the node names drawn inside the cells (not only in tooltips), the map of
another resource when its radio input is checked (CSS only), and the bars of
pending pods."""

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


def ink_in_cells(img: Image.Image, fill: tuple[int, int, int], ink: tuple[int, int, int]) -> int:
    """Pixels of (about) the text colour `ink` inside the cells filled with
    `fill`: rows crossing at least three such cells, columns where the fill
    shows (so the white gaps between cells do not count)."""
    px = np.asarray(img, dtype=np.int16)
    is_fill = (np.abs(px - np.array(fill, dtype=np.int16)) <= 6).all(axis=2)
    rows = is_fill.sum(axis=1) >= 3 * 100
    cols = is_fill[rows].any(axis=0)
    is_ink = (np.abs(px[rows] - np.array(ink, dtype=np.int16)) <= 60).all(axis=2)
    return int(is_ink[:, cols].sum())


def report(tmp_path: Path) -> str:
    dump = tmp_path / "cluster.json"
    dump.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": cluster()}))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["simulate", str(dump), "-o", "html"]) == 0
    return buf.getvalue()


def test_the_html_report_shows_its_charts_in_a_headless_browser(tmp_path: Path) -> None:
    html = report(tmp_path)
    page = tmp_path / "report.html"
    page.write_text(html)
    assert html.startswith("<!DOCTYPE html>") and "<script" not in html and "http" not in html
    img = screenshot(page, tmp_path / "shot.png")
    cell = 136 * 50  # a node's cell
    full, idle = rgb(_heat(1.0)), rgb(_heat(0.0))
    # six full nodes (zone a) and six idle ones (zone b), less their text, plus the legend
    assert count(img, full) >= 6 * cell * 0.6
    assert count(img, idle) >= 6 * cell * 0.6
    # the pending pods' bar
    assert count(img, (0xDD, 0x6B, 0x20)) >= 160 * 12 * 0.8


def test_node_names_are_drawn_inside_the_cells(tmp_path: Path) -> None:
    html = report(tmp_path)
    names = [f"{z}{i}" for z in "ab" for i in range(6)]
    for n in names:
        assert f"<b>{n}</b>" in html
    nameless = html
    for n in names:
        nameless = nameless.replace(f"<b>{n}</b>", "<b></b>")
    shots = {}
    for label, text in (("named", html), ("nameless", nameless)):
        page = tmp_path / f"{label}.html"
        page.write_text(text)
        shots[label] = screenshot(page, tmp_path / f"{label}.png")
    full, idle = rgb(_heat(1.0)), rgb(_heat(0.0))
    white, dark = (255, 255, 255), (17, 17, 17)
    # white text on the full cells, dark text on the idle ones: each cell's
    # other lines (its use, its percentage) show, and the names add to them
    for fill, ink in ((full, white), (idle, dark)):
        named = ink_in_cells(shots["named"], fill, ink)
        bare = ink_in_cells(shots["nameless"], fill, ink)
        assert bare >= 6 * 60, (fill, bare)
        assert named - bare >= 6 * 15, (fill, named, bare)


def test_checking_another_resource_shows_its_map(tmp_path: Path) -> None:
    html = report(tmp_path)
    # zone a is full of cpu but uses no memory: with memory's input checked
    # (as a click would), the map shown has no full cell left
    assert '<label for="a-r1">memory</label>' in html
    memory = html.replace('id="a-r0" checked>', 'id="a-r0">').replace(
        'id="a-r1">', 'id="a-r1" checked>'
    )
    page = tmp_path / "memory.html"
    page.write_text(memory)
    img = screenshot(page, tmp_path / "memory.png")
    full, idle = rgb(_heat(1.0)), rgb(_heat(0.0))
    assert count(img, full) < 136 * 50  # the legend's swatch only
    assert count(img, idle) >= 12 * 136 * 50 * 0.6
