import pytest

from loadrepro.sim.config import Policy, Scenario, sim_config
from loadrepro.sim.scheduler import Scheduler
from loadrepro.sim.steps import Rejection


def words(n: int, tag: str = "w") -> list[str]:
    return [f"{tag}{i}" for i in range(n)]


def run_until_idle(scheduler: Scheduler, limit: int = 10_000):
    outputs = []
    for _ in range(limit):
        if scheduler.idle or scheduler.death is not None:
            return outputs
        outputs.append(scheduler.step())
    raise AssertionError("scheduler did not settle")


def finished(outputs):
    return {f.request_id: f for out in outputs for f in out.finished}


def test_repeated_prefix_is_served_from_cache_and_counted():
    scheduler = Scheduler(sim_config("healthy", block_size=4, primary_blocks=64))
    prefix = words(40)
    first = scheduler.submit(prefix, 2, ignore_eos=True)
    done = finished(run_until_idle(scheduler))
    assert done[first].cached_tokens == 0
    second = scheduler.submit(prefix + words(6, "x"), 2, ignore_eos=True)
    done = finished(run_until_idle(scheduler))
    assert done[second].cached_tokens == 40
    stats = scheduler.stats()
    assert stats.prefix_queries == 40 + 46 and stats.prefix_hits == 40


def test_concurrent_requests_share_prefix_blocks():
    scheduler = Scheduler(sim_config("healthy", block_size=4, primary_blocks=64))
    prefix = words(40)
    scheduler.submit(prefix + ["a"], 50, ignore_eos=True)
    scheduler.step()  # admits and prefills the first: its 10 full prefix blocks become findable
    used_by_one = scheduler.stats().primary_used
    scheduler.submit(prefix + ["b"], 50, ignore_eos=True)
    scheduler.step()
    # The second request owns only its own last block: 10 blocks are shared.
    assert scheduler.stats().primary_used == used_by_one + 1


def test_primary_pressure_preempts_and_everything_still_finishes():
    scheduler = Scheduler(sim_config("healthy", block_size=4, primary_blocks=10))
    a = scheduler.submit(words(16, "a"), 12, ignore_eos=True)
    b = scheduler.submit(words(16, "b"), 12, ignore_eos=True)
    outputs = run_until_idle(scheduler)
    assert scheduler.death is None
    assert any(out.preempted for out in outputs)
    assert scheduler.stats().preemptions >= 1
    done = finished(outputs)
    assert done[a].completion_tokens == 12 and done[b].completion_tokens == 12
    assert scheduler.stats().primary_used == 0


def test_stock_draft_pool_dies_when_the_mirror_cannot_grow_past_its_capacity():
    # Mirror: 10 blocks x 4 tokens = 40 tokens. Two 20-token prompts fit exactly, but the first one's first
    # decoded token (21 tokens, a 6th block) is taken before the second's prefill, which then finds 4 blocks.
    config = sim_config("draft-pool", "stock", block_size=4, primary_blocks=100, draft_blocks=10,
                        max_model_len=1000)
    scheduler = Scheduler(config)
    scheduler.submit(words(20, "a"), 8, ignore_eos=True)
    second = scheduler.submit(words(20, "b"), 8, ignore_eos=True)
    out = scheduler.step()
    assert out.death is not None
    assert out.death.message == (f"Draft KV cache context resize failed for request {second}: "
                                 "could not resize to 20 tokens")
    assert scheduler.stats().draft_used == 10 and scheduler.stats().primary_used < 100  # the mirror is full


def test_stock_draft_pool_one_request_dies_one_token_past_the_mirror():
    config = sim_config("draft-pool", "stock", block_size=4, primary_blocks=100, draft_blocks=10,
                        max_model_len=1000)
    scheduler = Scheduler(config)
    request = scheduler.submit(words(36, "a"), 8, ignore_eos=True)
    outputs = run_until_idle(scheduler)
    assert len([t for out in outputs for t in out.tokens]) == 4  # 37..40 tokens fit in 10 blocks
    assert scheduler.death.message == (f"Draft KV cache context resize failed for request {request}: "
                                       "could not resize to 41 tokens")


def test_stock_draft_pool_fails_to_resume_a_preempted_request():
    # Two requests with one 8-token prefix arrive together, so neither finds the other's blocks: 3 + 3 blocks
    # fill both 6-block pools. The 13th token preempts the second. When it resumes, the prefix is cached, so the
    # primary pool wants only 1 more block and admits it; the mirror, which shares nothing, needs 3 and has 2.
    config = sim_config("draft-pool", "stock", block_size=4, primary_blocks=6, draft_blocks=6,
                        max_model_len=1000)
    scheduler = Scheduler(config)
    prefix = words(8)
    scheduler.submit(prefix + ["a"], 8, ignore_eos=True)
    second = scheduler.submit(prefix + ["b"], 8, ignore_eos=True)
    outputs = run_until_idle(scheduler)
    assert second in [r for out in outputs for r in out.preempted]
    assert scheduler.death is not None
    assert scheduler.death.message == f"Failed to resume draft KV cache for request {second}"


def test_stock_page_index_dies_one_token_past_the_table():
    config = sim_config("page-index", "stock")  # 4 MiB / 2048 B per token -> 2048 tokens -> 68 entries
    scheduler = Scheduler(config)
    assert scheduler.table_width == 68
    request = scheduler.submit(words(68 * 32), 4, ignore_eos=True)  # exactly fills the table
    outputs = run_until_idle(scheduler)
    assert not [t for out in outputs for t in out.tokens]  # died producing its first token
    assert scheduler.death is not None
    assert scheduler.death.message.startswith("User-provided base page indices is too short")
    assert f"request {request} needs 69 pages for 2177 tokens" in scheduler.death.message


