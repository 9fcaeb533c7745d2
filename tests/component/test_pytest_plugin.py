"""The fakedev pytest plugin: options, markers and the conformance parametrization (pytester)."""

from __future__ import annotations

import pytest


def test_options_are_in_the_fakedev_group(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*fakedev DRA harness*", "*--fakedev-keep-cluster*", "*--dra-driver*"])


def test_markers_are_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.cluster:*", "@pytest.mark.privileged:*", "@pytest.mark.slow:*"])


def test_conformance_checks_become_parametrized_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_check(conformance_check):\n    assert conformance_check.clause\n")
    result = pytester.runpytest("-q")
    result.assert_outcomes(passed=20)
    ids = pytester.runpytest("--collect-only", "-q").stdout.str()
    assert "test_check[registration.handshake]" in ids and "test_check[pod.end-to-end]" in ids


def test_without_a_driver_the_fixture_says_what_to_pass(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_driver(dra_driver):\n    pass\n")
    result = pytester.runpytest("-q")
    result.stdout.fnmatch_lines(["*no DRA driver to test: pass --dra-driver*"])
