
import pytest

from loadrepro.config.profile_files import builtin_profiles, load_profile, parse_override
from loadrepro.errors import ProfileError
from tests.helpers import cli


def test_every_builtin_profile_loads_and_describes_itself():
    names = builtin_profiles()
    for required in ("dsa-prefix-shared", "quickstart", "draft-pool", "page-index", "blocks-exhausted", "healthy"):
        assert required in names
    for name in names:
        profile = load_profile(name)
        assert profile.name == name and len(profile.description) > 20


def test_dsa_profile_has_seed_003s_shape():
    w = load_profile("dsa-prefix-shared").workload
    assert (w.conversations, w.turns, w.prefix_tokens, w.max_tokens, w.warm_max_tokens) == (12, 2, 81000, 32768, 1)


@pytest.mark.parametrize("assignment,path,value", [
    ("workload.conversations=4", ["workload", "conversations"], 4),
    ("load.rate=2.5", ["load", "rate"], 2.5),
    ("load.stop_on_death=false", ["load", "stop_on_death"], False),
    ("sim.policy=patched", ["sim", "policy"], "patched"),
    ('model="tiny"', ["model"], "tiny"),
])
def test_overrides_are_typed_as_toml(assignment, path, value):
    assert parse_override(assignment) == (path, value)


def test_overrides_apply_and_are_validated():
    profile = load_profile("quickstart", ["workload.conversations=3", "sim.policy=patched"])
    assert profile.workload.conversations == 3 and profile.sim.policy == "patched"
    with pytest.raises(ProfileError, match="workload.conversations: Input should be greater than or equal to 1"):
        load_profile("quickstart", ["workload.conversations=0"])


def test_a_typo_is_an_error_that_names_the_key(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text('name = "x"\n[workload]\nconversation = 3\n')
    with pytest.raises(ProfileError, match="workload.conversation: unknown key"):
        load_profile(str(path))


@pytest.mark.parametrize("text,message", [
    ('[load]\narrival = "poisson"\n', "needs rate > 0"),
    ('[workload]\nkind = "trace"\n', "needs workload.trace"),
    ('[workload]\nprefix_tokens = 1000\nprefix_tokens_p95 = 900\n', "prefix_tokens_p95 must be greater"),
    ("[workload\n", "cannot read profile"),
])
def test_inconsistent_profiles_are_refused(tmp_path, text, message):
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(ProfileError, match=message):
        load_profile(str(path))


def test_unknown_names_and_missing_files_are_clear():
    with pytest.raises(ProfileError, match="no built-in profile named 'nope'"):
        load_profile("nope")
    with pytest.raises(ProfileError, match="profile file not found"):
        load_profile("missing/file.toml")
    with pytest.raises(ProfileError, match="--set wants KEY=VALUE"):
        load_profile("quickstart", ["workload.seed"])


def test_a_folder_named_after_a_profile_does_not_shadow_it(tmp_path, monkeypatch):
    """Run folders are named after their profile: `soak/` in the current folder is not the `soak` profile."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "soak").mkdir()
    assert load_profile("soak").name == "soak"
    listed = cli("profiles")
    assert listed.returncode == 0, listed.stderr
    assert len(listed.stdout.splitlines()) == len(builtin_profiles())


def test_only_a_path_or_a_toml_name_is_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").write_text('description = "my own profile"\n')
    with pytest.raises(ProfileError, match=r"a file of that name is here: give \./mine"):
        load_profile("mine")
    assert load_profile("./mine").description == "my own profile"
