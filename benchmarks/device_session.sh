#!/usr/bin/env bash
# One step of a GPU session on the lent device machine (CuPy, torch and the CUDA tools there; the
# repository copied without .git). Each step fits one device command (at most 10 minutes) and writes
# what it makes under $OUT; commit what comes back under benchmarks/results/.
#
#   FLASHVIZ_COMMIT=<sha> bash benchmarks/device_session.sh <step> [<step> ...]
#
# Steps, in the order a session takes them (planned seconds):
#   tests      the gpu-marked tests → tests-<device>-<date>.json                          (~250)
#   timelines  the fa3 and decode timelines (record_timelines.py --kernels fa3,decode)      (~90)
#   decode     the decode benchmark, --quick first then the full run → decode-*.json       (~180)
#   store      recompute versus store → storep-*.json                                       (~120)
#   bwd        the backward benchmark → bwd-*.json                                          (~200)
#   mma        the forward benchmark → mma-*.json                                           (~290)
#   abfa3      fa3 builds A/B against cuDNN in alternating rounds (benchmarks/ab_fa3.py: the
#              dynamic tile scheduler, fa3 v6) → ab-fa3.json, 300 s at most                  (~240)
#   abbwd      the tensor-core backward, one pipeline stage against two (benchmarks/ab_bwd.py:
#              bits, then kernel-only in alternating rounds) → ab-bwd.json, 300 s at most     (~200)
#   sanitize   compute-sanitizer memcheck and racecheck on the decode, backward and fa3
#              launches                                                                      (~300)
# Wheels the device lacks (ipywidgets, ipympl, ...: .whl/, carried, built for its Python) are
# installed into /tmp/site first when present.
set -u
export OUT=${OUT:-benchmarks/results}          # exported: ab_fa3.py / ab_bwd.py write into $OUT
mkdir -p "$OUT"
# once a machine; to run steps side by side, call this script with no step first (it installs, then exits)
if [ -f /tmp/site/.installed ]; then
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
elif [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >/dev/null 2>&1 && touch /tmp/site/.installed && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export FLASHVIZ_CACHE=${FLASHVIZ_CACHE:-/tmp/flashviz-cubin}
status=0
# RESULTS: where a copy of $OUT is packed (a tarball) after every step, so a call stopped by its time
# limit still brings back the steps it finished
for step in "$@"; do
  echo "=== $step: $(date -u +%H:%M:%S)"
  case "$step" in
    tests)     python3 benchmarks/run_gpu_tests.py || status=1 ;;
    timelines) python3 benchmarks/record_timelines.py --out "$OUT" --kernels fa3,decode || status=1 ;;
    decode)    python3 benchmarks/bench_decode.py --quick --out "$OUT" && python3 benchmarks/bench_decode.py --out "$OUT" \
                 || status=1 ;;
    store)     python3 benchmarks/bench_store_p.py --out "$OUT" || status=1 ;;
    bwd)       python3 benchmarks/bench_bwd.py --out "$OUT" || status=1 ;;
    mma)       python3 benchmarks/bench_mma.py --out "$OUT" || status=1 ;;
    abfa3)     timeout 300 python3 benchmarks/ab_fa3.py --rounds 9 --n 1024,2048,8192 || status=1 ;;
    abbwd)     timeout 300 python3 benchmarks/ab_bwd.py --rounds 7 || status=1 ;;
    sanitize)                   # SANITIZE_TOOLS, SANITIZE_SCRIPTS narrow it; each run stops at SANITIZE_TIMEOUT s
      for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
        for s in ${SANITIZE_SCRIPTS:-sanitize_decode sanitize_bwd sanitize_fa3}; do
          timeout "${SANITIZE_TIMEOUT:-300}" compute-sanitizer --tool "$tool" --print-limit 20 python3 "benchmarks/$s.py" \
            > "$OUT/sanitize-$s-$tool.txt" 2>&1
          echo "$s $tool: exit $? — $(tail -n 2 "$OUT/sanitize-$s-$tool.txt" | tr '\n' ' ')"
        done
      done ;;
    *) echo "unknown step $step (tests timelines decode store bwd mma abfa3 abbwd sanitize)"; status=2 ;;
  esac
  [ -n "${RESULTS:-}" ] && tar czf "$RESULTS/results.tgz" -C "$OUT" .
done
exit $status
