"""Fixtures more than one test module uses."""

import json
import os

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from loadrepro.config.defaults import PICTURES_ENV, SIM_IN_PROCESS_ENV
from loadrepro.workload.corpus import record_pool

# The runs the tests start without naming an engine serve the simulated engine on a thread of the process that runs
# them (this one, or a command a test spawns): no second interpreter to start per run. A test of the engine as a
# process of its own sets it to "0"; `LOADREPRO_SIM_IN_PROCESS=0 pytest` runs every such run with a process.
os.environ.setdefault(SIM_IN_PROCESS_ENV, "1")
# Nor do they draw the pictures (about half a second a run): a test that reads them asks for them (`pictures`).
# Examples written for the docs (LOADREPRO_WRITE_EXAMPLES) keep them, so that their report.md links its pictures.
if not os.environ.get("LOADREPRO_WRITE_EXAMPLES"):
    os.environ.setdefault(PICTURES_ENV, "0")


@pytest.fixture(scope="session", autouse=True)
def _shared_stub_server():
    """The one StubServer server of this test process (tests/stub_server.py), stopped when its tests are done."""
    from tests.stub_server import SHARED

    yield
    SHARED.stop()


@pytest.fixture
def pictures(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs of this test draw their pictures (report.html, compare.html; the PNGs with --png)."""
    monkeypatch.setenv(PICTURES_ENV, "1")


TEMPLATE = ("{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tok")
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=800, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(record_pool(3, size=400).texts, trainer)
    bpe.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE, "bos_token": "<s>",
                                                              "eos_token": "</s>"}))
    return folder


# Fixtures that install or start a real engine, gateway or Prometheus (tests/engines/conftest.py): a test that uses
# one is marked `engine`, so that the fast tier leaves it out rather than waiting for an install.
ENGINE_FIXTURES = {"llama_server", "gguf_tiny", "gguf_26m", "litellm_proxy", "vllm_python", "vllm_model", "prometheus"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unmarked = [item.nodeid for item in items if ENGINE_FIXTURES & set(getattr(item, "fixturenames", ()))
                and item.get_closest_marker("engine") is None]
    if unmarked:
        raise pytest.UsageError(f"these use a real engine but are not marked `engine`: {', '.join(unmarked)}")


SHARED = {"engines": ("tests/engines/",), "ray": ("tests/test_workers.py", "tests/test_ray_nodes.py")}
# Modules whose tests share a costly module-scoped fixture (runs made once, then read by each test): one worker runs
# all of a module's tests, so the fixture is made once, not once per worker.
WHOLE_MODULES = ("tests/test_gate.py", "tests/test_html.py", "tests/test_stress.py", "tests/test_trace_anonymize.py")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own scheduler
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Tests that share what only one may use at a time run on one worker, one after another (pyproject's addopts
    run two): the real engines (one build cache; one engine per session or module) and Ray (a local cluster). The
    others go to whichever worker is free. (xdist's own xdist_group marks do not reach its scheduler on this
    pytest: it renames the test ids, which pytest no longer lets it do.)"""
    from xdist.scheduler import LoadScopeScheduling

    class SharedScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(WHOLE_MODULES):
                return nodeid.split("::", 1)[0]
            return next((group for group, paths in SHARED.items() if nodeid.startswith(paths)), nodeid)

    return SharedScheduling(config, log)
