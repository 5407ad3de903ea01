"""The simulated model's answers: the same context answers the same way however much of it came from the cache,
near-ties alone may flip in a batch, and a stale prefix index (prefix-corruption, stock) answers from another
request's blocks. Pure: the scheduler stepped by hand."""

from loadrepro.sim.config import sim_config
from loadrepro.sim.kvcache import block_hashes
from loadrepro.sim.replies import NEAR_TIE_EVERY, choose, continue_chain
from loadrepro.sim.scheduler import Scheduler


def words(n: int, tag: str = "w") -> list[str]:
    return [f"{tag}{i}" for i in range(n)]


def answers(scheduler: Scheduler, limit: int = 10_000) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for _ in range(limit):
        if scheduler.idle:
            return out
        for request_id, choice in scheduler.step().tokens:
            out.setdefault(request_id, []).append(choice.text)
    raise AssertionError("scheduler did not settle")


def test_the_fingerprint_is_the_same_whatever_the_cache_served():
    tokens = words(45)
    hashes = block_hashes(tokens, 4)
    cold = continue_chain(b"", tokens, 4)
    assert all(continue_chain(hashes[k - 1], tokens[4 * k:], 4) == cold for k in range(1, len(hashes) + 1))
    assert continue_chain(b"", tokens[:-1] + ["x"], 4) != cold


def test_only_near_ties_flip_in_a_batch_and_margins_are_what_they_say():
    fingerprint = continue_chain(b"", words(30), 4)
    flipped = ties = 0
    for position in range(400):
        alone, batched = choose(fingerprint, position, "", 1, None), choose(fingerprint, position, "", 8, None)
        margin = alone.logprob - alone.runner_logprob
        assert alone.logprob < 0 and (margin < 0.31 or margin >= 2.0)
        ties += margin < 0.31
        if batched.text != alone.text:
            flipped += 1
            assert margin < 0.31 and batched.text == alone.runner_text
    assert 400 / NEAR_TIE_EVERY / 2 < ties < 400 / NEAR_TIE_EVERY * 2 and 0 < flipped < ties


def test_a_request_answers_alike_from_the_cache_and_cold():
    prompt = ["LRAAAAAAAA"] + words(40)
    warm = Scheduler(sim_config("healthy", block_size=4, primary_blocks=64))
    warm.submit(prompt, 3, ignore_eos=True)
    answers(warm)
    again = warm.submit(prompt, 6, ignore_eos=True)
    cold = Scheduler(sim_config("healthy", block_size=4, primary_blocks=64))
    first = cold.submit(prompt, 6, ignore_eos=True)
    assert answers(warm)[again] == answers(cold)[first]
    assert answers_of_tag(cold, prompt) == " LRAAAAAAAA"


def answers_of_tag(scheduler: Scheduler, prompt: list[str]) -> str:
    request = scheduler.submit(prompt, 1, ignore_eos=True)
    return answers(scheduler)[request][0]


def stale_hit(policy: str) -> tuple[list[str], list[str], int]:
    """A's prefix cached, its blocks taken by B (the pool holds one of them), then A asked again."""
    config = sim_config("prefix-corruption", policy, block_size=4, primary_blocks=12, max_model_len=64)
    scheduler = Scheduler(config)
    a, b = ["LRAAAAAAAA"] + words(39, "a"), ["LRBBBBBBBB"] + words(39, "b")
    first = scheduler.submit(a, 2, ignore_eos=True)
    alone = answers(scheduler)[first]
    scheduler.submit(b, 2, ignore_eos=True)
    answers(scheduler)
    again = scheduler.submit(a, 2, ignore_eos=True)
    done = {}
    for _ in range(1000):
        if scheduler.idle:
            break
        out = scheduler.step()
        done.update({f.request_id: f for f in out.finished})
        for request_id, choice in out.tokens:
            done.setdefault(("tokens", request_id), []).append(choice.text)
    return alone, done[("tokens", again)], done[again].cached_tokens


def test_a_stale_prefix_index_answers_from_the_blocks_new_owner_and_patched_recomputes():
    alone, stock, cached = stale_hit("stock")
    assert cached > 0 and stock[0] == " LRBBBBBBBB" and stock != alone
    alone, patched, cached = stale_hit("patched")
    assert patched == alone  # what is still cached is what its hash says
