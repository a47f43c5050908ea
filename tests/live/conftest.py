"""A JupyterLab server on 127.0.0.1 (token-protected) and Debian's Chromium driven by Playwright."""
from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.browser.conftest import chromium_path

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def jupyter(tmp_path_factory):
    """(base URL, token, notebook folder) of a JupyterLab started for this test session.

    The server runs this environment's Python kernel in a scratch folder with copies of
    the notebooks; its settings, workspaces and runtime files live in scratch folders too,
    so nothing of the user's Jupyter set-up is read or changed.
    """
    root = tmp_path_factory.mktemp("notebooks")
    state = tmp_path_factory.mktemp("jupyter-state")
    port, token = _free_port(), secrets.token_hex(16)
    # every cell in the DOM (JupyterLab 4 otherwise may leave cells outside the view unrendered)
    tracker = state / "settings" / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True)
    tracker.write_text('{"windowingMode": "none"}')
    news = state / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text('{"fetchNews": "false", "checkForUpdates": false}')  # no pop-up over the page
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(state / "config"), JUPYTER_RUNTIME_DIR=str(state / "runtime"),
               IPYTHONDIR=str(state / "ipython"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               MPLBACKEND="Agg")
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
               "--LabApp.expose_app_in_browser=True", f"--LabApp.user_settings_dir={state / 'settings'}",
               f"--LabApp.workspaces_dir={state / 'workspaces'}", "--LabApp.news_url=",
               "--ServerApp.port_retries=0", "--LabApp.extension_manager=readonly"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # CI and the project's machines run as root
        command.append("--allow-root")
    log = open(state / "server.log", "w")
    server = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail("JupyterLab did not start:\n" + (state / "server.log").read_text()[-3000:])
        time.sleep(0.5)
    try:
        yield base, token, root
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_path(), headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"])
        yield browser
        browser.close()


def copy_notebook(root: Path, name: str) -> Path:
    source = ROOT / "chapters" / name
    shutil.copy2(source, root / name)
    return root / name
