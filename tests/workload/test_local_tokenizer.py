"""Planning offline in a Hugging Face tokenizer's tokens (`run --dry-run --tokenizer PATH`)."""

import json
import re
import subprocess
import sys

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from loadrepro.workload.corpus import record_pool

TEMPLATE = ("{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


@pytest.fixture(scope="module")
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


def test_dry_run_plans_exactly_in_a_local_tokenizers_tokens(tokenizer_dir, tmp_path):
    done = subprocess.run([sys.executable, "-m", "loadrepro", "run", "--profile", "quickstart", "--dry-run",
                           "--tokenizer", str(tokenizer_dir), "--set", "workload.conversations=3",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"counted with local tokenizer {tokenizer_dir / 'tokenizer.json'}" in done.stdout
    errors = [float(x) for x in re.findall(r"\(([+-]\d+\.\d+)%\)", done.stdout)]
    assert len(errors) == 3 and all(abs(e) <= 0.5 for e in errors)  # counted by the tokenizer itself


def test_bad_tokenizer_paths_and_misuse_are_usage_errors(tmp_path):
    missing = subprocess.run([sys.executable, "-m", "loadrepro", "run", "--dry-run", "--tokenizer", str(tmp_path)],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "no tokenizer.json" in missing.stderr
    live = subprocess.run([sys.executable, "-m", "loadrepro", "run", "--tokenizer", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert live.returncode == 2 and "no tokenizer.json" in live.stderr and "target:" not in live.stderr
