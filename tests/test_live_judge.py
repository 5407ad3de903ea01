"""The live judge (judge/live.py, pure): which requests' ends and /health polls the runner's judgement of the
engine's death counts, fed as the runner feeds it."""

from loadrepro.judge.death import UPSTREAM_FAILURES
from loadrepro.judge.live import LiveJudge
from loadrepro.records import Outcome

UPSTREAM = "gateway-upstream-connection"


def fed(outcomes: list[Outcome], signature: str | None = None, polls: tuple[int | str, ...] = (),
        process_runs: bool = False) -> bool:
    """Whether the engine was said dead after these requests' ends, then these /health polls."""
    judge = LiveJudge(frozenset({UPSTREAM}))
    judge.health_before(True)
    said = [judge.request_ended(o, signature, i, 0) for i, o in enumerate(outcomes, 1)]
    said += [judge.health_polled(1_000 + i, status, 0, process_runs) for i, status in enumerate(polls)]
    return any(d is not None for d in said)


def test_requests_loadrepro_or_a_fault_cut_say_nothing_of_the_engines_death():
    for outcome in (Outcome.CANCELLED, Outcome.REJECTED, Outcome.FAULTED):
        assert not LiveJudge.failed(outcome)
        assert not fed([outcome] * 5, polls=(503, 503, 503)), outcome
    assert fed([Outcome.SERVER_ERROR], polls=(503, 503))  # must: a failure, then /health not 200 twice


def test_a_gateways_upstream_word_is_death_unless_the_request_was_only_throttled():
    assert fed([Outcome.SERVER_ERROR] * UPSTREAM_FAILURES, UPSTREAM)
    assert not fed([Outcome.SERVER_ERROR] * (UPSTREAM_FAILURES - 1), UPSTREAM)
    assert not fed([Outcome.THROTTLED] * UPSTREAM_FAILURES, UPSTREAM)  # come back later: the upstream is there
    assert LiveJudge.failed(Outcome.THROTTLED)  # though it counts as a failure beside /health


def test_no_answer_from_an_engine_whose_process_runs_is_not_its_death():
    assert not fed([Outcome.TIMEOUT], polls=("unreachable",) * 4, process_runs=True)
    assert fed([Outcome.TIMEOUT], polls=("unreachable",) * 2, process_runs=False)
    assert fed([Outcome.TIMEOUT], polls=(503, 503), process_runs=True)  # its own word: out of service
