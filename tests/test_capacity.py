"""The seeds' KV arithmetic, exactly, and per-request predictions."""

import pytest

from loadrepro.config.capacity import (
    EngineLimits,
    Fit,
    KvConfig,
    blocks_needed,
    bytes_per_token,
    capacity,
    index_width,
    parse_size,
    predict,
    prefix_for_overrun,
    split_pool,
)
from loadrepro.config.profile import EngineSpec
from loadrepro.errors import UsageError
from loadrepro.load.limits import from_profile


def test_seed_001_page_index_arithmetic():
    bpt = bytes_per_token(layers=2, kv_heads=2, head_dim=128, dtype="fp16")
    assert bpt == 2048
    cap = capacity(KvConfig(bpt, 32, parse_size("4MiB"), max_seq_len=8192))
    assert cap.pool_tokens == 2048 and cap.pool_blocks == 64 and cap.clamped_seq_len == 2048
    assert index_width(2048, 32) == 68  # ceil(2049 / 32) = 65, up to a multiple of 4
    assert blocks_needed(1, 8192, 32) == 256  # what an 8192-token sequence needs
    assert cap.index_width == 68 and cap.index_needed == 260  # sized from max_seq_len: the one-line fix
    assert cap.verdict is Fit.NEVER_FITS


def test_blocks_needed_runbook_formula():
    assert blocks_needed(max_batch=8, max_seq_len=4096, tokens_per_block=64, beam_width=4) == 8 * 64 * 4
    cap = capacity(KvConfig(2048, 64, 8 * 64 * 4 * 64 * 2048 // 2, max_seq_len=4096, max_batch=8, beam_width=4))
    assert cap.verdict is Fit.MUST_WAIT and cap.full_sequences_fit == 4


def test_seed_003_dsa_split():
    total = parse_size("60.51GiB")
    primary, draft = split_pool(total, 49_968, 1_284)
    tokens = total // (49_968 + 1_284)
    assert (primary, draft) == (tokens * 49_968, tokens * 1_284)
    assert tokens == 1_267_699
    cap = capacity(KvConfig(49_968, 64, total, max_seq_len=131_072, max_batch=12, draft_bytes_per_token=1_284))
    assert cap.pool_tokens == cap.draft_pool_tokens == tokens
    assert cap.pool_blocks == tokens // 64 and cap.full_sequences_fit == 9


@pytest.mark.parametrize("text,expected", [("4194304", 4 << 20), ("4MiB", 4 << 20), ("4M", 4 << 20),
                                           ("1.5GB", 1_500_000_000), (2048, 2048)])
def test_sizes(text, expected):
    assert parse_size(text) == expected


def test_bad_input_is_a_usage_error():
    with pytest.raises(UsageError):
        parse_size("lots")
    with pytest.raises(UsageError):
        bytes_per_token(2, 2, 128, "fp64")


def test_predictions_name_the_limit():
    limits = EngineLimits("test", tokens_per_block=32, pool_blocks=512, max_seq_len=8192, draft_pool_tokens=4096,
                          index_entries=68)
    assert predict(9000, 1, limits) == (Fit.NEVER_FITS, "max length")
    assert predict(5000, 1, limits) == (Fit.NEVER_FITS, "draft pool")
    assert predict(2200, 1, limits) == (Fit.NEVER_FITS, "page-index span")
    assert predict(1500, 3, limits) == (Fit.MUST_WAIT, "draft pool")
    assert predict(1000, 3, limits) == (Fit.FITS, "")


def test_profile_engine_section_gives_limits():
    limits = from_profile(EngineSpec(layers=2, kv_heads=2, head_dim=128, tokens_per_block=32, pool_bytes="32MiB",
                                     max_seq_len=8192, index_pool_bytes="4MiB"))
    assert limits.pool_blocks == 512 and limits.index_entries == 68
    assert from_profile(EngineSpec()) is None


def test_overrun_sizing():
    limits = EngineLimits("test", tokens_per_block=16, pool_blocks=1000, max_seq_len=100_000,
                          draft_pool_tokens=8000)
    prefix = prefix_for_overrun(1.5, conversations=4, later_tokens=100, max_tokens=50, limits=limits)
    assert 4 * (prefix + 100 + 50) == pytest.approx(1.5 * 8000, abs=4)


@pytest.mark.parametrize("length", [0, 1, 31, 32, 33, 2047, 2048, 2049, 8191, 8192, 81_000, 131_072])
@pytest.mark.parametrize("block", [1, 16, 32, 64])
def test_the_simulated_engines_arithmetic_is_the_capacity_models(length, block):
    """sim/kvcache.py restates config/capacity.py's page-index and block arithmetic; the two must never disagree."""
    from loadrepro.config.capacity import blocks_needed, index_width
    from loadrepro.sim.kvcache import blocks_for, clamped_seq_len, page_index_width

    assert page_index_width(length, block) == index_width(length, block)
    assert blocks_for(length, block) == blocks_needed(1, length, block)
    assert clamped_seq_len(4 << 20, 2048, 8192) == 2048 and index_width(2048, 32) == 68  # seed 001's figures
