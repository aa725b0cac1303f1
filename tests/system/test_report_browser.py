"""End to end: a fresh tiny run gives the unified claims table, and `snakemake --report` gives one self-contained HTML
file that a real browser (headless Chromium) opens without console errors, with every figure rendering, on a first
page that starts with the claims table as HTML (a screenshot of that first screen is saved: ``$ACCELBENCH_SCREENSHOT``,
else the test's tmp_path).

Browser: Debian's ``chromium`` (``apt-get install chromium``; with ``ACCELBENCH_CI_APT=1``, as ``.ci/run`` sets it, the
test installs it as root when missing), driven by Playwright (test extra) with ``executable_path``. Without either, the
browser part is skipped and says why.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from accelbench.aggregate.claims import VERDICTS, category
from dag import snakemake, write_config

EXPERIMENTS = ["unet3d_profile", "sr3_scaling"]  # one Study A and one Study B experiment: every kind of output
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    """Debian's chromium (or another Chromium build on PATH; ``ACCELBENCH_CHROMIUM`` names one explicitly). Missing,
    and opted in with ``ACCELBENCH_CI_APT=1`` (CI, as root): installed with apt-get first."""

    def find():
        for name in (os.environ.get("ACCELBENCH_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
            if name and (path := shutil.which(name)):
                return path
        return None

    if find() is None and os.environ.get("ACCELBENCH_CI_APT") == "1" and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=False, timeout=900)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"],
            env=env,
            check=False,
            timeout=1800,
        )
    return find()


def report_images(html: str) -> list[str]:
    """Names of the PNG figures embedded in the report (``data:image/png;...;filename=<name>;base64,`` URIs)."""
    return [Path(n).name for n in re.findall(r"data:image/png;charset=utf8;filename=([^;]+);base64,", html)]


def screenshot_path(default: Path) -> Path:
    """Where the first-screen screenshot goes: ``$ACCELBENCH_SCREENSHOT`` (a file name, for a person to look at)
    or ``default``."""
    path = Path(os.environ.get("ACCELBENCH_SCREENSHOT") or default)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


VIEWPORT = {"width": 1400, "height": 1000}  # a reviewer's first screen


def open_in_browser(report: Path, user_data_dir: Path, screenshot: Path | None = None) -> dict:
    """Load the report in headless Chromium (:data:`VIEWPORT`, 1400x1000); return console errors, page errors, every
    figure's naturalWidth, and where the first HTML table lies (``first_table``: its top in px, the viewport height,
    its header cells, its text, and the bottom in px of each row by its first cell, ``row_bottom``).
    ``screenshot``: a PNG of the first screen is saved there."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed (pip install -e '.[test]')")
    exe = chromium_path()
    if exe is None:
        pytest.skip(
            "no Chromium browser installed (Debian: apt-get install chromium; or run the tests as root with "
            "ACCELBENCH_CI_APT=1, as .ci/run does, to have it installed)"
        )
    errors, page_errors = [], []
    with sync_api.sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(user_data_dir), executable_path=exe, headless=True, args=CHROMIUM_ARGS[1:]
        )
        try:
            page = ctx.new_page()
            page.set_viewport_size(VIEWPORT)
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: page_errors.append(str(e)))
            page.goto(report.resolve().as_uri(), wait_until="load")
            page.wait_for_timeout(1500)  # the report renders itself from its embedded data
            title = page.title()
            text = page.inner_text("body")
            # every embedded figure (the report's `results` data), decoded and laid out by the browser itself
            widths = page.evaluate(
                """async () => Object.fromEntries(await Promise.all(Object.values(results)
                       .filter(r => r.mime_type === 'image/png')
                       .map(r => new Promise(res => {
                           const img = new Image();
                           img.onload = () => res([r.name.split('/').pop(), img.naturalWidth]);
                           img.onerror = () => res([r.name.split('/').pop(), 0]);
                           img.src = r.data_uri;
                           document.body.appendChild(img);
                       }))))"""
            )
            rendered = page.evaluate("Array.from(document.images).map(i => [i.complete, i.naturalWidth])")
            first_table = page.evaluate(
                """() => { const t = document.querySelector('table');
                           if (!t) return null;
                           const r = t.getBoundingClientRect();
                           return {top: r.top, height: window.innerHeight, right: r.right, width: window.innerWidth,
                                   headers: Array.from(t.querySelectorAll('th')).map(h => h.innerText.trim()),
                                   rows: t.querySelectorAll('tbody tr').length, text: t.innerText,
                                   row_bottom: Object.fromEntries(Array.from(t.querySelectorAll('tbody tr'))
                                       .map(r => [r.cells[0].innerText.trim(),
                                                  r.getBoundingClientRect().bottom]))}; }"""
            )
            if screenshot is not None:
                page.screenshot(path=str(screenshot))
        finally:
            ctx.close()
    return {
        "console_errors": errors,
        "page_errors": page_errors,
        "widths": widths,
        "dom_images": rendered,
        "title": title,
        "text": text,
        "first_table": first_table,
    }


