"""`--help` of every command: texts printed as written (no console markup eaten) and placeholders in the
conventions of click tools (flags without a value, TEXT/PATH/INTEGER/FLOAT metavars, SPEC for the argument)."""

from __future__ import annotations

import re

import pytest
import typer.main
from typer.testing import CliRunner

from cnnbench.cli import app

COMMANDS = sorted(typer.main.get_command(app).commands)
VALUE_METAVARS = {"TEXT", "PATH", "INTEGER", "FLOAT"}


def _help(*args: str) -> str:
    done = CliRunner().invoke(app, [*args, "--help"])
    assert done.exit_code == 0, done.output
    return done.output


def _flat(text: str) -> str:
    return " ".join(text.split())


def _command(name: str):
    return typer.main.get_command(app).commands[name]


def test_every_command_is_covered():
    assert {"run", "sweep", "validate", "infer", "report", "parity", "upgrade"} <= set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_help_prints_every_bracketed_name_it_was_given(name):
    """A `[infer]` in a docstring or an option's help was taken as console markup and vanished."""
    command = _command(name)
    sources = [command.help or ""] + [p.help or "" for p in command.params]
    rendered = _flat(_help(name))
    for source in sources:
        for token in re.findall(r"\[[^\]\s]*\]", source):
            assert token in rendered, f"{name} --help lost {token!r}"
        for sentence in filter(None, (part.strip() for part in source.split("\n\n"))):
            assert _flat(sentence) in rendered, f"{name} --help does not print {sentence!r} as written"


def test_infer_help_names_its_tables():
    assert "Experiment TOML with [infer] (and [serve]) tables." in _flat(_help("infer"))


@pytest.mark.parametrize("name", COMMANDS)
def test_placeholders_are_click_style(name):
    text = _help(name)
    assert not re.search(r"<(bool|str|int|float|path|list)", text), text
    usage = text.splitlines()[0]
    assert "{" not in usage and "}" not in usage, usage
    command = _command(name)
    for param in command.params:
        if param.param_type_name == "argument":
            shown = param.name.upper()
            assert (shown if param.required else f"[{shown}]") in usage
            continue
        longest = max(param.opts, key=len)
        tokens = next(words for words in (line.replace(",", " ").split() for line in text.splitlines())
                      if longest in words)
        after = tokens[tokens.index(longest) + 1:]
        if param.is_flag:  # the help text follows the flag directly
            assert not after or (after[0] not in VALUE_METAVARS | {"BOOLEAN"} and not after[0].startswith("<")), tokens
        else:
            assert after and after[0] in VALUE_METAVARS, tokens


def test_required_and_optional_spec_in_usage():
    assert _help("infer").splitlines()[0].endswith("infer [OPTIONS] SPEC")
    assert _help("run").splitlines()[0].endswith("run [OPTIONS] [SPEC]")
    assert _help("report").splitlines()[0].endswith("report [OPTIONS] [CSV]...")


@pytest.mark.parametrize("name", ["run", "sweep", "infer"])
def test_backend_option_says_how_to_give_several(name):
    text = _flat(_help(name))
    assert "-b, --backend TEXT" in text
    assert "comma-separated" in text and "repeated" in text and "leaves out" in text
    assert "folder is created" in text  # --out: a missing parent folder is made, the rest checked first


def test_placeholders_fall_back_to_click_where_typer_has_no_type_descriptor():
    """Another typer release (the GPU machine's, say) may lack the descriptor the help reads."""
    import click

    from cnnbench.cli_help import _metavar

    option = click.Option(["--rate"], type=float)
    assert not hasattr(option, "type_descriptor")
    assert _metavar(option) == "FLOAT"
