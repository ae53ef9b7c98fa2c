"""A trace buffer as a kernel built with its timeline switch writes it (kernels/fv_trace.cuh), for
the CPU tests of ``tracing.decode`` and its users."""

from __future__ import annotations

import numpy as np

from flashviz.gpu.tracing import FV_HEAD, FV_MAGIC, FV_NSTAGE, trace_words
from flashviz.records.timeline import STAGES


def trace_buffer(grid, groups, jmax, plan, ns_per_cycle=0.5, gt_origin=10_000_000, c_origin=5_000_000, bases=None):
    """A trace buffer as the kernel writes it. plan: {cta: (sm, i, start_ns, [(group, j, stage,
    t0_ns, t1_ns) from the block's start], end_ns)}; bases: {cta: [each group's writer start in
    cycles from the header's, or None for a writer that never started]} (default 3·group)."""
    Tr, H, B = grid
    stride = FV_HEAD + groups + FV_NSTAGE * groups * (jmax + 1)
    buf = np.zeros(trace_words(Tr * H * B, groups, jmax), np.uint64)
    for cta, (sm, i, start, evs, end) in plan.items():
        npc = ns_per_cycle[cta] if isinstance(ns_per_cycle, dict) else ns_per_cycle
        rec = buf[cta * stride:(cta + 1) * stride]
        c0 = c_origin + 1000 * cta                   # each SM's clock has its own origin
        rec[0], rec[1] = gt_origin + start, gt_origin + start + end
        rec[2], rec[3] = c0, c0 + round(end / npc)
        i, h, b = i if isinstance(i, tuple) else (i, 0, 0)           # the block's work: i | h << 24 | b << 44
        rec[4], rec[5] = sm, i | (h << 24) | (b << 44)
        rec[6], rec[7] = len({j for _, j, *_ in evs if j >= 0}), FV_MAGIC
        offs = (bases or {}).get(cta, [3 * g for g in range(groups)])
        gbase = [c0 + (o or 0) for o in offs]        # each writer's own start clock
        rec[FV_HEAD:FV_HEAD + groups] = [0 if o is None else b for o, b in zip(offs, gbase)]
        for g, j, stage, t0, t1 in evs:
            k = FV_HEAD + groups + (g * (jmax + 1) + j + 1) * FV_NSTAGE + STAGES.index(stage)
            a, b = (c0 + round(t / npc) - gbase[g] for t in (t0, t1))
            rec[k] = (b << 32) | a
    return buf
