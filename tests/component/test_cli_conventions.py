"""What every `llm-infra` command does as other command-line tools do: help, --version, Ctrl-C,
a closed pipe."""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.cli import COMMANDS, EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, build_parser, package_version
from tests.conftest import ROOT
from tests.support.cli import as_at_a_terminal, run_cli

PARSERS = build_parser()[1]


def llm_infra(*args: str) -> subprocess.CompletedProcess[str]:
    """`llm-infra ARGS` in this process, its help as wide as through a pipe (COLUMNS or 80)."""
    env = {**os.environ, "COLUMNS": os.environ.get("COLUMNS", "80")}
    return run_cli(list(args), env=env, cwd=ROOT)


def options_with_values(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """The options that take a value and are not required (the ones a default applies to)."""
    for action in parser._actions:
        if action.option_strings and not action.required and action.nargs != 0:
            yield action


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_command_help_has_a_description_every_default_examples_and_exit_codes(
    command: str,
) -> None:
    result = llm_infra(command, "--help")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert " ".join(COMMANDS[command].description.split()) in text
    assert "examples: llm-infra " in text
    exits = result.stdout.split("exit status:\n", 1)[1]
    for code, meaning in COMMANDS[command].exits:
        assert re.search(rf"^  {code} +{re.escape(meaning)}$", exits, re.M), (code, exits)
    assert re.search(rf"^  {EXIT_BROKEN_PIPE} ", exits, re.M)
    for action in options_with_values(PARSERS[command]):
        if action.default is None or action.default == []:
            # Nothing to print: the help says in words what happens without the option.
            assert "default" in (action.help or ""), (command, action.option_strings)
        else:
            assert f"default: {action.default}" in text, (command, action.option_strings, text)
    # A switch is off unless given: its help names no default (`--no-cache` once said True).
    for action in PARSERS[command]._actions:
        if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
            help_text = " ".join((action.help or "").split())
            assert f"{help_text} (default" not in text, (command, action.option_strings)


@pytest.mark.parametrize("args", [["--version"], ["render", "--version"], ["fetch", "--version"]])
def test_version_is_the_installed_distributions(args: list[str]) -> None:
    result = llm_infra(*args)
    assert result.returncode == 0
    assert result.stdout == f"llm-infra {package_version()}\n"
    assert re.fullmatch(r"\d+\.\d+\.\d+", package_version())


def test_a_mistyped_command_is_answered_with_the_closest_one() -> None:
    result = llm_infra("rendr", "strix-halo")
    assert result.returncode == 2
    assert "unknown command 'rendr' (did you mean render?)" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["render", "--help"],
        ["plan", "strix-halo", "--json"],
        ["plan", "strix-halo"],
        ["render", "mi300x"],
    ],
)
def test_a_closed_pipe_ends_quietly_with_141(args: list[str], tmp_path: Path) -> None:
    extra = ["--out", str(tmp_path)] if args[0] == "render" and "--help" not in args else []
    process = subprocess.Popen(
        [sys.executable, "-m", "infra.cli", *args, *extra],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    # The reader goes away before the first line, as `| head -0` (or a `head -1` that is done).
    assert process.stdout is not None
    process.stdout.close()
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == EXIT_BROKEN_PIPE, stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr and "Broken pipe" not in stderr


@pytest.fixture
def silent_server() -> Iterator[socket.socket]:
    """A loopback listener that never answers: a request to it hangs."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.settimeout(60)
        yield server


def interrupt_when_connected(
    args: list[str], server: socket.socket
) -> subprocess.CompletedProcess[str]:
    """Run the command, wait until it has connected to the server, then press Ctrl-C."""
    with as_at_a_terminal():
        process = subprocess.Popen(
            [sys.executable, "-m", "infra.cli", *args],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    connection, _ = server.accept()
    with connection:
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=30)
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)


@pytest.mark.parametrize(
    "args",
    [
        ["verify", "strix-halo", "--record", "--expect", "{tmp}/expect.json", "--url"],
        ["bench", "strix-halo", "--url"],
        ["gpu-gate", "--log", "/dev/null", "--expect-layers", "1", "--wait-url"],
    ],
)
def test_ctrl_c_ends_a_command_quietly_with_130(
    args: list[str], silent_server: socket.socket, tmp_path: Path
) -> None:
    host, port = silent_server.getsockname()
    argv = [arg.format(tmp=tmp_path) for arg in args] + [f"http://{host}:{port}"]
    result = interrupt_when_connected(argv, silent_server)
    assert result.returncode == EXIT_INTERRUPTED, result.stderr
    assert "Traceback" not in result.stderr and "KeyboardInterrupt" not in result.stderr


@pytest.mark.parametrize(
    "example",
    [e for command in COMMANDS.values() for e in command.examples],
)
def test_every_help_example_parses(example: str) -> None:
    """What a --help example shows is accepted by the command's parser (no option it lacks)."""
    import shlex

    from infra.cli import parse

    inner = re.fullmatch(r'eval "\$\((.*)\)"', example)
    words = shlex.split(inner.group(1) if inner else example)
    while "=" in words[0]:  # VAR=value before the command
        words = words[1:]
    assert words[0] == "llm-infra"
    parse(words[1:])  # argparse exits 2 on an option the command does not have
