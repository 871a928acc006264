"""`moplace ui` opened in a real browser (headless Chromium driven by Playwright): the
experiment page lists the search, the run page shows its metrics, the artifact view shows a
figure. Screenshots are kept in test-output/browser/ at the project root."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from moplace.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
OUTPUT = Path(__file__).resolve().parent.parent / "test-output" / "browser"

pytestmark = [
    pytest.mark.slow,  # MLflow's server and a browser: about a minute
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian package "
                       "chromium; .ci/run installs it where apt-get can)"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def first_line(proc, timeout: float) -> str:
    box = []
    reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return box[0] if box else ""


def test_the_ui_shows_the_search_its_metrics_and_a_figure(tmp_path, capsys):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed "
                                   "(pip install -e '.[test]')")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["search", "pipedream:alexnet", "--cluster", "4xV100-NVLink", "--searcher",
                 "random", "--budget", "40", "--tracking-uri", uri, "--out", str(tmp_path),
                 "--figures", "inline", "--json"]) == 0
    run_id = json.loads(capsys.readouterr().out)["mlflow_run_id"]
    port = free_port()
    ui = subprocess.Popen([sys.executable, "-m", "moplace", "ui", "--port", str(port),
                           "--tracking-uri", uri], stdout=subprocess.PIPE, text=True)
    OUTPUT.mkdir(parents=True, exist_ok=True)
    try:
        line = first_line(ui, 120)
        match = re.search(r"(http://\S+)/#/experiments/(\d+)/runs\?workflowType=machine_learning"
                          r"&viewStateShareKey=moplace", line)
        assert match, f"moplace ui printed {line!r}"
        base, exp = match.group(1), match.group(2)
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(match.group(0))
            page.get_by_text("random on alexnet", exact=True).first.wait_for(timeout=60_000)
            page.set_viewport_size({"width": 3000, "height": 900})  # the grid draws what fits
            # the run list shows moplace's key figures, no column chosen by hand (the saved
            # view the link names; MLflow 3.17, the version pyproject.toml pins)
            for column in ("best_runtime_ms", "best_peak_memory_GiB", "hypervolume", "graph",
                           "cluster", "searcher", "evaluations"):
                page.get_by_role("columnheader", name=column, exact=True).first.wait_for(
                    timeout=30_000)
            page.get_by_text("alexnet", exact=True).first.wait_for(timeout=10_000)
            page.screenshot(path=str(OUTPUT / "experiment.png"))
            page.set_viewport_size({"width": 1400, "height": 900})

            page.goto(f"{base}/#/experiments/{exp}/runs/{run_id}?workflowType=machine_learning")
            page.get_by_text("best_runtime_ms").first.wait_for(timeout=60_000)
            text = page.inner_text("body")
            for shown in ("hypervolume", "graph_hash", "alexnet"):
                assert shown in text, f"{shown!r} is not on the run page"
            page.screenshot(path=str(OUTPUT / "run.png"), full_page=True)

            page.goto(f"{base}/#/experiments/{exp}/runs/{run_id}/artifacts/figures/"
                      f"front_pairs.png?workflowType=machine_learning")
            page.wait_for_function("() => Array.from(document.images).some("
                                   "i => i.complete && i.naturalWidth > 500)", timeout=60_000)
            page.screenshot(path=str(OUTPUT / "figure.png"))
            browser.close()
        for name in ("experiment.png", "run.png", "figure.png"):
            assert (OUTPUT / name).stat().st_size > 10_000
    finally:
        ui.send_signal(signal.SIGTERM)
        ui.wait(30)
    # the UI took MLflow's server (and what it started) down with it
    left = subprocess.run(["pgrep", "-f", f"--port {port}"], capture_output=True, text=True)
    assert left.stdout.strip() == "", "MLflow's server outlived moplace ui"
    assert os.path.isdir(OUTPUT)
