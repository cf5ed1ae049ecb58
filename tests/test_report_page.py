"""index.html: self-contained, and rendered by a real headless Chromium with every chart loaded."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import report_rows

from cnnbench import envinfo
from cnnbench.report import page
from cnnbench.report.train import build_report

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
# appended to a copy of the page only: once everything has loaded, record what the browser made of each image
PROBE = r"""<script>
window.addEventListener("load", () => {
  const images = [...document.images];
  document.body.dataset.images = images.length;
  document.body.dataset.loaded = images.filter(i => i.complete && i.naturalWidth > 0).length;
  document.body.dataset.broken = images.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt).join(";");
  const items = [...document.querySelectorAll("li")];
  document.body.dataset.items = items.length;
  document.body.dataset.bullets = items.filter(i => getComputedStyle(i).display === "list-item").length;
  document.body.dataset.markdown = document.body.innerText.split("\n").filter(t => /^(#+ |- |\|)/.test(t)).length;
});
</script>"""


def _browser() -> str:
    found = next((shutil.which(name) for name in BROWSERS if shutil.which(name)), None)
    assert found, "no headless browser: install Debian's chromium package (`make browser` does)"
    return found


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"  # a fresh one per launch
    command = [_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
               f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--window-size=1280,2400", *args]
    env = {**os.environ, "HOME": str(tmp_path)}
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("page")
    csv = tmp / "set.csv"
    report_rows.scaling_sweep(csv)
    report_rows.inference(csv)
    report = build_report([csv], tmp / "set")
    return tmp, report


def test_the_page_holds_every_chart_and_needs_nothing_else(built):
    _, report = built
    text = (report.out_dir / "index.html").read_text()
    charts = [name for name, files in report.files.items() if any(p.suffix == ".svg" for p in files)]
    assert {"throughput", "efficiency", "ablation", "serve_latency", "infer_throughput"} <= set(charts)
    assert text.count("<img ") == len(charts)
    for name in charts:
        assert f'id="{name}"' in text
    # no script, no reference to anything outside the file
    assert "<script" not in text and "<link" not in text and "url(" not in text
    for reference in re.findall(r'(?:src|href)="([^"]*)"', text):
        assert reference.startswith("data:image/svg+xml;base64,"), reference[:60]
    assert "emulated CPU devices" in text  # the warning
    assert "| smallcnn |" not in text and "<td>smallcnn</td>" in text  # the summary as a table
    assert "GPU-X" in text and "abc123" in text and "torch=1.0" in text  # device, git sha, versions


def _rendered(tmp: Path, report) -> dict[str, str]:
    """What Chromium made of the page: the PROBE's counts (images, list items, Markdown left as text)."""
    probe = report.out_dir / "probe.html"
    probe.write_text((report.out_dir / "index.html").read_text().replace("</body>", PROBE + "</body>"))
    done = _chromium(tmp, "--dump-dom", probe.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", done.stdout).group(1)
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console
    return dict(re.findall(r'data-(\w+)="([^"]*)"', body))


def test_chromium_renders_the_page_with_every_image_and_no_console_error(built):
    tmp, report = built
    found = _rendered(tmp, report)
    assert found["broken"] == "" and found["loaded"] == found["images"] != "0", found

    shot = tmp / "page.png"
    done = _chromium(tmp, f"--screenshot={shot}", (report.out_dir / "index.html").as_uri())
    assert done.returncode == 0 and shot.stat().st_size > 0, done.stderr[-2000:]
    from matplotlib.image import imread

    pixels = imread(shot)[..., :3]
    assert pixels.shape[:2] == (2400, 1280)
    coloured = np.abs(pixels - pixels.mean(axis=2, keepdims=True)).max(axis=2) > 0.15
    assert coloured.mean() > 0.002  # the framework colours of the charts are on screen, not a blank page


def test_an_inference_page_renders_its_markdown_and_summary_md_holds_the_table(tmp_path):
    """#32.4: no literal `## Noisy measurements` heading, bullets on the noisy list (as Chromium draws
    them), and the inference summary table in summary.md, not only the noisy list."""
    csv = tmp_path / "infer.csv"
    report_rows.inference(csv)
    report = build_report([csv], tmp_path / "infer")
    summary = (report.out_dir / "summary.md").read_text()
    assert "| resnet50 | torch | bf16 | sweep |" in summary and "## Noisy measurements" in summary
    text = (report.out_dir / "index.html").read_text()
    assert "## " not in text and "<td>resnet50</td>" in text and '<h2 id="noisy">' in text
    found = _rendered(tmp_path, report)
    assert found["markdown"] == "0", found
    assert int(found["items"]) > 3 and found["bullets"] == found["items"], found


def test_the_environment_names_the_gpu_driver_the_row_recorded(tmp_path, monkeypatch):
    tool = tmp_path / "bin" / "nvidia-smi"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho 570.86.15\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
    envinfo.gpu_driver.cache_clear()
    try:
        versions = envinfo.stack_versions("torch", "ddp", gpu=True)
        assert versions.endswith(";nvidia-driver=570.86.15")
        assert "nvidia-driver" not in envinfo.stack_versions("torch", "ddp")  # CPU rows: no driver
    finally:
        envinfo.gpu_driver.cache_clear()
    import pandas as pd

    frame = pd.DataFrame([report_rows.train_row("a", "torch", "ddp", "resnet50", 1, 100.0,
                                                stack_versions=versions)])
    env = page.environment(frame)
    assert env.loc[0, "driver"] == "570.86.15"
    assert page.environment(frame.assign(stack_versions="torch=1.0")).loc[0, "driver"] == "not recorded"
