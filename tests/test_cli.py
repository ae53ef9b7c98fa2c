import pytest

import flashviz as fv
from flashviz.cli import main, tables


def test_tables_match_the_closed_forms(capsys):
    assert main(["tables", "--d", "64", "--Br", "64", "--Bc", "64", "--itemsize", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    row = next(r for r in out if r.split() and r.split()[0] == "4096").split()
    std = fv.iomodel.standard_attention_io(4096, 4096, 64, itemsize=4).hbm_bytes / 2**20
    til = fv.iomodel.flash_forward_io(4096, 4096, 64, Br=64, Bc=64, itemsize=4).hbm_bytes / 2**20
    assert abs(float(row[1]) - std) < 0.1 and abs(float(row[2]) - til) < 0.1


def test_bad_block_is_a_one_line_error(capsys):
    assert main(["tables", "--Br", "0"]) == 2
    assert "Br must be" in capsys.readouterr().err
    assert "ratio" in tables()


@pytest.mark.recorded_data
def test_gpu_command_reports_no_gpu_and_recorded_results(capsys):
    assert main(["gpu"]) == 0
    out = capsys.readouterr().out
    assert "GPU usable: False" in out or "GPU usable: True" in out
    assert "Recorded on" in out and "H200" in out
    assert "'call' = public call (CUDA events, median), the headline" in out and "'kernel' = kernel-only" in out


def _table(out: str, title: str) -> list[list[str]]:
    """The rows (split into words) of the table whose first line starts with ``title``."""
    block = next(b for b in out.split("\n\n") if b.startswith(title))
    return [line.split() for line in block.splitlines()[2:]]


def test_tables_prints_three_tables_that_match_the_closed_forms(capsys):
    N, d, b, M = 2048, 64, 4, 232_448
    assert main(["tables", "--d", str(d), "--Br", "64", "--Bc", "64", "--itemsize", str(b), "--N", str(N),
                 "--sram", "H100/H200"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n\n") == 2
    # block-size sweep: FA2 traffic (2·Tr + 2)·N·d + N elements; working set 2·Br·d + 2·Bc·d + Br·Bc + 2·Br
    sweep = [r for r in _table(out, "Block-size sweep") if r[0].isdigit()]
    assert len(sweep) == 25
    for r in sweep:
        Br, Bc, Tr, Tc = map(int, r[:4])
        assert (Tr, Tc) == (-(-N // Br), -(-N // Bc))
        hbm = ((2 * Tr + 2) * N * d + N) * b / 2**20
        sram = (2 * Br * d + 2 * Bc * d + Br * Bc + 2 * Br) * b
        assert abs(float(r[4]) - hbm) < 0.006 and abs(float(r[5]) - sram / 1024) < 0.06
        assert r[6] == ("yes" if sram <= M else "NO")
    starred = [r for r in sweep if r[-1] == "*"]
    assert [tuple(map(int, r[:2])) for r in starred] == [(256, 64)]
    # backward: P is N² elements, lse N; standard backward (7·N² + 8·N·d)·b; tiled (7Nd + 4·Tc·Nd + 2·Tc·N + N)·b
    back = _table(out, "Backward")
    assert len(back) == 7
    for r in back:
        n = int(r[0])
        Tc = -(-n // 64)
        assert abs(float(r[1]) - n * n * b / 2**20) < 0.06 and abs(float(r[2]) - n * b / 1024) < 0.06
        assert abs(float(r[3]) - (7 * n * n + 8 * n * d) * b / 2**20) < 0.06
        assert abs(float(r[4]) - (7 * n * d + 4 * Tc * n * d + 2 * Tc * n + n) * b / 2**20) < 0.06
        assert r[3] == f"{fv.iomodel.standard_backward_io(n, n, d, itemsize=b).hbm_bytes / 2**20:.1f}"


def test_sweep_options_and_errors(capsys):
    assert main(["tables", "--sram", "toy", "--d", "128", "--itemsize", "8", "--order", "fa1", "--causal"]) == 0
    out = capsys.readouterr().out
    assert "FA1 order, causal" in out and "no configuration fits" in out
    assert main(["tables", "--sram", "50000", "--N", "512"]) == 0
    assert "custom: 48.8 KiB (50,000 bytes)" in capsys.readouterr().out
    assert main(["tables", "--sram", "TPU"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "unknown SRAM budget 'TPU'" in captured.err and captured.err.count("\n") == 1
    assert main(["tables", "--N", "0"]) == 2
    assert "N must be" in capsys.readouterr().err


def test_long_sweep_progress_bar_stays_off_the_table(capsys):
    from flashviz.cli import sweep_table

    text = sweep_table(N=65536, d=64, sram="A100", itemsize=2)
    assert "it/s" not in text and len(text.splitlines()) == 2 + 25 + 1
    assert "it/s" not in capsys.readouterr().out


def test_render_writes_a_gif_and_a_png(tmp_path):
    from PIL import Image

    assert main(["render", "tiles", "--out", str(tmp_path / "t.gif"), "--every", "5",
                 "--set", "N=64", "--set", "source=random"]) == 0
    im = Image.open(tmp_path / "t.gif")
    assert im.n_frames == len(range(0, 2 * (2 + 2 * 4), 5))       # N=64, 32-tiles: 20 steps, every 5th
    assert main(["render", "tiles", "--out", str(tmp_path / "f.png"), "--set", "N=64", "--frame", "3"]) == 0
    assert Image.open(tmp_path / "f.png").size[0] > 500


def test_render_bad_arguments_are_one_line(capsys, tmp_path):
    assert main(["render", "tiles", "--out", str(tmp_path / "x.gif"), "--set", "N=0"]) == 2
    assert "N must be" in capsys.readouterr().err
    assert main(["render", "tiles", "--out", str(tmp_path / "x.jpg"), "--set", "N=8"]) == 2
    assert ".gif or .mp4" in capsys.readouterr().err


def test_gpu_command_imports_no_widgets():
    import subprocess
    import sys

    code = "import sys; from flashviz.cli import main; main(['gpu']); print('ipywidgets' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("False")


@pytest.mark.recorded_data
def test_recorded_data_bench_without_gpu_prints_the_run_by_both_methods(capsys, monkeypatch):
    import json

    from flashviz import cli, gpu
    from flashviz.gpu import results as R

    monkeypatch.setattr(gpu, "gpu_status", lambda: (False, "no GPU in this test"))
    assert cli.main(["bench"]) == 0
    out = capsys.readouterr().out
    assert "No GPU here: no GPU in this test. Nothing was measured" in out and "NVIDIA H200" in out
    head = out.split("\n   d ")[0]                               # everything above the table names the methods
    assert "public call (the headline)" in head and "kernel-only" in head and "CUDA events" in head
    raw = json.loads(R.package_dir("flashviz.results").joinpath(R.latest_results("mma")["source_file"]).read_text())
    r = next(x for x in raw["bench"] if x["N"] == 4096 and x["d"] == 128 and not x["causal"])
    (line,) = [ln for ln in out.splitlines() if ln.replace("│", " ").split()[:3] == ["128", "no", "4096"]]
    w = line.replace("│", " ").split()
    assert w[3] == f"{r['flops'] / r['wgmma_call_ms'] / 1e9:.1f}"                  # TFLOP/s by public call
    assert w[4:8] == [f"{r['sdpa_flash_call_ms'] / r['wgmma_call_ms']:.2f}x",        # vs FA2, vs cuDNN: public call
                      f"{r['sdpa_cudnn_call_ms'] / r['wgmma_call_ms']:.2f}x",
                      f"{r['sdpa_flash_kernel_ms'] / r['wgmma_kernel_ms']:.2f}x",    # and kernel-only
                      f"{r['sdpa_cudnn_kernel_ms'] / r['wgmma_kernel_ms']:.2f}x"]
    n = sum(1 for c in raw["check"] if c["variant"] == "wgmma" and c["dtype"] == "float16")
    assert f"correctness wgmma float16: {n}/{n}" in out


def test_bench_plot_only_writes_the_figures(tmp_path, capsys):
    from flashviz import cli

    assert cli.main(["bench", "--plot-only", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Figures of the recorded run (mma-") and "TFLOP/s by public call (CUDA events" in out
    assert "block-sweep figures: kernel-only" in out
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 4 and all(n.endswith(".png") for n in names)
    assert any("sweep-d128" in n for n in names)
    assert any(n.startswith("dram-") for n in names) and any("sweep-d64" in n for n in names)
    assert all((tmp_path / n).stat().st_size > 10_000 for n in names)
