"""Command-line options generated from a pydantic model's fields, so that a setting is defined once."""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo


def _option_type(annotation: Any) -> Any:
    """The field's type as an option takes it: a union with str (a size, "4MiB" or 4194304) is read as str, and
    the model parses it."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and list[str] in args:
        return list[str] | None  # given more than once (--base-url A --base-url B); once is a list of one
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and str in args:
        return str | None if type(None) in args else str
    return annotation


def _parameter(name: str, field: FieldInfo, flag: str | None, default: Any) -> inspect.Parameter:
    """The field as a typer parameter: an argument when the field says so (json_schema_extra "argument"), else an
    option with its flag (`flag`, the field's "flag", else `--field-name`), metavar, lower bound and description."""
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    flag = flag or typing.cast(str | None, extra.get("flag"))
    lower = next((m.ge for m in field.metadata if hasattr(m, "ge")), None)  # Field(ge=...)
    if extra.get("argument"):
        declared: Any = typer.Argument(help=field.description, show_default=False, metavar=name.upper())
    else:
        declared = typer.Option(*([f"--{flag}"] if flag else []), help=field.description, min=lower,
                                metavar=typing.cast(str | None, extra.get("metavar")))
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=Annotated[_option_type(field.annotation), declared])


def model_options(model: type[BaseModel], flags: dict[str, str] | None = None,
                  defaults: dict[str, Any] | None = None) -> list[inspect.Parameter]:
    """One keyword-only parameter per field: its type, default (or `defaults`' for the command) and description as
    help; `flags`: an option's name where it is not the field's."""
    flags, defaults = flags or {}, defaults or {}
    return [_parameter(name, field, flags.get(name), defaults.get(name, field.default))
            for name, field in model.model_fields.items()]


def with_model_options(model: type[BaseModel], into: str, flags: dict[str, str] | None = None,
                       defaults: dict[str, Any] | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a command so that it also takes `model`'s fields as options; they reach it as one dict, `into`.
    `flags`: an option's name where it is not the field's; `defaults`: the command's own default for a field."""
    fields = set(model.model_fields)

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != into]

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            settings = {k: kwargs.pop(k) for k in list(kwargs) if k in fields}
            return command(**kwargs, **{into: settings})

        parameters = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + model_options(model, flags,
                                                                                                      defaults)
        wrapper.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in parameters}
        return wrapper

    return decorate
