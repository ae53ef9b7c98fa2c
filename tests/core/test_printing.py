"""flashviz.printing.wrap: the chapters' printed lines, broken at spaces to 100 columns."""

from flashviz.printing import WIDTH, wrap


def test_wrap_breaks_at_spaces_within_the_width_and_indents_later_lines():
    text = " ".join(f"word{i:03d}" for i in range(60))
    lines = wrap(text, indent="    ").split("\n")
    assert len(lines) > 1 and all(len(line) <= WIDTH for line in lines)
    assert all(line.startswith("    word") for line in lines[1:]) and lines[0].startswith("word000")
    assert " ".join(wrap(text).split()) == text                    # nothing lost, no word split
    assert wrap("short line") == "short line" and wrap("") == ""


def test_wrap_splits_neither_long_words_nor_hyphens_and_keeps_newlines():
    path = "benchmarks/results/" + "x" * 120 + ".json"
    assert path in wrap(f"file {path} recorded", width=40).split("\n")
    hyphens = "kernel-only " * 20
    assert all(not line.endswith("-") for line in wrap(hyphens, width=30).split("\n"))
    assert wrap("first paragraph\nsecond", width=20) == "first paragraph\nsecond"
    assert wrap("  leading indent kept", width=100) == "  leading indent kept"
