"""Voilà, run so that a closed page can shut its own kernel down (``flashviz present`` runs this).

Voilà's page asks for its kernel's shutdown when it unloads: ``navigator.sendBeacon`` POSTs to
``/voila/api/shutdown/<kernel id>`` with the ``_xsrf`` form field read from the page's ``_xsrf``
cookie. Voilà 0.5's page handler never sets that cookie (tornado sets it only when a handler reads
``xsrf_token``, and Voilà's templates do not), so the field is empty and jupyter_server refuses the
request — ``403 '_xsrf' argument missing from POST`` — and every closed page's kernel ran on until
the idle culler (seen 2026-12-02: four page loads, four kernels, 1.39 GB). Here Voilà's documented
``VoilaConfiguration.prelaunch_hook`` (called with the page's request handler before the page's
kernel starts) reads ``xsrf_token``, which sets the cookie on that page's response: the page's
beacon then carries a token that matches, and the shutdown is accepted. Nothing else changes: xsrf
checks stay on, the token still guards every request.

Usage: ``python -m flashviz.voila_page NOTEBOOK [voila options]`` — the same arguments as
``python -m voila``.
"""

from __future__ import annotations

import sys


def set_xsrf_cookie(handler, notebook=None, cwd=None):
    """Voilà prelaunch hook: make tornado set the ``_xsrf`` cookie on the page's response.

    ``handler``: the tornado RequestHandler serving the page (its ``xsrf_token`` property sets the
    cookie when the request has none). Returns None: the notebook is served unchanged."""
    handler.xsrf_token      # noqa: B018 -- reading the property is what sets the cookie
    return None


def main(argv=None) -> None:
    """Run Voilà with :func:`set_xsrf_cookie` as its prelaunch hook; ``argv``: Voilà's arguments."""
    from traitlets.config import Config
    from voila.app import Voila

    config = Config()
    config.VoilaConfiguration.prelaunch_hook = set_xsrf_cookie
    Voila.launch_instance(argv=sys.argv[1:] if argv is None else argv, config=config)


if __name__ == "__main__":
    main()
