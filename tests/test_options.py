"""A run's, an A/B's and a shrink's arguments are declared once (loadrepro.config.options): the command line's flags are
generated from those models and the Python API's keywords must be the same names with the same defaults."""

import inspect

import pytest
import typer.main

import loadrepro
from loadrepro import api
from loadrepro.cli import commands as cli
from loadrepro.config.options import AbArguments, Arguments, RunArguments, ShrinkArguments, SweepArguments
from loadrepro.errors import UsageError
from tests.helpers import cli as loadrepro_cli

# Fields only the command line sets: a program chose its target deliberately and shows no progress display.
COMMAND_LINE_ONLY = {"quiet", "target_is_isolated"}
API = [(api.run, RunArguments), (api.arun, RunArguments), (api.ab, AbArguments),
       (api.shrink_failure, ShrinkArguments), (api.sweep, SweepArguments)]


@pytest.mark.parametrize(("function", "model"), API, ids=lambda x: getattr(x, "__name__", ""))
def test_the_api_keywords_are_the_models_fields_with_their_defaults(function, model: type[Arguments]):
    keywords = {name: p for name, p in inspect.signature(function).parameters.items() if name != "say"}
    fields = {name: f for name, f in model.model_fields.items() if name not in COMMAND_LINE_ONLY}
    assert set(keywords) == set(fields)
    for name, parameter in keywords.items():
        if parameter.default is not inspect.Parameter.empty:  # run's profile is required, the command line's not
            assert parameter.default == fields[name].default, name


def _command(name: str):
    """The click command typer builds (typer may vendor its own click)."""
    return typer.main.get_command(cli.app).commands[name]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("name", "model", "own"), [("run", RunArguments, {"dry_run_"}), ("ab", AbArguments, set()),
                                                    ("shrink", ShrinkArguments, set()),
                                                    ("sweep", SweepArguments, set())])
def test_the_command_lines_flags_are_the_models_fields(name: str, model: type[Arguments], own: set[str]):
    params = {p.name: p for p in _command(name).params}
    assert set(params) - own == set(model.model_fields)
    for field_name, field in model.model_fields.items():
        param = params[field_name]
        assert param.default == field.default or str(param.default) == str(field.default), field_name
        assert getattr(param, "help", None) in (None, field.description), field_name
    assert "--set" in params["overrides"].opts


@pytest.mark.parametrize(("call", "words"), [
    (lambda: loadrepro.run("quickstart", trials=0), "trials: Input should be greater than or equal to 1"),
    (lambda: loadrepro.run("quickstart", size_to_overrun=0), "size_to_overrun: Input should be greater than 0"),
    (lambda: loadrepro.run("quickstart", base_url="http://127.0.0.1:9", engine_cmd="x {port}"),
     "give a base URL or an engine command, not both"),
    (lambda: loadrepro.ab("quickstart", stock_url="http://127.0.0.1:9"), "give both sides"),
    (lambda: loadrepro.ab("quickstart", alpha=1.5), "alpha: Input should be less than 1"),
    (lambda: loadrepro.shrink_failure(), "give a failing run directory or a profile"),
    (lambda: loadrepro.shrink_failure(profile="quickstart", time_budget_s=0), "time_budget_s: Input should be"),
])
def test_bad_arguments_are_usage_errors_naming_the_argument(call, words: str):
    """Refused before anything starts: no engine, no run directory."""
    with pytest.raises(UsageError) as raised:
        call()
    assert words in str(raised.value)


def test_a_bad_flag_is_exit_2_naming_it():
    result = loadrepro_cli("run", "--trials", "0", "--quiet")
    assert result.returncode == 2, result.stderr
    assert "'--trials'" in result.stderr
    result = loadrepro_cli("ab", "--stock-url", "http://127.0.0.1:9")
    assert result.returncode == 2, result.stderr
    assert "give both sides" in result.stderr
