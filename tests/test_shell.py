"""regdev shell: an empty line gives the prompt again; only quit, exit or end of input leave."""

from __future__ import annotations

import io
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from regdev import Gate, RegisterFile
from regdev.agents._shell import run_shell, shell_tools

REGDEV = Path(sys.executable).parent / "regdev"

#: Lines with nothing to run: empty, blanks, tabs, a carriage return (a terminal's Enter in
#: raw mode), and the other whitespace str.split() knows.
BLANK_LINES = ["", " ", "   ", "\t", " \t ", "\r", "\x0b\x0c", "\u00a0", "\u2003"]


def _inputs(lines: list[str]) -> Iterator[str]:
    yield from lines
    raise EOFError  # Ctrl-D


@pytest.mark.parametrize("blank", BLANK_LINES, ids=range(len(BLANK_LINES)))
@pytest.mark.parametrize("interactive", [True, False], ids=["prompt", "piped"])
def test_a_blank_line_does_not_leave_the_shell(monkeypatch: pytest.MonkeyPatch, blank: str,
                                               interactive: bool) -> None:
    """A blank line, at the prompt or piped, runs nothing and the shell reads on: the
    commands after it run, and the shell ends only at end of input, with 0."""
    lines = [blank, blank, "write 1 7", blank, "read 1"]
    if interactive:
        feed = _inputs(lines)
        monkeypatch.setattr("builtins.input", lambda prompt: next(feed))
    else:
        monkeypatch.setattr("sys.stdin", io.StringIO("".join(line + "\n" for line in lines)))
    out = io.StringIO()
    with Gate(RegisterFile(), shell_tools()) as gate:
        status = run_shell(gate, gate.default_session, out, where="here",
                           interactive=interactive)
    assert status == 0
    assert out.getvalue().splitlines()[2:] == [
        "accepted  write_register: register 1 = 0x07 (7)",
        "accepted  read_register: register 1 = 0x07 (7)",
        *([""] if interactive else []),  # Ctrl-D ends the prompt's line
    ]


@pytest.mark.parametrize("leave", ["quit", "exit", "  quit  ", None], ids=str)
def test_only_quit_exit_or_end_of_input_leave(monkeypatch: pytest.MonkeyPatch,
                                              leave: str | None) -> None:
    """quit and exit leave at once (nothing after them runs); without them, end of input."""
    lines = ["", "read 1", *([leave] if leave else []), "write 1 1"]
    out = io.StringIO()
    feed = _inputs(lines)
    monkeypatch.setattr("builtins.input", lambda prompt: next(feed))
    with Gate(RegisterFile(), shell_tools()) as gate:
        assert run_shell(gate, gate.default_session, out, where="here", interactive=True) == 0
    ran = [line for line in out.getvalue().splitlines() if line.startswith("accepted  ")][1:]
    assert len(ran) == (1 if leave else 2)


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal (POSIX)")
@pytest.mark.timeout(60)
def test_enter_at_the_prompt_of_a_terminal_keeps_the_shell_open(tmp_path: Path) -> None:
    """On a real terminal (a pty: input() with line editing), Enter on an empty prompt gives
    the prompt again; the command typed next runs, and quit leaves with 0."""
    controller, terminal = os.openpty()
    shell = subprocess.Popen([str(REGDEV), "shell", "--no-audit"], stdin=terminal,
                             stdout=terminal, stderr=terminal, close_fds=True,
                             env={**os.environ, "TERM": "dumb", "HOME": str(tmp_path)})
    os.close(terminal)
    seen = b""

    def read_until(marker: bytes, count: int = 1) -> None:
        nonlocal seen
        deadline = time.monotonic() + 30
        while seen.count(marker) < count:
            assert time.monotonic() < deadline, seen
            ready, _, _ = select.select([controller], [], [], 1)
            if ready:
                seen += os.read(controller, 4096)

    try:
        read_until(b"regdev> ")
        for n in range(2, 5):  # Enter on an empty prompt, three times
            os.write(controller, b"\r")
            read_until(b"regdev> ", n)
        os.write(controller, b"read 2\r")
        read_until(b"accepted  read_register: register 2 = 0x00 (0)")
        read_until(b"regdev> ", 5)
        os.write(controller, b"quit\r")
        assert shell.wait(timeout=30) == 0
    finally:
        if shell.poll() is None:
            shell.kill()
        os.close(controller)
