"""Full-speed bursts at the animated widgets in JupyterLab (default settings: comms over
subshells) and in Voilà: the kernel never dies and the browser never shows a mixed frame
(issue 20). A bounded run of the harness tests/browser/stress.py (its long runs are the records
benchmarks/results/stress-*.json); the kernel side of the same check is
tests/chapters/test_draw_lock.py.

Skipped when chromium or playwright is missing (.ci/run installs both).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import ARTIFACTS
from .servers import CHROMIUM
from .stress import WIDGETS

pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)", allow_module_level=True)

pytestmark = pytest.mark.browser

#: bursts per front end: one at each widget of the harness, in its order (a burst takes ~10-25 s
#: here with the kernel catching up: ~3 minutes each)
BURSTS = len(WIDGETS)


@pytest.mark.parametrize("front_end", ["lab", "voila"])
def test_full_speed_bursts_never_kill_the_kernel_nor_mix_frames(front_end):
    from .servers import ROOT
    from .stress import run

    out = ARTIFACTS / f"stress_{front_end}.json"
    rec = run(front_end, BURSTS, out, ROOT, seed=1, artifacts=ARTIFACTS / f"stress_{front_end}", log=lambda s: None)
    deaths = "\n\n".join(f"burst {d['burst']} ({d.get('widget')}):\n{d['excerpt']}" for d in rec["deaths"])
    assert rec["n_deaths"] == 0, f"the {front_end} kernel died {rec['n_deaths']} times under the bursts:\n{deaths}"
    assert rec["bursts"] == BURSTS
    # every sample was compared with the images of its window: none blank, most pixel for pixel
    assert rec["samples"] >= BURSTS * 5 and rec["samples_blank_or_before_first_frame"] == 0, rec["samples"]
    assert rec["n_mixed"] == 0, (f"{front_end}: {rec['n_mixed']} browser samples were no whole frame the kernel "
                                 f"sent (PNGs in {rec['artifacts']}): {json.dumps(rec['mixed'][:5])}")
    assert rec["n_kernel_inconsistent"] == 0, rec["kernel_inconsistent_frames"][:5]
    # the comparison can tell: a made-up half-and-half frame was caught every time it was tried
    caught = rec["self_check_mixed_caught"]
    assert caught["tried"] >= 1 and caught["caught"] == caught["tried"], caught
