"""Figure functions return figures; save() is atomic and writes the caption."""

import matplotlib.pyplot as plt
import pytest
import torch

from sinklib.core import plotting
from sinklib.core.metrics import Extreme


def test_every_figure_function_returns_a_figure(tmp_path):
    A = torch.softmax(torch.randn(2, 3, 6, 6), -1).tril()
    with plotting.style():
        figs = [
            plotting.attention_grid(A, [0, 5], [0, 2], tokens=list("abcdef"), title="t"),
            plotting.alpha_heatmap(torch.rand(4, 3)),
            plotting.sink_rate_bars({"natural": 0.7, "random": 0.6}, "m", {"ref": {"natural": 0.9}}),
            plotting.massive_by_layer([1, 300, 2e4], [0.5, 1, 40], [7, 7, 9]),
            plotting.dom_ratio_by_layer([1, 100], [1, 2]),
            plotting.alpha_by_layer({"natural": [0.1, 0.5]}),
        ]
    for i, fig in enumerate(figs):
        assert isinstance(fig, plt.Figure)
        paths = plotting.save(fig, tmp_path / f"fig{i}", caption="a caption")
        assert all(p.stat().st_size > 0 for p in paths)
        plt.close(fig)
    assert (tmp_path / "fig0.txt").read_text().strip() == "a caption"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary files left
    assert plt.rcParams["axes.spines.top"]  # the style did not leak


def test_failed_save_keeps_the_previous_file(tmp_path, monkeypatch):
    fig = plotting.dom_ratio_by_layer([1, 2], [1, 1])
    plotting.save(fig, tmp_path / "f", formats=("png",))
    before = (tmp_path / "f.png").read_bytes()

    def broken(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(fig, "savefig", broken)
    with pytest.raises(RuntimeError):
        plotting.save(fig, tmp_path / "f", formats=("png",))
    assert (tmp_path / "f.png").read_bytes() == before


def test_extreme_ratio():
    e = Extreme(dim=3, value=-2000.0, median=1.0, position=0, seq=0)
    assert e.is_massive and e.as_dict()["ratio"] == 2000.0


def test_saved_files_follow_the_umask_not_mkstemp(tmp_path):
    import os

    old = os.umask(0o022)
    try:
        fig = plotting.alpha_heatmap(torch.rand(2, 2))
        paths = plotting.save(fig, tmp_path / "fig", caption="c")
        plt.close(fig)
        for p in [*paths, tmp_path / "fig.txt"]:
            assert p.stat().st_mode & 0o777 == 0o644, p  # readable by group and others, as open() would give
        os.umask(0o077)
        from sinklib.core.results import write_json

        assert write_json(tmp_path / "h.json", {"a": 1}).stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(old)


def test_layout_problems_finds_legends_over_data_and_colliding_text(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from sinklib.core import plotting
    from tests.figure_lint import REPORTS, install, layout_problems

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot(range(10), [5] * 10, label="flat line")  # runs through the middle, where a centred legend goes
    ax.legend(loc="center")
    assert any("covers" in p for p in layout_problems(fig))
    ax.get_legend().remove()
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1))
    assert layout_problems(fig) == []  # beside the axes: nothing covered
    ax.annotate("first label", (3, 5)), ax.annotate("second label", (3.2, 5))
    assert any("overlaps" in p for p in layout_problems(fig))
    reports = tmp_path / "reports"
    monkeypatch.setenv(REPORTS, str(reports))
    monkeypatch.setattr(plotting, "save", plotting.save)  # undone after the test
    install()  # what the smoke tests' kernels run first
    plotting.save(fig, tmp_path / "figs" / "busy")  # written all the same, its report in the reports folder
    assert (tmp_path / "figs" / "busy.png").exists() and "overlaps" in (reports / "figs" / "busy.layout.txt").read_text()
    assert not list((tmp_path / "figs").glob("*.layout.txt"))  # never among the figures
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1])
    plotting.save(fig, tmp_path / "figs" / "busy")
    assert not (reports / "figs" / "busy.layout.txt").exists()  # a clean figure removes an old report
    plt.close(fig)


