#!/usr/bin/env bash
# Set up a fresh Debian 12 machine (as root) for building, demoing and testing sylvite.
# Idempotent and non-interactive. Installs the Debian packages, then real Salt (the
# interop peer and benchmark baseline) into virtualenvs under the build folder.
#   scripts/setup.sh [BUILD_DIR]        (default: ./build)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
SALT_VERSION=${SALT_VERSION:-3008.5}

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libboost1.81-dev libssl-dev nlohmann-json3-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev libcli11-dev libspdlog-dev libfmt-dev
  clang libclang-rt-14-dev
  python3 python3-venv python3-dev
  iproute2 iptables procps psmisc
  glusterfs-server glusterfs-client
  haproxy
  libzmq3-dev cppzmq-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Real Salt in a venv (cached: reinstalled only when the version changes).
mkdir -p "$build"
venv="$build/venv"
if ! "$venv/bin/salt-call" --version 2>/dev/null | grep -q "^salt-call $SALT_VERSION"; then
  echo "setup: installing Salt $SALT_VERSION into $venv (a few minutes the first time)"
  rm -rf "$venv"
  python3 "$here/scripts/install-salt.py" "$venv" "$SALT_VERSION"
fi
# Salt 3007.3: the last release on request protocol v2 (interop tests of minimum_auth_version).
SALT_V2_VERSION=${SALT_V2_VERSION:-3007.3}
venv2="$build/venv-3007"
if ! "$venv2/bin/salt-call" --version 2>/dev/null | grep -q "^salt-call $SALT_V2_VERSION"; then
  echo "setup: installing Salt $SALT_V2_VERSION into $venv2"
  rm -rf "$venv2"
  python3 "$here/scripts/install-salt.py" "$venv2" "$SALT_V2_VERSION"
fi

# Test tools in the same venv (cheap when already there).
if ! "$venv/bin/python" -c "import pytest, xdist, pytest_timeout, msgpack, cryptography" 2>/dev/null; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check pytest pytest-xdist pytest-timeout msgpack cryptography
fi
echo "setup: ok ($("$venv/bin/salt-call" --version))"
