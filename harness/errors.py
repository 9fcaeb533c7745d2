"""Errors raised by the harness.

HarnessError
├── RetryableError              a later attempt may succeed (a component not ready yet, a conflict)
│   ├── NotReadyError           a readiness wait ran out of time
│   ├── HostBusyError           a host-wide resource (the kubepods cgroup of a real node) is held by another run
│   ├── HandshakeError          a plugin registration attempt failed; the plugin watcher starts over next round
│   ├── DraCallError            a DRA or health gRPC call itself failed (``code`` says how); the kubelet retries
│   └── PrepareError            a pod's claims cannot be prepared yet; its worker retries with back-off
└── PermanentError              retrying cannot help; the message says what to fix
    ├── BuildError              a control-plane binary could not be built
    ├── ImageError              the fakedev OCI image could not be built (a tool failed, a stale lock, no indices)
    ├── ComponentError          a control-plane component exited or failed to start
    ├── ContainerStartError     an emulated node could not create a pod's container (CDI injection, runc); the
    │                           message names the CDI device ID, its spec file and the runtime's words
    ├── RegistryError           the real node's image registry cannot serve an archive (not an OCI layout, a
    │                           compressed tar, a missing blob) or refused an image added to it
    ├── ClusterStateError       no cluster / a broken cluster state directory
    ├── DockerError             the private dockerd (harness.docker) cannot be used
    │   ├── DockerMissingError  no dockerd binary: `make deps` installs Debian's docker.io
    │   ├── DockerUnsupportedError  the kernel or sandbox refuses what the daemon needs (a bridge); tests skip
    │   ├── DockerStartError    dockerd exited or never answered; the message carries its last log lines
    │   └── DockerApiError      an Engine API call the harness makes answered an error
    ├── CheckpointCorruptError  the node emulator's DRA checkpoint is unreadable; the node refuses to start
    ├── ScenarioError           a drill scenario file breaks the format (``file:line: field: rule``)
    ├── LauncherError           virt-launcher would refuse the VM's device (``rule`` names which rule)
    └── VerifyError             ``kubevirt verify`` cannot read its inputs at all (not a rule violation)
        └── NodeFilesError      the node's files cannot be read through the pod chosen for it (no such pod, exec
                                refused or timed out); the message names the pod, the node and what to check

Not errors: the verdicts :class:`harness.conformance.verdicts.CheckFailed`, ``CheckSkipped`` and ``CheckError`` (a
driver broke a contract clause / cannot give what a check needs / the harness or environment broke, as a verdict
with its sentence) and :class:`harness.drills.runner.StepFailed` (a drill step's condition did not hold) and
``StepBlocked`` (the cluster cannot do a drill step's fault) report on the system under test; they stay next to the
code that decides them.

API errors (``ApiError`` and its retryable children) live in :mod:`kubeclient.errors`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc


class HarnessError(Exception):
    """Base of every error the harness raises on purpose."""


class RetryableError(HarnessError):
    """The operation may succeed if tried again later."""


class PermanentError(HarnessError):
    """Retrying cannot help."""


class NotReadyError(RetryableError):
    """A wait for readiness ran out of time."""


class HostBusyError(RetryableError):
    """A host-wide resource (e.g. the kubepods cgroup a real node uses) is held by another run."""


class HandshakeError(RetryableError):
    """A registration attempt failed; ``notified`` says whether the plugin was told why.

    Retryable because the kubelet's answer to any failed attempt is to try again from scratch later: most causes
    (a socket not serving yet, a slow GetInfo) go away, and a refused plugin is told why so it can be replaced.
    """

    def __init__(self, message: str, *, notified: bool) -> None:
        super().__init__(message)
        self.notified = notified


class DraCallError(RetryableError):
    """The gRPC call itself failed (as opposed to a per-claim error in its answer).

    Retryable because the kubelet repeats a failed call (a driver restarting, a deadline); ``code`` tells a caller
    that needs to distinguish, e.g. ``UNIMPLEMENTED``.
    """

    def __init__(self, message: str, *, code: grpc.StatusCode | None) -> None:
        super().__init__(message)
        self.code = code


class PrepareError(RetryableError):
    """The pod cannot start yet; the message is what the kubelet would put in a FailedPrepareDynamicResources event."""


class BuildError(PermanentError):
    """Building a binary from the Go module proxy failed."""


class ImageError(PermanentError):
    """Building the fakedev OCI image failed; the message names the step and what to do."""


class ComponentError(PermanentError):
    """A control-plane component failed to start or exited."""


class ContainerStartError(PermanentError):
    """A pod's container could not be created; the message is what the pod's ``waiting.message`` shows."""


class RegistryError(PermanentError):
    """The real node's local registry cannot serve an image archive, or refused one; the message says which."""


class ClusterStateError(PermanentError):
    """The cluster state directory is missing or not usable."""


class DockerError(PermanentError):
    """The private Docker daemon cannot be used."""


class DockerMissingError(DockerError):
    """dockerd is not installed."""


class DockerUnsupportedError(DockerError):
    """The kernel or sandbox refuses what the daemon needs; the only reason a docker test may skip."""


class DockerStartError(DockerError):
    """dockerd exited or never answered; the message carries its last log lines."""


class DockerApiError(DockerError):
    """An Engine API call answered an error status."""


class CheckpointCorruptError(PermanentError):
    """The emulator's DRA checkpoint failed its checksum (or cannot be read); a restart reads the same file."""


class ScenarioError(PermanentError):
    """A scenario file breaks the format; the message names the file, line and field."""


class LauncherError(PermanentError):
    """virt-launcher would refuse to start the VM; ``rule`` names which rule."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule


class VerifyError(PermanentError):
    """The inputs cannot be read at all (no launcher pod, unreadable checkpoint); not a rule violation."""


class NodeFilesError(VerifyError):
    """The node's files cannot be read through the pod chosen for it; the message says what to check."""
