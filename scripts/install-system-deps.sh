#!/usr/bin/env bash
# Install the Debian packages fakedev needs on a fresh machine; a no-op when they are already there.
set -euo pipefail
need=()
command -v runc >/dev/null || need+=(runc)
[ -x /bin/busybox ] || command -v busybox >/dev/null || need+=(busybox-static)
command -v ip >/dev/null || need+=(iproute2)
command -v setpriv >/dev/null || need+=(util-linux)
command -v nsenter >/dev/null || need+=(util-linux)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
# runc is built with cgo (its nsenter is C): a C compiler and the libc and kernel headers (linux-libc-dev comes with
# libc6-dev), and with seccomp (containerd gives every sandbox the RuntimeDefault profile): libseccomp-dev found
# through pkg-config. The real node's pod network: portmap (hostPort) runs iptables.
command -v gcc >/dev/null || need+=(gcc)
dpkg-query -W -f='${Status}' libc6-dev 2>/dev/null | grep -q 'ok installed' || need+=(libc6-dev)
dpkg-query -W -f='${Status}' libseccomp-dev 2>/dev/null | grep -q 'ok installed' || need+=(libseccomp-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v iptables >/dev/null || need+=(iptables)
# The drill report test takes one screenshot of the HTML report with headless Chromium.
command -v chromium >/dev/null || need+=(chromium)
# `make image`: mmdebstrap makes the Debian rootfs, umoci assembles the OCI image; the image tests read it with
# skopeo and load it into podman and a private dockerd (docker.io's /usr/bin/docker client sits behind any newer
# /usr/local/bin/docker on PATH, which keeps working).
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v umoci >/dev/null || need+=(umoci)
command -v skopeo >/dev/null || need+=(skopeo)
command -v podman >/dev/null || need+=(podman)
command -v dockerd >/dev/null || need+=(docker.io)
# The laptop VM (vagrant/): its tests run `vagrant validate` on the Vagrantfile (no VM is started here; Debian's
# libvirt plugin lets it check the libvirt block too) and the VM's API server forward (socat) against a local
# control plane.
command -v vagrant >/dev/null || need+=(vagrant)
dpkg-query -W -f='${Status}' vagrant-libvirt 2>/dev/null | grep -q 'ok installed' || need+=(vagrant-libvirt)
command -v socat >/dev/null || need+=(socat)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${need[@]}"
fi
# The image's Debian layer is resolved from this machine's package indices: a fresh machine may have none yet.
if ! compgen -G "/var/lib/apt/lists/*_InRelease" >/dev/null; then
  echo "no Debian package indices yet: apt-get update"
  [ "$(id -u)" -eq 0 ] && apt-get update -q || sudo apt-get update -q
fi
# The CNI plugins v1.10.0 declare go 1.26.8 and builds run with GOTOOLCHAIN=local (no toolchain download).
go_min=1.26.8
if ! command -v go >/dev/null; then
  echo "error: Go >= $go_min is required to build the control plane (https://go.dev/dl/)" >&2
  exit 1
fi
go_have=$(go env GOVERSION | sed -E 's/^go([0-9.]+).*/\1/')
if [ "$(printf '%s\n%s\n' "$go_min" "$go_have" | sort -V | head -1)" != "$go_min" ]; then
  echo "error: Go >= $go_min is required, found $(go env GOVERSION)" >&2
  exit 1
fi