def test_stock_page_index_accepts_what_fits_the_table():
    scheduler = Scheduler(sim_config("page-index", "stock"))
    scheduler.submit(words(68 * 32 - 4), 4, ignore_eos=True)
    run_until_idle(scheduler)
    assert scheduler.death is None


def test_stock_blocks_exhausted_dies_on_the_first_allocation_that_fails():
    # 16 blocks; beam 2 x 4 blocks per 16-token prompt: two requests take all 16, the next token needs 2 more.
    config = sim_config("blocks-exhausted", "stock", block_size=4, primary_blocks=16, beam_width=2,
                        max_model_len=100)
    scheduler = Scheduler(config)
    scheduler.submit(words(16, "a"), 4, ignore_eos=True)
    scheduler.submit(words(16, "b"), 4, ignore_eos=True)
    out = scheduler.step()
    assert out.death is not None and out.death.message == "Available blocks exhausted"


@pytest.mark.parametrize("scenario,overrides,prompt,max_tokens,message", [
    ("draft-pool", dict(block_size=4, primary_blocks=100, draft_blocks=10, max_model_len=1000), 38, 4,
     "Request requires 11 draft KV cache blocks to complete, which exceeds the draft pool capacity of 10 blocks"),
    ("page-index", {}, 2170, 7,
     "Request requires 69 page-index entries to complete, which exceeds the page-index table of 68 entries"),
    ("page-index", {}, 2170, 6, None),
    ("blocks-exhausted", dict(block_size=4, primary_blocks=16, beam_width=2, max_model_len=100), 30, 4,
     "Request requires 18 KV cache blocks to complete, which exceeds the total capacity of 16 blocks"),
])
def test_patched_rejects_at_admission_what_can_never_fit(scenario, overrides, prompt, max_tokens, message):
    scheduler = Scheduler(sim_config(scenario, "patched", **overrides))
    result = scheduler.submit(words(prompt), max_tokens, ignore_eos=True)
    if message is None:
        assert isinstance(result, int)
    else:
        assert isinstance(result, Rejection) and result.status == 400
        assert result.message.startswith(message)


def test_page_index_rejection_boundary_is_the_table_span():
    scheduler = Scheduler(sim_config("page-index", "patched"))
    # 2176 tokens = 68 entries x 32: the longest request the table can hold.
    assert isinstance(scheduler.submit(words(2170), 6, ignore_eos=True), int)
    assert isinstance(scheduler.submit(words(2170), 7, ignore_eos=True), Rejection)


@pytest.mark.parametrize("scenario,overrides", [
    ("draft-pool", dict(block_size=4, primary_blocks=100, draft_blocks=10, max_model_len=1000)),
    ("blocks-exhausted", dict(block_size=4, primary_blocks=16, beam_width=2, max_model_len=100)),
])
def test_patched_makes_the_second_request_wait_instead_of_dying(scenario, overrides):
    scheduler = Scheduler(sim_config(scenario, "patched", **overrides))
    first = scheduler.submit(words(16, "a"), 8, ignore_eos=True)  # reserves 6 blocks per beam
    second = scheduler.submit(words(16, "b"), 8, ignore_eos=True)
    scheduler.step()
    stats = scheduler.stats()
    assert (stats.running, stats.waiting) == (1, 1)  # fits / must wait
    done = finished(run_until_idle(scheduler))
    assert scheduler.death is None
    assert set(done) == {first, second}


def test_requests_beyond_max_model_len_are_rejected_like_vllm():
    scheduler = Scheduler(sim_config("healthy", max_model_len=100))
    long_prompt = scheduler.submit(words(101), 1, ignore_eos=True)
    assert isinstance(long_prompt, Rejection)
    assert "maximum context length is 100 tokens" in long_prompt.message
    too_much_output = scheduler.submit(words(50), 51, ignore_eos=True)
    assert isinstance(too_much_output, Rejection)
    assert "'max_tokens' or 'max_completion_tokens' is too large: 51" in too_much_output.message


def test_abort_frees_blocks_of_running_and_waiting_requests():
    scheduler = Scheduler(sim_config("healthy", block_size=4, primary_blocks=8))
    running = scheduler.submit(words(20, "a"), 100, ignore_eos=True)
    waiting = scheduler.submit(words(20, "b"), 100, ignore_eos=True)
    scheduler.step()
    assert scheduler.stats().waiting == 1
    scheduler.abort(waiting)
    scheduler.abort(running)
    assert scheduler.idle and scheduler.stats().primary_used == 0


def test_without_ignore_eos_the_answer_length_is_stable_and_bounded():
    prompt = words(30)
    lengths = []
    for _ in range(2):
        scheduler = Scheduler(sim_config("healthy"))
        request = scheduler.submit(prompt, 1000, ignore_eos=False)
        lengths.append(finished(run_until_idle(scheduler))[request])
    assert lengths[0].completion_tokens == lengths[1].completion_tokens
    assert lengths[0].finish_reason == "stop" and 1 <= lengths[0].completion_tokens <= 96


@pytest.mark.parametrize("scenario", list(Scenario))
@pytest.mark.parametrize("policy", list(Policy))
def test_every_scenario_and_policy_handles_a_small_request(scenario, policy):
    scheduler = Scheduler(sim_config(scenario, policy))
    request = scheduler.submit(words(100), 8, ignore_eos=True)
    done = finished(run_until_idle(scheduler))
    assert scheduler.death is None and done[request].completion_tokens == 8
