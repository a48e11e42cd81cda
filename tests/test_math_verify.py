"""Answer verification never hangs and never lies: hostile answers, threads, both backends."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from llmgym.envs.math import MathEnv
from llmgym.envs.math.verify import AnswerVerifier, Verdict, fast_verdict, is_computation, parse_number
from llmgym.error import InvalidOptionError

TIMEOUT = 2.0
#: Time allowed beyond the timeout to kill and reap a stuck worker on a loaded 2-core machine.
SLACK = 1.5


@pytest.fixture(scope="module", params=["math_verify", "sympy"])
def verifier(request):
    if request.param == "math_verify":
        pytest.importorskip("math_verify")
    pytest.importorskip("sympy")
    checker = AnswerVerifier(timeout=TIMEOUT, backend=request.param, workers=2)
    checker.warm_up()
    yield checker
    checker.close()


@pytest.fixture(scope="module")
def pool():
    """A warm two-worker verifier shared by the tests that use threads."""
    checker = AnswerVerifier(timeout=TIMEOUT, workers=2)
    checker.warm_up()
    yield checker
    checker.close()


def test_fast_path_reads_plain_numbers_exactly():
    assert parse_number("\\frac{-3}{4}") == parse_number("-\\frac{3}{4}") == parse_number("-0.75")
    assert parse_number("$1,000$") == 1000 and parse_number("x=7.") == 7
    assert parse_number("1/0") is None and parse_number("2^3") is None and parse_number("1" * 300) is None
    assert fast_verdict("1/3", "0.3333333") is False  # decimals count at face value
    assert fast_verdict("8", "2^3") is None  # not plainly a number: decided by a later stage


@pytest.mark.parametrize(("gold", "answer"), [
    ("2", "\\sqrt{4}"), ("1/2", "\\frac{2}{4}"), ("3/4", "\\frac{3}{4}"), ("5", "\\boxed{5}"),
    ("\\frac{\\sqrt{3}}{2}", "\\sqrt{3}/2"),
])
def test_equivalent_forms_that_need_the_worker_count(verifier, gold, answer):
    verdict = verifier.verify(gold, answer)
    assert verdict.correct, verdict


@pytest.mark.parametrize(("gold", "answer"), [
    ("16", "5 + 11"), ("42", "3 * 14"), ("25/6", "3/2 + 8/3"), ("-18", "2*(-9)"), ("8", "2^3"), ("1/2", "2^{-1}"),
    ("6", "2 \\cdot 3"), ("25/6", "\\frac{3}{2} + \\frac{8}{3}"), ("16", "\\boxed{5 + 11}"), ("42", "x = 3 \\times 14"),
])
def test_a_computation_of_the_right_value_is_not_an_answer(verifier, gold, answer):
    """Copying "Compute 5 + 11." back would score if the worker evaluated it; the number is asked for."""
    verdict = verifier.verify(gold, answer)
    assert (verdict.correct, verdict.source) == (False, "computation") and is_computation(answer)


@pytest.mark.parametrize(("gold", "answer", "correct"), [
    ("96", "16 * 6} = 9", False), ("25/6", "3/2 + 8/3} = 5", False), ("40", "21 + 19} = 30", False),
    ("16", "5 + 11} = 16", True), ("42", "3 * 14 = 42", True), ("-1", "x = -1", True),
])
def test_the_value_after_the_last_equals_sign_decides(verifier, gold, answer, correct):
    """A trained policy found that a stray brace (``16 * 6} = 9``) made math-verify read the computation."""
    verdict = verifier.verify(gold, answer)
    assert (verdict.correct, verdict.source) == (correct, "fast")


@pytest.mark.parametrize(("gold", "answer"), [
    ("126", "2 * 63}{km} = 156 km"), ("130", "5 * 26 km}{km} = 131 km"), ("486", "6 * 81}{km} = 496 km"),
])
def test_the_worker_reads_only_the_value_after_the_last_equals_sign(verifier, gold, answer):
    """Another policy found that ``2 * 63}{km} = 156 km`` had math-verify read ``2 * 63`` (126) and score it."""
    assert not verifier.verify(gold, answer).correct


def test_a_stated_value_with_its_unit_is_right_under_math_verify(verifier):
    if verifier.backend != "math_verify":
        pytest.skip("the sympy fallback reads plain numbers and expressions only, not units")
    assert verifier.verify("216", "3 * 72 km}{km} = 216 km") == Verdict(True, "worker")
    assert verifier.verify("126", "2 * 63 = 126 km") == Verdict(True, "worker")


@pytest.mark.parametrize(("gold", "answer"),
                         [("8", "2^4"), ("2", "\\sqrt{5}"), ("1/2", "\\frac{2}{5}"), ("6", "2 \\cdot 4")])
def test_wrong_forms_that_need_the_worker_are_wrong(verifier, gold, answer):
    assert not verifier.verify(gold, answer).correct


HOSTILE = {
    "tower-boxed": "\\boxed{9^{9^{9^{9}}}}",
    "tower-bare": "9^{9^{9^{9}}}",
    "nested-frac": "\\frac{" * 60 + "1" + "}{2}" * 60,
    "nested-parens": "(" * 300 + "3" + ")" * 300,
    "factorial": "(10^{10})!",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_answers_are_wrong_within_the_timeout_and_the_verifier_still_works(verifier, name):
    start = time.monotonic()
    # A reference that is not a plain number, so the answer goes to the worker (a number's would
    # stop at the computation check).
    verdict = verifier.verify("\\sqrt{3}", HOSTILE[name])
    elapsed = time.monotonic() - start
    assert not verdict.correct and verdict.source in ("worker", "timeout", "error"), verdict
    assert elapsed < TIMEOUT + SLACK, f"{name} took {elapsed:.1f} s"
    assert verifier.verify("2", "\\sqrt{4}").correct


def test_ten_megabyte_answers_are_wrong_at_once():
    verifier = AnswerVerifier(timeout=TIMEOUT)
    start = time.monotonic()
    verdict = verifier.verify("3", "1" * 10_000_000)
    assert (verdict.correct, verdict.source) == (False, "too_long")
    assert time.monotonic() - start < 0.5


def test_ten_megabyte_answers_past_a_raised_cap_still_end_within_the_timeout():
    verifier = AnswerVerifier(timeout=TIMEOUT, max_answer_chars=20_000_000, workers=1)
    verifier.warm_up()
    try:
        start = time.monotonic()
        verdict = verifier.verify("3", "\\frac{1}{" * 1_000_000 + "x")
        assert not verdict.correct, verdict
        assert time.monotonic() - start < TIMEOUT + SLACK + 1.0  # plus writing 10 MB down the pipe
        assert verifier.verify("2", "\\sqrt{4}").correct
    finally:
        verifier.close()


def test_timeouts_hold_off_the_main_thread(pool):
    """math-verify's own SIGALRM timeouts do nothing off the main thread; the worker's do."""
    results: dict[str, object] = {}

    def check(name: str, answer: str) -> None:
        start = time.monotonic()
        results[name] = (pool.verify("3", answer), time.monotonic() - start)

    threads = [threading.Thread(target=check, args=("tower", HOSTILE["tower-boxed"])),
               threading.Thread(target=check, args=("good", "\\sqrt{9}"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    tower, tower_time = results["tower"]
    good, _ = results["good"]
    assert not tower.correct and tower_time < TIMEOUT + SLACK
    assert good.correct


def test_many_threads_share_a_small_worker_pool(pool):
    cases = [("3", "\\sqrt{9}", True), ("3", "\\sqrt{10}", False), ("2", "\\sqrt{4}", True), ("1/2", "0.5", True)] * 2
    with ThreadPoolExecutor(6) as threads:
        verdicts = list(threads.map(lambda case: pool.verify(case[0], case[1]), cases))
    assert [v.correct for v in verdicts] == [case[2] for case in cases]
    assert pool._started <= 2


def test_env_step_with_a_hostile_answer_returns_within_the_timeout(pool):
    env = MathEnv(verifier=pool)
    env.reset(seed=0)
    start = time.monotonic()
    _, reward, terminated, truncated, info = env.step("<answer>9^{9^{9^{9}}}</answer>")
    assert time.monotonic() - start < TIMEOUT + SLACK
    assert (reward, terminated, truncated, info["success"]) == (0.0, True, False, False)


def test_invalid_verifier_options_fail_with_the_expected_values():
    with pytest.raises(InvalidOptionError, match="timeout must be > 0"):
        AnswerVerifier(timeout=0)
    with pytest.raises(InvalidOptionError, match="backend must be"):
        AnswerVerifier(backend="wolfram")  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "value"), [
    ("2 3", None), ("1 000", None), (" 1 / 2 ", "1/2"), ("- 5", "-5"), ("\\frac12", "1/2"), ("\\frac123", None),
    ("1\\,000", "1000"), ("\\boxed{ 7/4 }", "7/4"), ("5.", "5"), ("\\frac{1}{0}", None),
])
def test_fast_path_never_guesses(text, value):
    """Only text that is plainly one number reads as one; anything else goes to the worker."""
    from fractions import Fraction

    assert parse_number(text) == (None if value is None else Fraction(value))
