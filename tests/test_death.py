"""The death judge alone (judge/death.py, pure): event by event, when the engine is dead, when it is said, with
which time and words; and what keeps an engine from being judged dead."""

from loadrepro.judge.death import DEATH_POLLS, UPSTREAM_FAILURES, Death, DeathJudge

UPSTREAM = "gateway-upstream-connection"


# The judge itself, event by event: h = /health 200, u = /health unhealthy (`unhealthy`), f = a request failed,
# t = a token arrived.
def judged(events: str, usable: bool = True, unhealthy: int | str = 503) -> list[tuple[int, Death]]:
    """Each Death the judge said, with the 1-based event that made it say so."""
    judge, progress, said = DeathJudge(usable=usable), 0, []
    for i, event in enumerate(events, start=1):
        t_ns = i * 1_000
        if event == "t":
            progress = t_ns
        elif event == "f":
            judge.request_failed(t_ns, None, progress)
        elif (death := judge.poll(t_ns, 200 if event == "h" else unhealthy, progress)) is not None:
            said.append((i, death))
    return said


def feed(events: str, usable: bool = True) -> list[int]:
    """The events at which death was said."""
    return [i for i, _ in judged(events, usable)]


def test_two_unhealthy_polls_while_requests_fail_and_nothing_progresses_are_death():
    assert feed("hfuu") == [4]
    assert feed("hufu") == [4]
    assert feed("hfuhu") == []  # one unhealthy poll is not death
    assert feed("huuuu") == []  # nothing failed
    assert feed("fhuu") == []  # a healthy poll forgets earlier failures
    assert feed("fuuuuu") == [3]  # said once
    assert feed("fuuuu", usable=False) == []  # /health was not 200 before the run


def test_an_engine_that_keeps_making_progress_is_not_dead_whatever_its_health_says():
    assert feed("hfutututu") == []
    assert feed("hfutuuu") == [7]  # the tokens stopped: two unhealthy polls with nothing in between


def test_every_request_failing_with_a_gateways_upstream_error_is_death():
    judge = DeathJudge(usable=True)
    assert judge.poll(1, 200, 0) is None
    died = [judge.request_failed(10 + i, "gateway-upstream-connection", 0) for i in range(4)]
    assert died[:3] == [None] * 3 and died[3].t_ns == 10
    assert "every request since then failed with the gateway's `gateway-upstream-connection` (4 in a row)" in \
        died[3].words


def test_a_success_or_progress_between_gateway_errors_is_not_death():
    judge = DeathJudge(usable=True)
    for i in range(3):
        assert judge.request_failed(10 + i, "gateway-upstream-connection", 0) is None
    judge.request_ok()
    assert all(judge.request_failed(20 + i, "gateway-upstream-connection", 0) is None for i in range(3))
    assert judge.request_failed(30, "gateway-upstream-connection", 25) is None  # a token came after the first


def deaths(events: str) -> list[Death]:
    """The Deaths themselves, /health unreachable when unhealthy."""
    return [death for _, death in judged(events, unhealthy="unreachable")]


def test_death_is_dated_at_the_first_poll_of_the_streak_and_says_how_it_was_judged():
    assert DEATH_POLLS == 2
    assert deaths("hfuuu") == [Death(3_000, "/health answered unreachable 2 times in a row while requests failed "
                                             "and the engine made no progress")]
    assert deaths("hufhu") == []  # a healthy poll ended the streak, and forgot the failure


def test_progress_between_polls_restarts_the_streak_but_keeps_the_failures():
    assert [d.t_ns for d in deaths("hfutuuu")] == [6_000]  # the streak restarts at the first poll after the token


def test_upstream_death_is_dated_at_the_first_failure_of_the_run_of_them():
    assert UPSTREAM_FAILURES == 4
    judge = DeathJudge(usable=True)
    assert judge.poll(1, 503, 0) is None
    died = [judge.request_failed(10 + i, UPSTREAM, 0) for i in range(5)]
    assert died[:3] == [None] * 3 and died[4] is None  # said once
    assert died[3] == Death(10, f"every request since then failed with the gateway's `{UPSTREAM}` (4 in a row) and "
                                "none succeeded")  # /health not 200: nothing said of the gateway


def test_upstream_death_behind_a_healthy_gateway_names_the_gateway():
    judge = DeathJudge(usable=True)
    judge.poll(1, 200, 0)
    death = [judge.request_failed(10 + i, UPSTREAM, 0) for i in range(4)][-1]
    assert death is not None and death.words.endswith(
        "; /health still answers 200, so it belongs to the gateway, not to the engine behind it")


def test_another_signature_or_failure_of_another_kind_starts_the_count_again():
    judge = DeathJudge(usable=True)
    for i in range(3):
        assert judge.request_failed(10 + i, UPSTREAM, 0) is None
    assert judge.request_failed(13, "proxy-bad-gateway", 0) is None  # another gateway's word: a new run of them
    assert [judge.request_failed(14 + i, "proxy-bad-gateway", 0) for i in range(3)][-1] == Death(
        13, "every request since then failed with the gateway's `proxy-bad-gateway` (4 in a row) and none succeeded")
    other = DeathJudge(usable=True)
    for i in range(3):
        other.request_failed(10 + i, UPSTREAM, 0)
    other.request_failed(13, None, 0)  # a failure without the gateway's word
    assert [other.request_failed(14 + i, UPSTREAM, 0) for i in range(4)][-1].t_ns == 14


def test_failures_are_counted_and_forgotten_only_by_a_healthy_poll():
    judge = DeathJudge(usable=True)
    judge.request_failed(1, None, 0)
    judge.request_failed(2, None, 0)
    assert judge.failures == 2
    judge.poll(3, 503, 0)
    assert judge.failures == 2 and judge.unhealthy_streak == 1 and judge.last_status == 503
    judge.poll(4, 200, 0)
    assert judge.failures == 0 and judge.unhealthy_streak == 0 and judge.last_poll_ns == 4
