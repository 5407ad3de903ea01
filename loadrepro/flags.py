"""Command-line options generated from a pydantic model's fields, so that a setting is defined once."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any

import typer
from pydantic import BaseModel


def model_options(model: type[BaseModel]) -> list[inspect.Parameter]:
    """One keyword-only option per field: `--field-name`, the field's type, default and description as help."""
    return [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=field.default,
                              annotation=Annotated[field.annotation, typer.Option(help=field.description)])
            for name, field in model.model_fields.items()]


def with_model_options(model: type[BaseModel], into: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a command so that it also takes `model`'s fields as options; they reach it as one dict, `into`."""
    fields = set(model.model_fields)

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != into]

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            settings = {k: kwargs.pop(k) for k in list(kwargs) if k in fields}
            return command(**kwargs, **{into: settings})

        parameters = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + model_options(model)
        wrapper.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in parameters}
        return wrapper

    return decorate
