"""Planning offline in a Hugging Face tokenizer's tokens (`run --dry-run --tokenizer PATH`)."""

import re

from tests.helpers import cli


def test_dry_run_plans_exactly_in_a_local_tokenizers_tokens(tokenizer_dir, tmp_path):
    done = cli("run", "--profile", "quickstart", "--dry-run",
                           "--tokenizer", str(tokenizer_dir), "--set", "workload.conversations=3",
                           "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert f"counted with local tokenizer {tokenizer_dir / 'tokenizer.json'}" in done.stdout
    errors = [float(x) for x in re.findall(r"\(([+-]\d+\.\d+)%\)", done.stdout)]
    assert len(errors) == 3 and all(abs(e) <= 0.5 for e in errors)  # counted by the tokenizer itself


def test_bad_tokenizer_paths_and_misuse_are_usage_errors(tmp_path):
    missing = cli("run", "--dry-run", "--tokenizer", str(tmp_path))
    assert missing.returncode == 2 and "no tokenizer.json" in missing.stderr
    live = cli("run", "--tokenizer", str(tmp_path))
    assert live.returncode == 2 and "no tokenizer.json" in live.stderr and "target:" not in live.stderr
