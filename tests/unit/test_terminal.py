"""Terminal lines: at most 200 characters (accelbench.cli.terminal), the progress of long loops every
30 s (measure.timing.progress) on the run's terminal fd."""

import io
import logging
import os

from accelbench import terminal_fd
from accelbench.cli.terminal import MAX_CHARS, short_line, shorten_snakemake


def test_short_line_groups_a_path_list_and_cuts_the_rest():
    files = [f"results/study_a/{n}" for n in ("table.csv", "table.md", "claims.csv", "fig_speedup.png")] * 8
    line = "    output: " + ", ".join(files)
    short = short_line(line)
    assert len(line) > MAX_CHARS >= len(short)
    assert short.startswith("    output: results/study_a/{table.csv, table.md, claims.csv") and "more)}" in short
    mixed = "    input: /abs/a.txt, rel/b.txt, " + ", ".join(["rel/c.txt"] * 40)  # no common folder: no error
    assert len(short_line(mixed)) <= MAX_CHARS and short_line(mixed).startswith("    input: /abs/a.txt, rel/b.txt")
    cwd = os.getcwd()
    assert short_line(f"input: {cwd}/a.txt " + "x" * 250).startswith("input: a.txt x")  # the cwd's paths relative
    for n in (MAX_CHARS, MAX_CHARS + 1, 999, 12345):
        cut = short_line("y" * n)
        assert len(cut) <= MAX_CHARS and (n <= MAX_CHARS or cut.endswith(f"({n - cut.index('...')} more characters)"))


def test_shorten_snakemake_wraps_the_terminal_handler_not_the_log_file(tmp_path):
    logger = logging.getLogger("test_terminal_fake_snakemake")
    stream = io.StringIO()
    term, file = logging.StreamHandler(stream), logging.FileHandler(tmp_path / "full.log")
    logger.handlers[:] = [term, file]
    logger.propagate = False
    assert shorten_snakemake(logger) == 1 and shorten_snakemake(logger) == 0  # once
    logger.warning("z" * 900)
    file.flush()
    assert max(map(len, stream.getvalue().splitlines())) <= MAX_CHARS
    assert "z" * 900 in (tmp_path / "full.log").read_text()  # the log file keeps it whole


def test_progress_prints_steps_done_and_time_left_on_the_terminal_fd(monkeypatch):
    from tqdm import tqdm

    from accelbench.measure.timing import progress

    read, write = os.pipe()
    monkeypatch.setattr(terminal_fd, "fd", write)
    items = list(progress(tqdm(range(4), disable=True), 4, "Study A train timed", every_s=0.0))
    os.close(write)
    lines = os.read(read, 65536).decode().splitlines()
    assert items == [0, 1, 2, 3]
    assert lines[0].startswith("accelbench: Study A train timed: 1/4 done in 0 s, about ") and lines[0].endswith("left")
    assert len(lines) == 3  # not after the last step
