#!/usr/bin/env bash
# Set up a fresh Debian 12 machine (as root) for building, demoing and testing sylvite.
# Idempotent and non-interactive.
#   scripts/setup.sh [BUILD_DIR]          everything: the packages to build and run
#                                         sylvite, the test-only packages, real Salt
#                                         (interop peer, benchmark baseline) in
#                                         virtualenvs and the Python test tools
#   scripts/setup.sh --demo [BUILD_DIR]   only what README command 1 (scripts/demo.sh)
#                                         needs: build tools, the libraries, Debian's
#                                         Python + Jinja2 for the render worker, HAProxy
# BUILD_DIR defaults to ./build.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
mode=full
if [[ "${1:-}" == --demo ]]; then mode=demo; shift; fi
build=${1:-$here/build}
SALT_VERSION=${SALT_VERSION:-3008.5}

# To build and run sylvite (the daemons, the CLIs, sylvite-render) and the demo.
packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libboost1.81-dev libssl-dev nlohmann-json3-dev libyaml-cpp-dev
  libcli11-dev libspdlog-dev libfmt-dev
  libzmq3-dev cppzmq-dev libpam0g-dev libpq-dev
  python3 libpython3-dev python3-jinja2 python3-markupsafe python3-yaml python3-jmespath python3-dateutil gnupg
  haproxy procps
)
# Only for the tests, the fuzzers and the benchmarks.
if [[ $mode == full ]]; then
  packages+=(
    libgtest-dev libgmock-dev clang libclang-rt-14-dev
    python3-venv python3-dev python3-pyflakes
    iproute2 iptables psmisc
    glusterfs-server glusterfs-client
    chromium chromium-driver
    postgresql openssl
  )
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${#missing[@]} Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "setup: Debian packages installed"
else
  echo "setup: Debian packages already installed (${#packages[@]})"
fi
if [[ $mode == demo ]]; then
  echo "setup: ok (demo: no Salt virtualenvs, no test tools; scripts/setup.sh adds them)"
  exit 0
fi

# Real Salt in virtualenvs, cached outside the checkout (SYLVITE_CACHE, default
# /var/cache/sylvite) and linked as BUILD_DIR/venv and BUILD_DIR/venv-3007: a fresh clone
# (CI) reuses them instead of spending ~20 minutes installing Salt twice. A venv is
# (re)installed only when its Salt version is not the one asked for.
cache=${SYLVITE_CACHE:-/var/cache/sylvite}
mkdir -p "$build" "$cache"
salt_venv() {  # salt_venv LINK VERSION
  local link=$1 version=$2 target
  target="$cache/salt-$version-$(python3 -c 'import sys; print("py%d.%d" % sys.version_info[:2])')"
  if [[ -d "$link" && ! -L "$link" ]] && "$link/bin/salt-call" --version 2>/dev/null | grep -q "^salt-call $version"; then
    return 0  # an older checkout's venv in place: keep it
  fi
  if ! "$target/bin/salt-call" --version 2>/dev/null | grep -q "^salt-call $version"; then
    echo "setup: installing Salt $version into $target (a few minutes the first time)"
    rm -rf "$target"
    python3 "$here/scripts/install-salt.py" "$target" "$version"
  fi
  rm -rf "$link"
  ln -s "$target" "$link"
}
salt_venv "$build/venv" "$SALT_VERSION"
venv="$build/venv"
# Salt 3007.3: the last release on request protocol v2 (interop tests of minimum_auth_version).
SALT_V2_VERSION=${SALT_V2_VERSION:-3007.3}
salt_venv "$build/venv-3007" "$SALT_V2_VERSION"

# Test tools in the same venv (cheap when already there).
# salt-pepper, selenium and CherryPy (real salt-api) for the REST API and console tests;
# psycopg2 for real Salt's pgjsonb returner and the PostgreSQL job cache tests;
# websocket-client for the REST API's /ws tests.
# pip runs through the venv's real path: the scripts it writes (bin/pepper) name their
# interpreter by the path pip was started with, and a clone's BUILD_DIR/venv link goes
# away with the clone (CI), while the venv is shared by every later clone.
real_venv=$(readlink -f "$venv")
tools=(pytest pytest-xdist pytest-timeout msgpack cryptography pyzmq salt-pepper selenium cherrypy psycopg2-binary
       websocket-client)
if ! "$real_venv/bin/python" -c "import pytest, xdist, pytest_timeout, msgpack, cryptography, zmq, pepper, selenium, cherrypy, psycopg2, websocket" 2>/dev/null; then
  "$real_venv/bin/python" -m pip install -q --disable-pip-version-check "${tools[@]}"
fi
# Scripts an earlier setup wrote through a link that may be gone (bin/pepper naming
# /var/tmp/<clone>/build/venv/bin/python): pointed at the venv's own interpreter.
for script in "$real_venv"/bin/*; do
  [[ -f "$script" && ! -L "$script" ]] || continue
  first=$(head -c 300 "$script" | head -n 1)
  if [[ "$first" == "#!"*/bin/python* && "$first" != "#!$real_venv/bin/python" ]]; then
    echo "setup: $script named ${first#??} as its interpreter; now $real_venv/bin/python"
    sed -i "1s|.*|#!$real_venv/bin/python|" "$script"
  fi
done
echo "setup: ok ($("$venv/bin/salt-call" --version))"
