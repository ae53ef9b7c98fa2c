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


def test_render_decode_writes_a_png_and_a_gif(tmp_path):
    """Chapter 9's DecodeExplorer renders like the others (1 sequence, 8 KV heads, 256 keys)."""
    from PIL import Image

    assert main(["render", "decode", "--out", str(tmp_path / "d.png"), "--set", "Nk=256", "--set", "num_splits=2"]) == 0
    assert Image.open(tmp_path / "d.png").size[0] > 500
    assert main(["render", "decode", "--out", str(tmp_path / "d.gif"), "--every", "2", "--set", "Nk=512",
                 "--set", "num_splits=4"]) == 0
    assert Image.open(tmp_path / "d.gif").n_frames >= 2


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
    from flashviz.records import results as R

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


# ------------------------------------------------------------------ bad input: exit status 2, one line

def _bad_tree(tmp_path):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "folder.gif").mkdir()
    (tmp_path / "folder.png").mkdir()
    return tmp_path


BAD_ARGV = [  # (argv with {t} for a scratch folder, words the one stderr line must hold)
    # argparse's own errors: one line, no usage block
    ([], "the following arguments are required: cmd"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["tables", "--d", "x"], "argument --d: invalid int value: 'x'"),
    (["tables", "--itemsize", "3"], "argument --itemsize: invalid choice: 3"),
    (["tables", "--order", "fa3"], "argument --order: invalid choice: 'fa3'"),
    (["tables", "--bogus"], "unrecognized arguments: --bogus"),
    (["render", "tiles"], "the following arguments are required: --out"),
    (["render", "nope", "--out", "{t}/x.gif"], "argument widget: invalid choice: 'nope'"),
    (["render", "tiles", "--out", "{t}/x.gif", "--every", "x"], "argument --every: invalid int value"),
    # sizes and values
    (["tables", "--d", "0"], "--d must be an integer between 1 and 65,536, got 0"),
    (["tables", "--Br", "-8"], "--Br must be an integer between 1 and 65,536, got -8"),
    (["tables", "--N", "0"], "N must be an integer >= 1"),
    (["tables", "--N", str(10**12)], "more than 500,000 (a few seconds): pick N <= 825,792"),
    (["tables", "--N", str(10**40)], "pick N <= 825,792"),
    (["tables", "--sram", "-5"], "unknown SRAM budget '-5'"),
    (["tables", "--sram", "0"], "--sram (bytes) must be an integer between 1 and 1,099,511,627,776, got 0"),
    (["tables", "--sram", "1" + "0" * 400], "got an integer with 401 digits"),
    (["tables", "--d", "1" + "0" * 400], "--d must be an integer between 1 and 65,536"),
    (["tables", "--Bc", "100000"], "--Bc must be an integer between 1 and 65,536, got 100,000"),
    (["tables", "--N", "1" + "0" * 400], "at N = about 10^400"),
    (["render", "tiles", "--out", "{t}/x.gif", "--every", "0"], "--every must be an integer >= 1"),
    (["render", "tiles", "--out", "{t}/x.gif", "--fps", "0"], "fps must be a number above 0 and at most 100"),
    (["render", "tiles", "--out", "{t}/x.gif", "--fps", "inf"], "fps must be a number above 0"),
    (["render", "tiles", "--out", "{t}/x.gif", "--fps", "nan"], "fps must be"),
    (["render", "tiles", "--out", "{t}/x.gif", "--fps", "500"], "at most 100"),
    (["render", "tiles", "--out", "{t}/x.gif", "--fps", "1e-306"], "fps must be at least 1/655.35 = 0.00153"),
    (["render", "tiles", "--out", "{t}/x.gif", "--fps", "0.0015"], "a GIF shows a frame for at most 655.35 s"),
    (["render", "tiles", "--out", "{t}/x.png", "--frame", "-1"], "--frame must be a frame index >= 0"),
    (["render", "tiles", "--out", "{t}/x.png", "--set", "N=16", "--frame", "999999"], "--frame must be from 0 to"),
    (["render", "tiles", "--out", "{t}/x.gif", "--set", "bad"], "--set takes NAME=VALUE"),
    (["render", "tiles", "--out", "{t}/x.gif", "--set", "colour=red"], "TileExplorer takes N, d, Br, Bc"),
    (["render", "tiles", "--out", "{t}/x.gif", "--set", "key=1"], "TileExplorer takes N, d"),
    (["render", "tiles", "--out", "{t}/x.gif", "--set", "N=1000000000"], "N must be an integer between 1 and 512"),
    (["render", "tiles", "--out", "{t}/x.gif", "--set", "N=nan"], "N must be an integer"),
    (["render", "tiles", "--out", "{t}/x.png", "--set", "figsize=big"], "figsize must be (width, height) in inches"),
    (["render", "tiles", "--out", "{t}/x.png", "--set", "figsize=(1e5,1e5)"], "two numbers from 1 to 50"),
    (["render", "tiles", "--out", "{t}/x.png", "--set", "dpi=100000"], "dpi must be a number from 20 to 600"),
    (["render", "tiles", "--out", "{t}/x.png", "--set", "dpi=600"], "million pixels"),
    (["render", "block-size", "--out", "{t}/x.png", "--set", "blocks=(1,2,4,8,16,32,64)", "--set", "recorded=None"],
     "drop the smallest block sizes"),
    (["render", "online-softmax", "--out", "{t}/x.png", "--set", "row=999"], "row must be an integer between 0"),
    # output paths that cannot be written
    (["render", "tiles", "--out", "{t}/nope/x.gif"], "its folder '{t}/nope' does not exist"),
    (["render", "tiles", "--out", "{t}/nope/x.png"], "does not exist"),
    (["render", "tiles", "--out", "{t}/afile/x.png"], "is a file, not a folder"),
    (["render", "tiles", "--out", "{t}/folder.gif"], "is a folder"),
    (["render", "tiles", "--out", "{t}/folder.png"], "is a folder"),
    (["render", "tiles", "--out", "{t}/x.jpg"], "--out must end in .gif or .mp4 or .png"),
    (["render", "tiles", "--out", ""], "--out must be a file name ending in .gif"),
    (["bench", "--plot-only", "--out", "{t}/afile"], "is a file; give a folder"),
    (["bench", "--out", "{t}/afile/sub"], "is a file, not a folder"),
    # bench options
    (["bench", "--N", "3000"], "--N takes a comma list of sequence lengths that divide 16,384"),
    (["bench", "--N", str(10**9)], "divide 16,384"),
    (["bench", "--N", "abc"], "divide 16,384"),
    (["bench", "--N", "0"], "divide 16,384"),
    (["bench", "--only", "x"], "--only takes a comma list of ceil, check, bench, sweep"),
    (["bench", "--variants", "tpu"], "--variants takes a comma list of wgmma, mma.sync"),
    (["bench", "--ab", "{t}/missing.cu"], "--ab: cannot read"),
]


