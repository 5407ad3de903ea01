"""The capacity model at its edges: each limit exactly met and exceeded by one, and the verdict's words."""

import pytest

from loadrepro.config.capacity import (
    EngineLimits,
    Fit,
    KvConfig,
    bytes_per_token,
    capacity,
    parse_size,
    predict,
    smallest_pool_tokens,
)

# 16 tokens per block, 100 blocks: a 1,600-token pool.
LIMITS = EngineLimits("test", tokens_per_block=16, pool_blocks=100, max_seq_len=1024)


@pytest.mark.parametrize(("tokens", "concurrency", "limits", "expected"), [
    (1024, 1, LIMITS, (Fit.FITS, "")),  # exactly max_seq_len
    (1025, 1, LIMITS, (Fit.NEVER_FITS, "max length")),
    (800, 2, LIMITS, (Fit.FITS, "")),  # 2 x 50 blocks = the whole pool
    (801, 2, LIMITS, (Fit.MUST_WAIT, "pool")),  # 2 x 51 blocks
    (800, 1, EngineLimits("t", 16, 100, 4096, beam_width=2), (Fit.FITS, "")),  # 50 blocks x 2 beams
    (801, 1, EngineLimits("t", 16, 100, 4096, beam_width=2), (Fit.NEVER_FITS, "pool")),
    (1600, 1, EngineLimits("t", 16, 100, 4096), (Fit.FITS, "")),
    (1601, 1, EngineLimits("t", 16, 100, 4096), (Fit.NEVER_FITS, "pool")),
    (512, 1, EngineLimits("t", 16, 100, 4096, draft_pool_tokens=512), (Fit.FITS, "")),
    (513, 1, EngineLimits("t", 16, 100, 4096, draft_pool_tokens=512), (Fit.NEVER_FITS, "draft pool")),
    (256, 2, EngineLimits("t", 16, 100, 4096, draft_pool_tokens=512), (Fit.FITS, "")),
    (257, 2, EngineLimits("t", 16, 100, 4096, draft_pool_tokens=512), (Fit.MUST_WAIT, "draft pool")),
    (64, 1, EngineLimits("t", 16, 100, 4096, index_entries=4), (Fit.FITS, "")),  # 4 blocks, 4 entries
    (65, 1, EngineLimits("t", 16, 100, 4096, index_entries=4), (Fit.NEVER_FITS, "page-index span")),
])
def test_predict_at_each_limit(tokens, concurrency, limits, expected):
    assert predict(tokens, concurrency, limits) == expected


def test_smallest_pool_counts_beams_and_the_draft_pool():
    assert smallest_pool_tokens(EngineLimits("t", 16, 100, 4096)) == 1600
    assert smallest_pool_tokens(EngineLimits("t", 16, 100, 4096, beam_width=4)) == 400
    assert smallest_pool_tokens(EngineLimits("t", 16, 100, 4096, draft_pool_tokens=300)) == 300
    assert smallest_pool_tokens(EngineLimits("t", 16, 100, 4096, beam_width=2, draft_pool_tokens=900)) == 800


def test_capacity_fits_exactly_and_says_so():
    kv = KvConfig(bytes_per_token=1000, tokens_per_block=16, pool_bytes=1_600_000, max_seq_len=800, max_batch=2)
    cap = capacity(kv)
    assert (cap.pool_tokens, cap.pool_blocks, cap.blocks_needed, cap.full_sequences_fit) == (1600, 100, 100, 2)
    assert cap.clamped_seq_len == 800 and cap.draft_pool_tokens is None
    assert (cap.verdict, cap.why) == (Fit.FITS, "all 2 full-length sequences fit at once (2 would)")


def test_capacity_must_wait_one_block_short():
    kv = KvConfig(bytes_per_token=1000, tokens_per_block=16, pool_bytes=1_599_999, max_seq_len=800, max_batch=2)
    cap = capacity(kv)
    assert (cap.pool_tokens, cap.pool_blocks, cap.full_sequences_fit) == (1599, 99, 1)
    assert (cap.verdict, cap.why) == (Fit.MUST_WAIT, "1 of 2 full-length sequences fit at once; the rest must "
                                                         "wait (or be preempted)")


def test_capacity_never_names_both_pools_and_clamps_to_the_smaller():
    kv = KvConfig(bytes_per_token=1000, tokens_per_block=16, pool_bytes=1_600_000, max_seq_len=800,
                  draft_bytes_per_token=500, draft_pool_bytes=350_000)
    cap = capacity(kv)
    assert cap.draft_pool_tokens == 700 and cap.clamped_seq_len == 700 and cap.full_sequences_fit == 0
    assert cap.index_width == 44 and cap.index_needed == 52  # ceil(701/16)=44, ceil(801/16)=51 -> 52
    assert (cap.verdict, cap.why) == (Fit.NEVER_FITS, "one 800-token sequence needs 50 blocks; the pool holds 100 "
                                                     "and the draft pool 700 tokens")
    beams = capacity(KvConfig(1000, 16, 1_600_000, 800, beam_width=2))
    assert beams.full_sequences_fit == 1 and beams.blocks_needed == 100
    alone = capacity(KvConfig(1000, 16, 1_000_000, 1024))
    assert alone.why == "one 1024-token sequence needs 64 blocks; the pool holds 62"


def test_a_shared_pool_is_split_for_equal_token_counts():
    cap = capacity(KvConfig(bytes_per_token=1000, tokens_per_block=16, pool_bytes=1_500_000, max_seq_len=512,
                            draft_bytes_per_token=500))
    assert cap.pool_tokens == 1000 and cap.draft_pool_tokens == 1000


@pytest.mark.parametrize(("text", "expected"), [("1.5k", 1536), ("2KB", 2000), ("3 MiB", 3 << 20), (7, 7),
                                                 ("1T", 1 << 40), ("1tb", 10**12), (2.9, 2)])
def test_more_sizes(text, expected):
    assert parse_size(text) == expected


def test_bytes_per_token_per_dtype():
    assert bytes_per_token(2, 2, 128, "fp16") == 2048
    assert bytes_per_token(2, 2, 128, "fp8") == 1024
    assert bytes_per_token(3, 4, 64, "fp32") == 6144


def test_the_capacity_commands_options_are_the_engine_sections_keys():
    """One definition: every [engine] key is an option of `loadrepro capacity` with its description as help, two
    of them under their shorter command-line names."""
    import typer.main

    from loadrepro.cli import commands as cli
    from loadrepro.config.profile import EngineSpec

    command = typer.main.get_command(cli.app).commands["capacity"]  # type: ignore[attr-defined]
    options = {p.name: p for p in command.params}
    for name, field in EngineSpec.model_fields.items():
        assert name in options and options[name].help == field.description, name
    assert options["gpu_memory_bytes"].opts == ["--gpu-memory"] and options["weights_bytes"].opts == ["--weights"]
    assert options["tokens_per_block"].default == 32 and options["max_seq_len"].default == 8192
