"""Telling a process caught in ``execve`` (environment not placed yet) from one that has no environment for good."""

from __future__ import annotations

from harness.procs import PF_KTHREAD, compute_environ_pending


def _stat(*, comm: str = "sleep", state: str = "R", flags: int = 0x400000, env_end: int = 140734816284651) -> str:
    tail = ["0"] * 49
    tail[0], tail[6], tail[48] = state, str(flags), str(env_end)
    return f"4242 ({comm}) {' '.join(tail)} 0"


def test_a_process_whose_environment_is_not_placed_yet_is_pending() -> None:
    assert compute_environ_pending(_stat(env_end=0))


def test_a_program_started_with_an_empty_environment_is_not_pending() -> None:
    assert not compute_environ_pending(_stat())


def test_kernel_threads_and_zombies_never_get_one() -> None:
    assert not compute_environ_pending(_stat(comm="kworker/0:1", flags=PF_KTHREAD | 0x40, env_end=0))
    assert not compute_environ_pending(_stat(state="Z", env_end=0))


def test_a_command_name_with_spaces_and_parentheses_is_read_past() -> None:
    assert compute_environ_pending(_stat(comm="a) R 1 (b", env_end=0))


def test_a_kernel_too_old_to_say_is_taken_at_its_word() -> None:
    assert not compute_environ_pending("4242 (sleep) R 1 2 3")