def test_fresh_run_claims_table_and_report_in_a_browser(tmp_path, tiny_config):
    write_config(tmp_path, tiny_config, EXPERIMENTS)
    run = snakemake(tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    # the run ends on what to read: claims.md, the verdict counts, the report command (onsuccess in the Snakefile)
    last = [ln for ln in run.stderr.splitlines() if ln.strip()][-6:]
    assert any("results/claims/claims.md" in ln for ln in last), last
    assert any(ln.startswith("accelbench: one verdict per claim (") for ln in last), last
    assert any(ln.endswith("snakemake --report report.html") for ln in last), last

    # the unified claims table: every claim of both studies, no blank verdict, a reason for each
    claims = pd.read_csv(tmp_path / "results/claims/claims.csv", keep_default_na=False)
    ids_a = set(pd.read_csv(Path("resources/reference/study_a_claims.csv"), comment="#")["claim_id"])
    ids_b = set(pd.read_csv(Path("resources/reference/study_b_claims.csv"), comment="#")["claim_id"])
    assert set(claims["claim_id"]) == ids_a | ids_b
    assert {category(v) for v in claims["verdict"]} <= set(VERDICTS)
    assert (claims["why"].str.len() > 0).all() and (claims["hardware"].str.len() > 0).all()
    lora = claims[claims["claim_id"] == "b9"].iloc[0]  # experiment not in this run: said so, not left out
    assert lora["verdict"] == "not measured here" and "lora_finetune" in lora["why"]
    tf32 = claims[claims["claim_id"] == "a12"].iloc[0]  # an A100/H100 claim on a CPU, TF32 there unsupported
    assert tf32["verdict"] == "not measured here (A100/H100 claim)" and "unsupported" in tf32["why"]
    sr3 = claims[claims["claim_id"] == "b13"].iloc[0]
    assert sr3["hardware"].startswith("CPU") and sr3["measured"]

    # one self-contained HTML file
    report = tmp_path / "report.html"
    rep = snakemake(tmp_path, "--report", str(report))
    assert rep.returncode == 0, rep.stderr[-3000:]
    html = report.read_text()
    assert not re.search(r"""<(?:script|link|img)[^>]+(?:src|href)=["']https?://""", html), "external resource"
    images = report_images(html)
    figures = sorted(p.name for p in (tmp_path / "results").rglob("fig_*.png"))
    assert "fig_claims.png" in figures and "fig_speedup.png" in figures and "fig_scaling.png" in figures
    assert sorted(set(images)) == figures, (images, figures)  # every figure, each once
    for table in ("claims.csv", "table.csv", "scaling.csv", "efficiency.csv"):
        assert table in html, table

    # the report opens on the claims: one verdict per claim, as HTML, is the first table on the first screen
    assert html.find("claim_id") != -1 and "System Message" not in html  # no docutils warning on the first page
    shot = screenshot_path(tmp_path / "report_first_screen.png")
    seen = open_in_browser(report, tmp_path / "chromium-profile", screenshot=shot)
    first = seen["first_table"]
    assert first is not None, "no HTML table in the report"
    assert first["headers"] == ["claim", "what it says", "published", "measured (on)", "verdict", "judged by"], first
    assert first["rows"] == len(ids_a | ids_b) and 0 <= first["top"] < first["height"], first
    # every claim's verdict on the first screen: the last claim's row ends within the viewport's height
    last = list(pd.read_csv(Path("resources/reference/study_b_claims.csv"), comment="#")["claim_id"])[-1]
    assert first["row_bottom"][last] <= first["height"] == VIEWPORT["height"], (last, first["row_bottom"])
    assert first["right"] <= first["width"], first["right"]  # the verdict and judged-by columns too, no scrolling
    assert not re.search(r"\[\d+\]", first["text"]), "a footnote marker in the first table"
    assert shot.stat().st_size > 0
    assert not seen["page_errors"], seen["page_errors"]
    assert not seen["console_errors"], seen["console_errors"]
    assert sorted(seen["widths"]) == sorted(images) and all(w > 0 for w in seen["widths"].values()), seen["widths"]
    assert all(ok and w > 0 for ok, w in seen["dom_images"]), seen["dom_images"]


def test_browser_check_catches_broken_figures_and_console_errors(tmp_path):
    """The browser check itself can fail: a figure that does not decode and a console error are both seen."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    plt.figure(figsize=(2, 1)).savefig(buf, format="png")
    plt.close("all")
    good = "data:image/png;charset=utf8;filename=good.png;base64," + base64.b64encode(buf.getvalue()).decode()
    bad = "data:image/png;charset=utf8;filename=bad.png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\nbroken").decode()
    page = tmp_path / "report.html"
    page.write_text(f"""<html><head><title>t</title><script>
        var results = {{"good.png": {{"name": "good.png", "mime_type": "image/png", "data_uri": "{good}"}},
                        "bad.png": {{"name": "bad.png", "mime_type": "image/png", "data_uri": "{bad}"}}}};
        console.error("something failed");
        </script></head><body>report</body></html>""")
    assert report_images(page.read_text()) == ["good.png", "bad.png"]
    seen = open_in_browser(page, tmp_path / "chromium-profile")
    assert seen["widths"]["good.png"] == 200 and seen["widths"]["bad.png"] == 0
    assert seen["console_errors"] == ["something failed"]
