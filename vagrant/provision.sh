#!/usr/bin/env bash
# Provision a Debian 12 machine to run fakedev from a checkout (the Vagrant VM's /vagrant), as root, unattended.
#
#   provision.sh           everything: the packages this script needs, Go, the venv, then the repository's own
#                          `make deps build` (tens of minutes cold) and the VM's services (control plane, one
#                          emulated node, the API server's port on the VM's network)
#   provision.sh --quick   only the steps CI checks in a container (a few minutes): packages, Go, the venv,
#                          `fakedev --help`; stops before `make deps build` and the services
#
# Environment: FAKEDEV_REPO (default /vagrant), FAKEDEV_VM_VENV (default /opt/fakedev/venv),
# FAKEDEV_VM_HOST_API_PORT (the host's end of the forwarded port, for the kubeconfig; default 6443),
# FAKEDEV_VM_PROFILE (the emulated node's profile; default seed-example), GOPROXY (first entry is used; default
# https://proxy.golang.org).
set -euo pipefail

REPO=${FAKEDEV_REPO:-/vagrant}
VENV=${FAKEDEV_VM_VENV:-/opt/fakedev/venv}
HOST_API_PORT=${FAKEDEV_VM_HOST_API_PORT:-6443}
PROFILE=${FAKEDEV_VM_PROFILE:-seed-example}
# The Go toolchain download is kept here, so a re-provision (or CI's next check, which mounts it) does not fetch it
# again; it is verified on every use.
DOWNLOADS=/var/cache/fakedev-provision
# Packages a bare Debian 12 box may lack for what follows: git and make run the repository's Makefile, python3-venv
# makes its venv, curl + ca-certificates + unzip fetch and unpack Go, socat carries the API server's port to the
# VM's network interface (kube-apiserver listens on 127.0.0.1 only).
PACKAGES=(git make python3 python3-venv curl ca-certificates unzip socat)
# The SHA-256 of each Go toolchain zip (the module golang.org/toolchain on the Go module proxy) this script accepts,
# per version and Debian architecture. Taken from zips `go mod download golang.org/toolchain@v0.0.1-go<V>.linux-<A>`
# fetched and verified against the Go checksum database (sum.golang.org: 1.26.8 amd64
# h1:ZOmGe1OnfREDMIdb1Qi4G9JSuDPBLGExZMQ4nis1RXM=, arm64 h1:sYL/O6MqS68ML0kjsQ36WoYIpJqkw60TxizWUYUKQMc=); a Go bump
# in scripts/install-system-deps.sh adds its two lines here the same way (a test checks they are there).
GO_ZIP_SHA256=(
  "1.26.8 amd64 30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7"
  "1.26.8 arm64 02b36b6787b3ac767668f630e2998df45a3b1f9ffee08d1bf3ef6487cd658d99"
)
# What the root filesystem needs free for `make deps build`: about 11 GB measured on a CI machine after many builds
# (Go modules 2.0, Go build cache 6.0, ~/.cache/fakedev 1.0, venv 0.44, `make deps`' packages about 1.2), plus room.
NEED_FREE_GIB=12

quick=false
case "${1:-}" in
  "") ;;
  --quick) quick=true ;;
  *) echo "usage: $0 [--quick]" >&2; exit 2 ;;
esac

say() { echo "provision: $*"; }
die() { echo "provision: error: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (Vagrant's shell provisioner does)"
[ -f "$REPO/Makefile" ] || die "no fakedev checkout at $REPO (FAKEDEV_REPO)"
export DEBIAN_FRONTEND=noninteractive
# The caches `make build` fills (~/.cache/fakedev, Go's) must be the ones `sudo -i make run` finds later, whatever
# HOME the provisioner's sudo passed on.
export HOME=/root

install_packages() {
  local missing=() pkg
  for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    say "apt-get install ${missing[*]}"
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
  say "packages: ${PACKAGES[*]} installed"
}

version_at_least() {  # version_at_least HAVE MIN
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1)" = "$2" ]
}

go_sha256() {  # go_sha256 VERSION ARCH
  local row version arch sha
  for row in "${GO_ZIP_SHA256[@]}"; do
    read -r version arch sha <<<"$row"
    if [ "$version" = "$1" ] && [ "$arch" = "$2" ]; then echo "$sha"; return; fi
  done
}

