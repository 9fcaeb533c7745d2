"""Errors raised by the fake driver.

FakedevError
├── ProfileError          a node profile is invalid (names the file, the field and the rule)
├── RenderError           the model cannot be rendered within the API's limits
├── ClaimError            a claim cannot be prepared (reported per claim, never as an RPC failure)
├── CheckpointError       the checkpoint is corrupt or from an unknown version (the plugin refuses to start)
├── KubeApiError          the API server refused or could not be reached
│   └── RetryableKubeError  a later attempt may succeed (conflict, unavailable)
├── BenchError            a benchmark cannot take or read a measurement
├── CrashPointError       FAKEDEV_CRASH_AT names no crash point (the torture tool's hidden switch)
├── TortureError          the torture run cannot go on (a call the driver must answer failed, a wait ran out)
│   └── ViolationFoundError   the run found a broken invariant and stops there (reported, not raised to the user)
├── DeviceFaultError      a DeviceFault object breaks a rule (names the object, the field and the rule)
└── ControlError          a control-socket exchange went wrong (also: an answer that is not a reply)
    ├── ControlRequestError      a request breaks the protocol (the plugin answers it with ok: false)
    ├── ControlRefusedError      the plugin understood the request and refused it (e.g. an unknown device)
    └── ControlUnreachableError  no answer: the socket is missing, refuses connections, times out or hangs up
"""

from __future__ import annotations


class FakedevError(Exception):
    """Base of every error the fake driver raises on purpose."""


class ProfileError(FakedevError):
    """A node profile or catalogue entry breaks a rule."""


class RenderError(FakedevError):
    """The device model cannot be rendered into valid ResourceSlices."""


class ClaimError(FakedevError):
    """A claim cannot be prepared or unprepared; the message goes into that claim's response."""


class CheckpointError(FakedevError):
    """The plugin's checkpoint cannot be trusted."""


class KubeApiError(FakedevError):
    """The API server answered with an error (``status`` 0 when unreachable)."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class RetryableKubeError(KubeApiError):
    """Conflict or unavailability: try again later."""


class BenchError(FakedevError):
    """A benchmark cannot take or read a measurement (a profile the API server refused, no Go toolchain)."""


class CrashPointError(FakedevError):
    """``FAKEDEV_CRASH_AT`` is malformed; the message lists the crash points."""


class TortureError(FakedevError):
    """``fakedev torture`` cannot go on: the plugin misbehaved outside what it checks, or a wait ran out."""


class ViolationFoundError(TortureError):
    """Unwinds a torture run at its first violation; the run reports it with the seed."""


class DeviceFaultError(FakedevError):
    """A DeviceFault object (or the options that would make one) breaks a rule; one line naming the field."""


class ControlError(FakedevError):
    """Talking to a plugin's control socket failed; the subclasses say how."""


class ControlRequestError(ControlError):
    """A control request breaks the protocol; the message is one line naming the field and the rule."""


class ControlRefusedError(ControlError):
    """The plugin answered ``ok: false``; ``reason`` is its own words, ``op`` the request it refused."""

    def __init__(self, *, op: str, reason: str) -> None:
        super().__init__(f"the plugin refused {op}: {reason}")
        self.op = op
        self.reason = reason


class ControlUnreachableError(ControlError):
    """The control socket gave no answer (absent, connection refused, timed out, closed early)."""
