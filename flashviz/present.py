"""``flashviz present``: serve the chapters as an app (Voilà: no code cells), for class.

Binds to 127.0.0.1 unless ``--ip`` says otherwise; a token protects it (printed in the URL).
``--presenter`` enlarges figures and fonts for a projector. ``--no-prefetch``: chapters are made
only when picked (by default the next chapter is made in each kernel's idle time: on a small
server shared by a whole class, each student's kernel then works ahead at the same moment).
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

APP_NOTEBOOK = "app.ipynb"


APP_SOURCE = (
    "%matplotlib widget\nimport os\nfrom flashviz.widgets.app import ChapterApp\n\n"
    "app = ChapterApp(presenter=os.environ.get(\"FLASHVIZ_PRESENTER\") == \"1\",\n"
    "                 prefetch=os.environ.get(\"FLASHVIZ_PREFETCH\") != \"0\")\napp"
)


def app_notebook(root: Path) -> Path:
    """notebooks/app.ipynb under ``root`` (or ``root`` itself); outside the repository (an
    installed flashviz) a one-cell app notebook is written to a temporary folder."""
    for candidate in (root / "notebooks" / APP_NOTEBOOK, root / APP_NOTEBOOK):
        if candidate.exists():
            return candidate
    import tempfile

    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(APP_SOURCE)], metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    path = Path(tempfile.mkdtemp(prefix="flashviz-app-")) / APP_NOTEBOOK
    nbformat.write(nb, path)
    return path


#: seconds the kernel of a page that went away may sit idle before it is shut down. Each page load
#: starts a kernel of its own (150-250 MB); Voilà's page asks for its kernel's shutdown when it
#: unloads (accepted: flashviz.voila_page gives the page the xsrf cookie the request needs), and
#: this catches the kernels of pages that could not ask (a browser that crashed or was killed, a
#: lost connection, a laptop closed for longer than this)
CULL_IDLE_S = 600


def cull_args(idle_s: int) -> list[str]:
    """Voilà's options that shut down the kernels of closed pages idle for ``idle_s`` seconds
    (jupyter_server's culler: ``cull_connected`` stays False, so a page still open keeps its kernel
    however long it is left alone); checked every min(60, idle_s / 2) s. ``idle_s = 0``: none."""
    if idle_s <= 0:
        return []
    return [f"--MappingKernelManager.cull_idle_timeout={idle_s}",
            f"--MappingKernelManager.cull_interval={max(1, min(60, idle_s // 2))}",
            "--MappingKernelManager.cull_connected=False"]


def trust(nb: Path) -> None:
    """Sign the app notebook as trusted in this user's Jupyter signature store (the file itself is
    not changed), so Voilà does not warn "Notebook app.ipynb is not trusted" on every page load."""
    import nbformat
    from nbformat.sign import NotebookNotary

    NotebookNotary().sign(nbformat.read(nb, as_version=4))


def port_problem(ip: str, port: int) -> str | None:
    """None if (ip, port) can be bound now, else one line saying why not (e.g. the port is
    taken by another server, such as JupyterLab from ``make lab``)."""
    import errno
    import socket
    try:
        with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET) as s:
            s.bind((ip, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return f"port {port} on {ip} is already in use (another server: a second make present, or another program)"
        return f"cannot listen on {ip}:{port} ({exc.strerror or exc})"
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="flashviz present", description="Serve the flashviz chapters with Voilà.")
    p.add_argument("--ip", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8866)
    p.add_argument("--token", default=None, help="access token (default: a random one, printed)")
    p.add_argument("--root", default=".", help="folder holding notebooks/app.ipynb (default: current folder)")
    p.add_argument("--presenter", action="store_true", help="large figures and fonts for a projector")
    p.add_argument("--no-prefetch", action="store_true",
                   help="make a chapter only when it is picked (default: the next one ahead, in idle time)")
    p.add_argument("--cull-idle", type=int, default=CULL_IDLE_S, metavar="SECONDS",
                   help="shut down the kernel of a page that went away (crashed, lost its connection) once it "
                        f"has been idle this long (default {CULL_IDLE_S}; 0: never; a page still connected keeps its "
                        "kernel)")
    p.add_argument("--no-browser", action="store_true")
    args = p.parse_args(argv)
    if shutil.which("voila") is None and subprocess.run([sys.executable, "-c", "import voila"]).returncode:
        print("flashviz present needs Voilà: pip install 'flashviz[app]'", file=sys.stderr)
        return 2
    if not 1 <= args.port <= 65535:
        print(f"flashviz present: --port must be between 1 and 65535, got {args.port}", file=sys.stderr)
        return 2
    if args.cull_idle < 0:
        print(f"flashviz present: --cull-idle must be 0 (never) or a number of seconds, got {args.cull_idle}",
              file=sys.stderr)
        return 2
    problem = port_problem(args.ip, args.port)
    if problem:
        print(f"flashviz present: {problem}; choose another with --port (make present PRESENT_PORT=...)",
              file=sys.stderr)
        return 2
    root = Path(args.root).resolve()
    nb = app_notebook(root)
    trust(nb)
    token = args.token or secrets.token_hex(16)
    env = dict(os.environ, FLASHVIZ_PRESENTER="1" if args.presenter else "0",
               FLASHVIZ_PREFETCH="0" if args.no_prefetch else "1")
    cmd = [sys.executable, "-m", "flashviz.voila_page", str(nb), f"--Voila.ip={args.ip}", f"--port={args.port}",
           f"--token={token}", "--show_tracebacks=False", f"--Voila.root_dir={nb.parent}",
           "--Voila.port_retries=0",    # serve on this port or fail: never on another than the URL printed
           *cull_args(args.cull_idle)]
    if args.no_browser:
        cmd.append("--no-browser")
    print(f"flashviz present: http://{args.ip}:{args.port}/?token={token}", flush=True)
    os.execve(sys.executable, cmd, env)     # become Voilà: stopping this process stops the server


if __name__ == "__main__":
    sys.exit(main())