def test_caption_problems_names_panels_and_styles_the_caption_leaves_out():
    import matplotlib.pyplot as plt

    from tests.figure_lint import caption_problems

    fig, (a, b) = plt.subplots(1, 2)
    a.set_title("(a) perplexity"), b.set_title("(b) sinks")
    a.plot([0, 1], [1, 2])
    a.axhline(1, ls=":", color="k")  # y = 1
    b.plot([0, 1, 2], [1, 1, 2], marker="*", ls="none")  # 4 newline tokens as sinks
    problems = caption_problems(fig, "(a) perplexity per token; dotted: 4 newline tokens.")
    assert problems == ["marker '*' in '(b) sinks' is explained by no caption word (star), legend entry or label",
                        "panel (b) is not named in the caption"]
    told = "(a) perplexity per token; dotted: y = 1. (b) stars: 4 newline tokens as sinks."
    assert caption_problems(fig, told) == []
    b.scatter([0, 1], [2, 1], marker="D", label="own first 4")  # labelled in a legend: explained there
    b.legend(loc="upper left")
    assert caption_problems(fig, told) == []
    a.plot([0, 1], [2, 3], ls="--", color="C3", label="gain 0.1")
    b.plot([0, 1], [0.5, 0.6], ls="--", color="C3")  # the same variant in panel (b): the legend entry explains it
    a.legend(loc="lower right")
    assert caption_problems(fig, told) == []
    b.scatter([0, 1], [0, 0], marker="^")
    assert caption_problems(fig, told) == [
        "marker '^' in '(b) sinks' is explained by no caption word (triangle), legend entry or label"]
    plt.close(fig)


def test_layout_problems_finds_a_title_under_an_outside_legend():
    import matplotlib.pyplot as plt

    from tests.figure_lint import layout_problems

    fig, ax = plt.subplots(figsize=(4, 3), layout="constrained")
    ax.plot([0, 1], [0, 1], label="a line with a long legend entry")
    ax.set_title("a long axes title that runs to the right edge of the figure and beyond")
    fig.legend(loc="outside right upper")  # the top right corner, level with the title
    assert any("under a legend" in p for p in layout_problems(fig))
    ax.set_title(""), fig.suptitle("the same title as a figure title")
    fig.legends[0].remove()
    fig.legend(loc="outside right center")  # beside the axes, below the figure title
    assert layout_problems(fig) == []
    plt.close(fig)


def test_save_writes_the_figure_title_for_the_gallery(tmp_path):
    fig, (a, b) = plt.subplots(1, 2)
    b.set_title("right panel")
    plotting.save(fig, tmp_path / "f", "caption")
    assert (tmp_path / "f.title.txt").read_text().strip() == "right panel"  # no suptitle: the first axes title
    fig.suptitle("The   whole\nfigure")
    plotting.save(fig, tmp_path / "f", "caption")
    assert (tmp_path / "f.title.txt").read_text().strip() == "The whole figure"
    plt.close(fig)


def test_attention_grid_labels_32_tokens_without_overlap():
    """The gpu profile's 00 fig01 labels 32 tokens per panel: its panels grow so that no two labels collide."""
    import matplotlib.pyplot as plt
    import torch

    from sinklib.core.plotting import attention_grid
    from tests.figure_lint import layout_problems

    maps = torch.softmax(torch.randn(2, 4, 32, 32), -1)
    fig = attention_grid(maps, [0, 5], [0, 1, 2, 3], tokens=[f"tok{i}" for i in range(32)])
    assert layout_problems(fig) == []
    plt.close(fig)


def test_a_whitespace_token_gets_a_visible_label():
    """00 fig01: a space token's tick was blank, and " the" read as "the"."""
    from sinklib.core.plotting import token_label

    assert [token_label(t) for t in (" ", "  ", "\n", " the", "the", "\t")] == ["_", "__", "\\n", "_the", "the", "\\t"]
    assert all(token_label(t) for t in (" ", "\n", "x")) and len(token_label("a" * 20)) == 8


def test_a_column_outline_lies_outside_the_column_it_marks():
    """02 fig05: a 1.2-pt outline on the column's own edges hid the one-cell column it marked."""
    from sinklib.core.plotting import outline_column

    fig, ax = plt.subplots()
    ax.imshow(torch.ones(16, 16).numpy())
    outline_column(ax, 10, 16, "lime")
    (rect,) = ax.patches
    assert rect.get_x() < 10 - 0.5 and rect.get_x() + rect.get_width() > 10 + 0.5  # both edges off the column
    assert rect.get_y() < 10 - 0.5 and not rect.get_fill()  # from the first query that sees key 10
    plt.close(fig)