@pytest.mark.parametrize("argv,words", BAD_ARGV, ids=[" ".join(a)[:60] or "(none)" for a, _ in BAD_ARGV])
def test_bad_input_is_exit_2_and_one_line(argv, words, tmp_path, capsys):
    import time

    t = _bad_tree(tmp_path)
    before = sorted(p.name for p in t.rglob("*"))
    argv = [a.replace("{t}", str(t)) for a in argv]
    start = time.perf_counter()
    try:
        code = main(argv)
    except SystemExit as exc:          # argparse exits; the status is what a shell sees
        code = exc.code
    assert time.perf_counter() - start < 30                       # refused, not computed
    out = capsys.readouterr()
    assert code == 2, out
    assert out.out == "" and out.err.count("\n") == 1 and "Traceback" not in out.err, out.err
    assert words.replace("{t}", str(t)) in out.err, out.err
    assert sorted(p.name for p in t.rglob("*")) == before           # nothing written


def test_unwritable_output_is_exit_2(tmp_path, capsys, monkeypatch):
    import os

    monkeypatch.setattr(os, "access", lambda *a, **k: False)   # a read-only folder (chmod does not stop root)
    assert main(["render", "tiles", "--out", str(tmp_path / "x.gif")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot be written: no permission to write in" in err
    assert main(["bench", "--plot-only", "--out", str(tmp_path / "figs")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no permission to write in" in err
    assert list(tmp_path.iterdir()) == []


def test_render_caps_the_frames_of_a_gif(tmp_path, capsys, monkeypatch):
    from flashviz.views import export

    monkeypatch.setattr(export, "MAX_EXPORT_FRAMES", 3)
    assert main(["render", "causal", "--out", str(tmp_path / "c.gif"), "--set", "Nq=128", "--set", "Nk=128",
                 "--set", "Br=16"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--every 1 keeps 8 of 8 frames, more than one export may hold (3" in err
    assert "use --every 3 or more" in err
    assert main(["render", "causal", "--out", str(tmp_path / "c.gif"), "--set", "Nq=128", "--set", "Nk=128",
                 "--set", "Br=16", "--every", "3"]) == 0
    assert (tmp_path / "c.gif").exists()


@pytest.mark.recorded_data
def test_render_blocks_the_recording_misses(tmp_path, capsys):
    assert main(["render", "block-size", "--out", str(tmp_path / "b.png"), "--set", "blocks=(8,256)"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "recorded Br, Bc: 16, 32, 64, 128" in err and "recorded=None" in err


def test_sweep_table_function_refuses_bad_blocks_and_long_sweeps():
    from flashviz.cli import sweep_table

    with pytest.raises(ValueError, match="pick N <= "):
        sweep_table(N=2**30)
    with pytest.raises(ValueError, match="drop the smallest block sizes"):
        sweep_table(N=2**20, blocks=(1, 2))
    with pytest.raises(ValueError, match="each block size must be an integer >= 1"):
        sweep_table(N=64, blocks=(0, 16))
    with pytest.raises(TypeError, match="blocks must be a sequence"):
        sweep_table(N=64, blocks=16)