install_go() {
  # The repository's own minimum: the single place it is written down.
  local go_min arch module zip sha dest tmp
  go_min=$(sed -n 's/^go_min=\([0-9][0-9.]*\)$/\1/p' "$REPO/scripts/install-system-deps.sh")
  [ -n "$go_min" ] || die "no go_min= line in $REPO/scripts/install-system-deps.sh"
  if command -v go >/dev/null && version_at_least "$(go env GOVERSION | sed -E 's/^go([0-9.]+).*/\1/')" "$go_min"; then
    say "go: $(go version) (>= $go_min, kept)"
    return
  fi
  arch=$(dpkg --print-architecture)
  case "$arch" in
    amd64 | arm64) ;;
    *) die "no Go toolchain is set up for Debian architecture $arch (amd64 and arm64 are)" ;;
  esac
  sha=$(go_sha256 "$go_min" "$arch")
  [ -n "$sha" ] || die "no SHA-256 for the Go $go_min $arch toolchain in GO_ZIP_SHA256 of $0"
  # go.dev's download site is not needed: the Go module proxy serves every release as the module
  # golang.org/toolchain (what `go` itself fetches for GOTOOLCHAIN), one zip per platform.
  module="v0.0.1-go${go_min}.linux-${arch}"
  zip="$DOWNLOADS/golang-toolchain-${module}.zip"
  mkdir -p "$DOWNLOADS"
  if ! echo "$sha  $zip" | sha256sum --check --status 2>/dev/null; then
    local proxy=${GOPROXY:-https://proxy.golang.org}
    proxy=${proxy%%[,|]*}
    case "$proxy" in direct | off | "") proxy=https://proxy.golang.org ;; esac
    say "go: fetching $proxy/golang.org/toolchain/@v/${module}.zip"
    curl --fail --silent --show-error --location --retry 3 -o "$zip.partial" \
      "$proxy/golang.org/toolchain/@v/${module}.zip"
    mv "$zip.partial" "$zip"
    echo "$sha  $zip" | sha256sum --check --quiet || die "the Go toolchain zip's SHA-256 is not $sha"
  fi
  dest=/usr/local/lib/go${go_min}
  tmp=$(mktemp -d /usr/local/lib/.go-unpack.XXXXXX)
  unzip -q "$zip" -d "$tmp"
  rm -rf "$dest"
  mv "$tmp/golang.org/toolchain@${module}" "$dest"
  rm -rf "$tmp"
  ln -sfn "$dest/bin/go" /usr/local/bin/go
  ln -sfn "$dest/bin/gofmt" /usr/local/bin/gofmt
  say "go: $(/usr/local/bin/go version) in $dest"
}

make_venv() {
  # The checkout is synced from the host and owned by another user; git (the image build's identity) refuses such
  # a repository unless told it is safe.
  git config --system --get-all safe.directory 2>/dev/null | grep -qxF "$REPO" ||
    git config --system --add safe.directory "$REPO"
  # The venv lives outside the synced folder: the host's own .venv (macOS, Windows) stays untouched, and pip does
  # not write thousands of files through a shared folder.
  mkdir -p "$(dirname "$VENV")"
  make -C "$REPO" venv VENV="$VENV"
  cat >/etc/profile.d/fakedev.sh <<EOF
# fakedev (vagrant/provision.sh): the Makefile's venv and the CLI on PATH for login shells (\`sudo -i\`).
export VENV=$VENV
export PATH=$VENV/bin:/usr/local/bin:\$PATH
EOF
  say "venv: $VENV"
}

check_cli() {
  "$VENV/bin/fakedev" --help
  say "fakedev --help: exit 0"
}

check_space() {
  local free_gib
  free_gib=$(df --output=avail -BG /root | tail -1 | tr -dc '0-9')
  [ "$free_gib" -ge "$NEED_FREE_GIB" ] ||
    die "only ${free_gib} GiB free on the root filesystem; \`make deps build\` needs about $NEED_FREE_GIB GiB"
}

install_services() {
  cat >/etc/default/fakedev-vm <<EOF
# Written by vagrant/provision.sh; read by /usr/local/sbin/fakedev-vm and the fakedev-*.service units.
FAKEDEV_VM_VENV=$VENV
FAKEDEV_VM_HOST_API_PORT=$HOST_API_PORT
FAKEDEV_VM_PROFILE=$PROFILE
EOF
  install -m 0755 "$REPO/vagrant/guest/fakedev-vm" /usr/local/sbin/fakedev-vm
  install -m 0644 "$REPO"/vagrant/guest/fakedev-*.service /etc/systemd/system/
  systemctl daemon-reload
  # Not enabled at boot: the synced folder the venv's editable install points into is only there once Vagrant
  # has synced it; the Vagrantfile's trigger starts them after every `vagrant up`/`reload`.
  systemctl restart fakedev-cluster.service
  systemctl restart fakedev-node.service fakedev-apiserver.service
  say "services: fakedev-cluster, fakedev-node ($PROFILE), fakedev-apiserver (guest port 6443)"
}

say "fakedev checkout $REPO, Debian $(cat /etc/debian_version) $(dpkg --print-architecture)"
install_packages
install_go
make_venv
check_cli
if $quick; then
  say "quick: done (stopping before make deps build and the services)"
  exit 0
fi
check_space
# The repository's own targets, as on any machine: Debian packages, then the control plane, node and helm builds.
make -C "$REPO" deps build VENV="$VENV"
install_services
say "done"
