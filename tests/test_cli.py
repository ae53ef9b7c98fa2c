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


def test_gpu_command_reports_no_gpu_and_recorded_results(capsys):
    assert main(["gpu"]) == 0
    out = capsys.readouterr().out
    assert "GPU usable: False" in out or "GPU usable: True" in out
    assert "Recorded on" in out and "H200" in out
