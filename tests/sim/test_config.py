"""The sim's settings have one definition: the profile's SimSpec drives SimConfig, the `sim` flags and the
command loadrepro starts the engine with."""

import dataclasses
import shlex

import pytest
from typer.testing import CliRunner

import loadrepro.cli.commands as cli
from loadrepro.config.profile import SimSpec
from loadrepro.errors import SimConfigError
from loadrepro.sim import serve
from loadrepro.sim.config import SimConfig, resolve, sim_config
from loadrepro.sim.process import sim_engine_command


def test_every_setting_is_one_field_in_both_models():
    assert [f.name for f in dataclasses.fields(SimConfig)] == list(SimSpec.model_fields)


def test_every_setting_is_a_sim_flag():
    help_text = CliRunner().invoke(cli.app, ["sim", "--help"], env={"COLUMNS": "300"}).output
    for name in SimSpec.model_fields:
        assert f"--{name.replace('_', '-')}" in help_text


def test_the_engine_command_round_trips_every_setting(monkeypatch):
    spec = SimSpec(scenario="page-index", policy="patched", model="m", block_size=8, primary_blocks=99,
                   draft_blocks=3, max_model_len=4096, beam_width=2, kv_bytes_per_token=1024,
                   index_pool_bytes=1 << 20, prefill_tokens_per_s=1000.5, step_s=0.02, natural_output_tokens=9,
                   death_status=400, death_mode="cut", reasoning_tokens=2, leak_on_abort=True,
                   race_probability=0.25, race_seed=11)
    assert set(spec.model_dump(exclude_none=True)) == set(SimSpec.model_fields)
    started = {}
    monkeypatch.setattr(serve, "serve_forever", lambda config, *rest: started.setdefault("config", config))
    argv = shlex.split(sim_engine_command(spec).format(host="127.0.0.1", port=0))
    result = CliRunner().invoke(cli.app, argv[argv.index("sim"):])
    assert result.exit_code == 0, result.output
    assert started["config"] == resolve(spec)
    off = spec.model_copy(update={"leak_on_abort": False})
    assert "--no-leak-on-abort" in sim_engine_command(off)


def test_scenario_defaults_fill_what_is_left_out():
    config = sim_config("page-index", primary_blocks=7)
    assert config.primary_blocks == 7 and config.index_pool_bytes == 4 << 20 and config.block_size == 32


@pytest.mark.parametrize(("settings", "message"), [
    ({"primary_blocks": 0}, "primary_blocks: Input should be greater than or equal to 1"),
    ({"death_status": 401}, "death_status: Input should be 400, 500 or 503"),
    ({"nonsense": 1}, "nonsense: unknown setting"),
])
def test_bad_settings_name_their_key(settings, message):
    with pytest.raises(SimConfigError, match=message):
        sim_config("healthy", **settings)
