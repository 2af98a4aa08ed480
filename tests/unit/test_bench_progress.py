"""We test these aspects of the progress of long work (``netctl_kit.bench.render.steps``,
``waiting``): to a pipe or a file only the lines, plain, one each, and nothing for
steps without one (as the benches always printed); on a terminal a rich bar that
counts the steps, with the lines above it and work started inside as a row of the
same bar; threads may step at once; a spinner only on a terminal.
"""

from __future__ import annotations

import io
import threading

from netctl_kit.bench import render


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_off_a_terminal() -> None:
    out = io.StringIO()
    with render.steps("iterations", 3, file=out) as step:
        for n in range(3):
            with render.steps("pods", 5, file=out) as inner:
                for _ in range(5):
                    inner("")
            step(f"iteration {n + 1}: 0 leftovers")
    assert out.getvalue().splitlines() == [f"netctl bench: iteration {n}: 0 leftovers"
                                           for n in (1, 2, 3)]
    with render.waiting("reconciling", file=out):
        pass
    assert len(out.getvalue().splitlines()) == 3


def test_a_bar_on_a_terminal() -> None:
    out = Terminal()
    with render.steps("iterations", 2, file=out) as step:
        for n in range(2):
            with render.steps("pods", 40, file=out) as inner:
                threads = [threading.Thread(target=lambda: [inner("") for _ in range(10)])
                           for _ in range(4)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            step(f"iteration {n + 1} done")
    text = out.getvalue()
    assert "netctl bench: iteration 1 done" in text and "iteration 2 done" in text
    assert "iterations" in text and "2/2" in text
    assert "\x1b[" in text  # drawn, not printed
    assert render._live == []


def test_a_spinner_on_a_terminal() -> None:
    out = Terminal()
    with render.waiting("reconciling", file=out):
        pass
    assert "reconciling" in out.getvalue() and "\x1b[" in out.getvalue()
