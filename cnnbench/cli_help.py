"""`--help` for every `cnnbench` command in the conventions of click tools (placeholders, no markup)."""

from __future__ import annotations

import typing
from typing import Any

import typer
from typer.core import TyperCommand


class ClickStyleCommand(TyperCommand):
    """`--help` in the conventions of click tools: `SPEC` (required) or `[SPEC]` for an argument,
    TEXT/PATH/INTEGER/FLOAT after an option that takes a value, nothing after a flag.

    typer's own help shows Python types (`<list[str]>`, `<int range>`), `{spec}` for a required
    argument and, in its rich mode, `<bool>` after flags and console markup eaten from the text (a
    `[infer]` table name vanished); the app therefore runs without markup (`rich_markup_mode=None`,
    every help text printed literally) and this class names the placeholders.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.metavar is None and not getattr(param, "is_flag", False):
                param.metavar = _metavar(param)

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        return pieces + [_argument_usage(p) for p in self.get_params(ctx) if p.param_type_name == "argument"]

    def format_options(self, ctx: typer.Context, formatter: Any) -> None:
        arguments, options = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":  # typer adds the type after the name
                arguments.append((_argument_usage(param), record[1]))
            else:
                options.append(record)
        for title, records in (("Arguments", arguments), ("Options", options)):
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)


_METAVARS = {str: "TEXT", int: "INTEGER", float: "FLOAT", bool: "BOOLEAN"}


def _metavar(param: Any) -> str:
    if param.param_type_name == "argument":
        return param.name.upper()
    described = getattr(param, "type_descriptor", None)
    if described is None:  # a typer without the descriptor (older or newer than the pinned one): click's own
        return param.type.name.upper()
    if described.is_choice:
        return "[" + "|".join(map(str, described.choices)) + "]"
    if described.is_path:
        return "PATH"
    kind = typing.get_args(described.annotation)[0] if described.is_list else described.annotation
    return _METAVARS.get(kind, getattr(kind, "__name__", "VALUE").upper())


def _argument_usage(param: Any) -> str:
    name = param.metavar or param.name.upper()
    name = name if param.required else f"[{name}]"
    return name + ("..." if param.nargs != 1 else "")


class ClickStyleApp(typer.Typer):
    """Every command of the app (also those added later) gets the click-style help."""

    def command(self, *args: Any, cls: type[TyperCommand] | None = None, **kwargs: Any):
        return super().command(*args, cls=cls or ClickStyleCommand, **kwargs)
