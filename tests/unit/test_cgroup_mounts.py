"""Which cgroup mounts ``fakedev cluster serve`` remounts writable inside a container (pure: mountinfo text in)."""

from __future__ import annotations

from harness.runtime.cgroupmounts import read_only_cgroup_mounts

# /proc/self/mountinfo of a Docker 20.10 container on cgroup v1 (trimmed), then a host's writable cgroup mount.
MOUNTINFO = """\
234 221 0:82 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,mode=755
235 234 0:29 /fakedev-docker-4edc703b/6431 /sys/fs/cgroup/cpu ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,cpu
239 234 0:33 /fakedev-docker-4e/6431 /sys/fs/cgroup/memory ro,nosuid,noexec,relatime master:9 - cgroup cgroup rw,memory
240 221 0:60 / /proc/sys ro,nosuid,nodev,noexec,relatime - proc proc rw
33 25 0:29 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,pids
"""


def test_only_read_only_cgroup_mounts_are_chosen_with_their_flags_kept() -> None:
    nosuid, nodev, noexec = 2, 4, 8
    assert read_only_cgroup_mounts(MOUNTINFO) == [
        ("/sys/fs/cgroup/cpu", nosuid | nodev | noexec),
        ("/sys/fs/cgroup/memory", nosuid | noexec),
    ]
