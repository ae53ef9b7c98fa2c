"""Start JupyterLab or Voilà on a free 127.0.0.1 port with a token, in throwaway directories.

The kernels these servers start write their own stderr (file descriptor 2) into the server's
log (``server.log`` beside the work folder): ipykernel 7 would otherwise pipe fd 2 to the page
(``IPKernelApp.capture_fd_output``), and what a dying kernel writes last (glibc's heap check,
faulthandler's stacks) would be lost with it. A notebook that enables faulthandler there must
pass ``file=sys.__stderr__`` (the kernel's ``sys.stderr`` then has no file descriptor).
JupyterLab's settings are its defaults (``commsOverSubshells`` included), except that every
cell stays in the DOM. Every throwaway folder lives under one folder a test process makes
(``scratch``), removed when the process exits: a server started again in an earlier one's folder
(``tmp``) still finds it, and no run leaves copies of the notebooks in /tmp."""

from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
#: a pixel differs when a colour channel differs by more than this many levels (antialiasing)
DIFF_LEVELS = 24
#: the largest share of pixels that may differ between the browser's canvas and the kernel's
#: rendering of the same frame
MAX_DIFF_SHARE = 0.002
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: the kernels' configuration: their fd 2 stays the server's log (see the module's docstring)
KERNEL_CONFIG = {"IPKernelApp": {"capture_fd_output": False}}


def isolated_env(tmp: Path) -> dict:
    env = dict(os.environ)
    for var in ("HOME", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "MPLCONFIGDIR",
                "IPYTHONDIR"):
        d = tmp / var.lower()
        d.mkdir(parents=True, exist_ok=True)
        env[var] = str(d)
    profile = Path(env["IPYTHONDIR"]) / "profile_default"
    profile.mkdir(parents=True, exist_ok=True)
    (profile / "ipython_kernel_config.json").write_text(json.dumps(KERNEL_CONFIG))
    return env


_SCRATCH: list[Path] = []


def scratch(prefix: str) -> Path:
    """A new empty folder named ``prefix…`` under this process's scratch folder (made on first use,
    removed with everything in it when the process exits)."""
    if not _SCRATCH:
        _SCRATCH.append(Path(tempfile.mkdtemp(prefix="fv-browser-")))
        atexit.register(shutil.rmtree, _SCRATCH[0], ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=_SCRATCH[0]))


@contextmanager
def server(kind: str = "lab", notebook: str | None = None, extra_args=(), prepare=None, root: Path | None = None,
           tmp: Path | None = None, port: int | None = None):
    """Yield (base_url, token, workdir). kind: "lab", "make-lab" (what `make lab` runs: the
    working copy work/lessons/ made from work/notebooks/ and served with its arguments),
    "voila" (the app) or "voila-notebook" (the notebook named ``notebook`` in the work
    folder's notebooks/, which ``prepare(work)`` may write first). Notebooks are served from a
    copy (JupyterLab autosaves, and the committed notebooks must stay without outputs). root:
    the checkout whose notebooks are copied (default this one; the kernel imports flashviz from
    wherever PYTHONPATH points). tmp: the throwaway folder of an earlier server to start again
    in (its HOME, Jupyter folders and work folder as that one left them); port: its port
    (default a free one)."""
    tmp = Path(tmp) if tmp is not None else scratch(f"fv-{kind}-")
    work = tmp / "work"
    if not (work / "notebooks").exists():
        shutil.copytree(Path(root or ROOT) / "notebooks", work / "notebooks",
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
        if prepare is not None:
            prepare(work)
    port, token = port or free_port(), secrets.token_hex(16)
    env = isolated_env(tmp)
    if kind in ("lab", "make-lab"):
        # every cell in the DOM (JupyterLab 4 otherwise virtualises cells scrolled out of view,
        # and a test that counts widgets in page order would miss some)
        settings = Path(env["HOME"]) / ".jupyter" / "lab" / "user-settings" / "@jupyterlab" / "notebook-extension"
        settings.mkdir(parents=True, exist_ok=True)
        (settings / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
        env["JUPYTERLAB_SETTINGS_DIR"] = str(Path(env["HOME"]) / ".jupyter" / "lab" / "user-settings")
        cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               f"--IdentityProvider.token={token}", "--allow-root", f"--ServerApp.root_dir={work}",
               "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
        if kind == "make-lab":      # the Makefile's command, its arguments after --; this checkout's
            # flashviz first (an editable install may point at another checkout)
            env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
            cmd = [sys.executable, "-m", "flashviz.lessons", "--to", str(work / "lessons"), "--from",
                   str(work / "notebooks"), "--lab", "--", *[a for a in cmd[4:] if "root_dir" not in a]]
    elif kind == "voila-notebook":      # one notebook of the work folder, served by Voilà itself
        cmd = [sys.executable, "-m", "voila", str(work / "notebooks" / notebook), "--no-browser",
               f"--port={port}", f"--token={token}", "--Voila.ip=127.0.0.1", "--Voila.port_retries=0",
               f"--Voila.root_dir={work / 'notebooks'}"]
    else:
        cmd = [sys.executable, "-m", "flashviz.present", "--no-browser", f"--port={port}",
               f"--token={token}", f"--root={work}"]
    cmd += list(extra_args)
    log = open(tmp / "server.log", "a")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                if kind in ("lab", "make-lab"):
                    urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                else:   # Voilà runs the notebook on each page request: only wait for the port
                    socket.create_connection(("127.0.0.1", port), timeout=2).close()
                break
            except Exception:
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"{kind} server did not start:\n" + (tmp / "server.log").read_text()[-3000:]) \
                        from None
                time.sleep(0.5)
        yield base, token, work
    finally:
        # stop the server's process group (its kernels run in sessions of their own: jupyter_client
        # starts them with start_new_session, so a kernel can outlive a server killed outright)
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()


def open_notebook(page, base: str, token: str, front_end: str, name: str, lab_timeout_ms: int = 60_000,
                  voila_timeout_ms: int = 180_000) -> None:
    """Show the notebook ``notebooks/<name>`` of the server's work folder: in JupyterLab ("lab":
    open it, then Run → Run All Cells) or as the page Voilà serves ("voila"); the timeouts are for
    JupyterLab's first cell and for Voilà's page, in ms."""
    if front_end == "lab":
        page.goto(f"{base}/lab/tree/notebooks/{name}?reset&token={token}")
        page.wait_for_selector(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell", timeout=lab_timeout_ms)
        time.sleep(3)
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    else:
        page.goto(f"{base}/?token={token}", timeout=voila_timeout_ms)
