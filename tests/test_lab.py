"""`make lab` starts JupyterLab on the course with nbgrader's Validate extension, from the pinned environment."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request

from twoprim.notebooks import ROOT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str):
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.read()


def test_make_lab_serves_the_course_with_validate(tmp_path):
    port, token = _free_port(), "two-primitives-test"
    args = (f"--no-browser --ip=127.0.0.1 --port={port} --IdentityProvider.token={token} "
            f"--ServerApp.open_browser=False" + (" --allow-root" if os.geteuid() == 0 else ""))  # CI runs as root
    proc = subprocess.Popen(["make", "lab", f"LAB_ARGS={args}"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status, _ = _get(f"{base}/api/status?token={token}")
                break
            except OSError:
                assert proc.poll() is None, f"make lab exited early:\n{proc.stdout.read()}"
                assert time.monotonic() < deadline, "JupyterLab did not answer within 60 s"
                time.sleep(0.5)
        status, body = _get(f"{base}/api/contents/lessons/00_start_here.ipynb?token={token}&content=0")
        assert status == 200 and json.loads(body)["type"] == "notebook"
        status, body = _get(f"{base}/lab?token={token}")
        assert status == 200 and b"@jupyter/nbgrader" in body, "nbgrader's lab extension (Validate) is not loaded"
    finally:
        subprocess.run(["kill", "--", f"-{proc.pid}"], check=False)
        proc.wait(timeout=30)
