"""The death judge: the one definition of engine death the runner stops on and the rules report."""

from loadrepro.judge.death import DEATH_POLLS, DeathJudge


def feed(judge: DeathJudge, events: str) -> list[int]:
    """`events`: f = a request failed, h = /health 200, u = /health non-200; the indices of polls that said dead."""
    dead = []
    for i, event in enumerate(events):
        if event == "f":
            judge.request_failed()
        elif judge.poll(event == "h"):
            dead.append(i)
    return dead


def test_two_unhealthy_polls_while_requests_fail_are_death_at_the_second():
    assert DEATH_POLLS == 2
    assert feed(DeathJudge(usable=True), "hfuu") == [3]
    assert feed(DeathJudge(usable=True), "hufu") == [3]


def test_one_unhealthy_poll_is_not_death():
    assert feed(DeathJudge(usable=True), "hfuhu") == []


def test_unhealthy_polls_without_failing_requests_are_not_death():
    assert feed(DeathJudge(usable=True), "huuuu") == []


def test_a_healthy_poll_forgets_earlier_failures():
    assert feed(DeathJudge(usable=True), "fhuu") == []


def test_death_is_said_once():
    assert feed(DeathJudge(usable=True), "fuuuuu") == [2]


def test_a_health_endpoint_that_was_not_200_before_the_run_says_nothing():
    assert feed(DeathJudge(usable=False), "fuuuu") == []
