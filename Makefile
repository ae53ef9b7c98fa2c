# flashviz: `make lab` serves the explainer in JupyterLab, `make test` runs every test.
# Both create ./.venv on first use (Python >= 3.10 is all they need).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.flashviz-installed
HOST   ?= 127.0.0.1
PORT   ?= 8888
PRESENT_PORT ?= 8866
LESSONS  := lessons

.PHONY: lab test check lint setup ptx bench present clean lessons-reset docs readme-gif book

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet uv || true

$(STAMP): $(BIN)/python pyproject.toml
	@if [ -x $(BIN)/uv ]; then \
	  $(BIN)/uv pip install --python $(BIN)/python --quiet -e ".[lab,app,test,book]"; \
	else \
	  $(BIN)/python -m pip install --quiet -e ".[lab,app,test,book]"; \
	fi
	touch $(STAMP)

setup: $(STAMP)

## Open the explainer in JupyterLab on 127.0.0.1 (token authentication stays on), from lessons/:
## a git-ignored working copy of notebooks/, so answers, outputs and exports never touch tracked files.
## --lab then starts JupyterLab there with the arguments of flashviz.lessons.lab_args (the ones
## tests/browser/test_lab_layout.py starts it with): 00_start_here.ipynb opens alone, every time;
## the layout is kept in lessons/.workspaces/, cleared at each start, not in ~/.jupyter/lab/workspaces
## (whose default workspace reopened every chapter left open, each starting a kernel).
lab: $(STAMP)
	$(BIN)/python -m flashviz.lessons --to $(LESSONS) --from notebooks --lab -- --ip=$(HOST) --port=$(PORT)

## Replace the working copy's notebooks with the current chapters (yours go to lessons/.previous/).
lessons-reset: $(STAMP)
	$(BIN)/python -m flashviz.lessons --to $(LESSONS) --from notebooks --reset

## Lint (ruff: pyflakes, pycodestyle, import order, bugbear; [tool.ruff] in pyproject.toml), compile
## every CUDA kernel to PTX (when nvcc is present), then run every test.
## -DFLASHVIZ_PTX_CHECK makes each .cu instantiate its templates, so their bodies really compile;
## a kernel that uses Hopper's wgmma (itself or through fv_wgmma.cuh) is compiled for the
## arch-specific target compute_90a.
## pytest runs twice: every test but the browser's on WORKERS processes (pytest-xdist, one test file
## per worker at a time), then the browser tests alone and in order (they drive a real JupyterLab,
## Voila and chromium, and time what the page shows: two at once on a 2-core box made them slower,
## not faster). Both always run; the target fails if either did.
WORKERS ?= auto
test: $(STAMP) lint ptx
	@$(BIN)/python -m pytest -q -n $(WORKERS) --dist loadfile -m "not browser"; a=$$?; \
	$(BIN)/python -m pytest -q -m browser; b=$$?; \
	echo "pytest: not browser exit $$a, browser exit $$b"; test $$a -eq 0 -a $$b -eq 0

## The quick tier for working (6–8 minutes on a 2-core box, 2026-12-06): lint, the core tests, and one
## widget test file per chapter, without the cases marked slow, browser or gpu. CI runs `make test`.
CHECK_TESTS = tests/core tests/chapters/test_memory_wall.py tests/chapters/test_online_widget.py \
  tests/chapters/test_explorer.py tests/chapters/test_blocksize.py tests/chapters/test_causal_widget.py \
  tests/chapters/test_loop_order.py tests/chapters/test_backward_widget.py tests/chapters/test_timeline_widget.py \
  tests/chapters/test_fa3_figures.py tests/chapters/test_decode_widget.py tests/chapters/test_app.py
check: $(STAMP) lint
	$(BIN)/python -m pytest -q -n $(WORKERS) --dist loadfile -m "not slow and not browser and not gpu" $(CHECK_TESTS)

lint: $(STAMP)
	$(BIN)/ruff check .

ptx:
	@if command -v nvcc >/dev/null 2>&1; then \
	  for cu in kernels/*.cu; do \
	    arch=sm_90; if grep -q "wgmma.mma_async\|fv_wgmma.cuh\|fv_attn.cuh" $$cu; then arch=compute_90a; fi; \
	    echo "nvcc -arch=$$arch --ptx $$cu"; \
	    nvcc -std=c++17 -arch=$$arch --ptx -DFLASHVIZ_PTX_CHECK -o /dev/null $$cu || exit 1; \
	  done; \
	else echo "nvcc not found: skipping the PTX compile check"; fi

## Serve the chapters as an app (Voila, no code cells) on 127.0.0.1:8866 (its own port, so it runs
## beside `make lab`); PRESENTER=1 for a projector; PRESENT_PORT=... for another port;
## NO_PREFETCH=1 to make each chapter only when picked (a small server shared by a class).
present: $(STAMP)
	$(BIN)/python -m flashviz.present --port=$(PRESENT_PORT) $(if $(PRESENTER),--presenter,) $(if $(NO_PREFETCH),--no-prefetch,)

## docs/results.md and the README's table of GPU results, made from the committed records
## (benchmarks/results/); tests/core/test_docs.py checks that they match (`flashviz report --check`).
docs: $(STAMP)
	$(BIN)/python -m flashviz.report

## The README's animated picture (docs/images/tile_explorer.gif), by flashviz's own GIF export.
readme-gif: $(STAMP)
	$(BIN)/python scripts/make_readme_gif.py

## The lessons as a static book, readable before installing anything: every chapter executed (a cell
## error fails it), each widget shown as an animation exported by its own save_gif; no CDN needed
## to read it. Into build/book/html (open index.html); scripts/make_book.py, book/conf.py.
book: $(STAMP)
	$(BIN)/python scripts/make_book.py

## On a machine with a GPU and CuPy: correctness grid + timings, JSON into benchmarks/results/.
bench: $(STAMP)
	$(BIN)/python benchmarks/bench_gpu.py

clean:
	rm -rf $(VENV) build *.egg-info
