"""``wait_for``: a predicate that raises means "not yet", and a timeout reports the last exception it raised."""

from __future__ import annotations

import pytest

from harness.errors import NotReadyError
from harness.procs import wait_for


def test_timeout_names_and_chains_the_last_exception_the_check_raised() -> None:
    raised: list[Exception] = []

    def check() -> bool:
        raised.append(FileNotFoundError(f"no socket yet (attempt {len(raised) + 1})"))
        raise raised[-1]

    with pytest.raises(NotReadyError) as caught:
        wait_for(check, timeout=0.2, interval=0.01, what="the socket")

    assert len(raised) > 1
    assert caught.value.__cause__ is raised[-1]
    assert str(caught.value) == (
        f"timed out after 0s waiting for the socket (the check last raised FileNotFoundError: {raised[-1]})"
    )


def test_a_check_that_raised_before_it_held_is_a_success() -> None:
    answers: list[bool | Exception] = [ConnectionRefusedError("not listening"), False, True]

    def check() -> bool:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    wait_for(check, timeout=10, interval=0.01, what="the server")

    assert answers == []


def test_timeout_of_a_check_that_never_raised_has_no_cause() -> None:
    with pytest.raises(NotReadyError) as caught:
        wait_for(lambda: False, timeout=0.05, interval=0.01, what="nothing")

    assert str(caught.value) == "timed out after 0s waiting for nothing"
    assert caught.value.__cause__ is None
