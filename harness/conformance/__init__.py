"""Conformance subjects: DRA drivers we did not write, built and run so the suite can test them like ours."""
