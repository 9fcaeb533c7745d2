"""Which file system holds a path, from mountinfo text (pure): what tells a volatile CDI directory from a disk."""

from __future__ import annotations

from fakedev.driver.fsutil import compute_fs_type

MOUNTINFO = "\n".join(
    [
        "27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw",
        "25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw",
        "40 27 0:40 / /run rw,nosuid shared:5 master:2 - tmpfs tmpfs rw",
        "41 40 0:41 / /run/with\\040space rw - ramfs none rw",
        "42 27 254:1 / /var/lib/kubelet rw - xfs /dev/vdb rw",
    ]
)


def test_the_longest_mount_point_holding_the_path_decides() -> None:
    assert compute_fs_type(MOUNTINFO, path="/var/run/cdi") == "ext4"  # /var/run is not /run
    assert compute_fs_type(MOUNTINFO, path="/run/cdi/spec.json") == "tmpfs"
    assert compute_fs_type(MOUNTINFO, path="/run") == "tmpfs"
    assert compute_fs_type(MOUNTINFO, path="/runner/x") == "ext4"  # a name that only starts like a mount point
    assert compute_fs_type(MOUNTINFO, path="/var/lib/kubelet/plugins/x") == "xfs"
    assert compute_fs_type(MOUNTINFO, path="/run/with space/cdi") == "ramfs"  # mountinfo's octal escapes


def test_no_mount_at_all_is_an_unknown_type() -> None:
    assert compute_fs_type("", path="/x") == ""
    assert compute_fs_type("garbage line\n", path="/x") == ""
