#!/usr/bin/env bash
# README command 1: set up, build, then run a local sylvite master cluster: three
# masters on 127.0.0.1 sharing one directory (cluster_pki_dir, cachedir, file_roots,
# pillar_roots: the embedded stand-in for GlusterFS), a real HAProxy in front of them
# (publish and request frontends), three sylvite minions that know only HAProxy's
# address; accept their keys with `salt-key -A -y` on one master and run
# `salt '*' test.ping` from each master: every minion answers every master.
# Everything lives in a temp dir that is removed at the end (DEMO_KEEP=1 keeps it and
# leaves the daemons running, printing how to stop them).
# Installs and builds only what the demo needs (scripts/setup.sh --demo: no Salt
# virtualenvs, no test-only packages; the daemons and CLIs only, no unit tests);
# scripts/test.sh (README command 2) adds the rest.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
t0=$(date +%s)
step() { echo "demo [$1/4] $2 ($(( $(date +%s) - t0 )) s)"; }
step 1 "Debian packages: scripts/setup.sh --demo"
bash "$here/scripts/setup.sh" --demo "$here/build"
step 2 "build the daemons and CLIs into build/bin"
export CCACHE_BASEDIR="$here" CCACHE_NOHASHDIR=1
if [[ -f "$here/build/CMakeCache.txt" ]]; then
  cmake -S "$here" -B "$here/build" >/dev/null   # keep the folder's settings (tests on or off)
else
  cmake -S "$here" -B "$here/build" -G Ninja -DSYLVITE_WERROR=ON -DSYLVITE_TESTS=OFF >/dev/null
fi
ninja -C "$here/build" -j"$(nproc)" salt-master salt-minion salt salt-key salt-run salt-call sylvite-render sylvite-publisher
bin="$here/build/bin"
step 3 "start three masters, HAProxy and three minions"

demo=$(mktemp -d /tmp/sylvite-demo.XXXXXX)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
cleanup() {
  if [[ "${DEMO_KEEP:-0}" == 1 ]]; then
    echo "demo left running in $demo; stop with: kill ${pids[*]}"
    return
  fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$demo"
}
trap cleanup EXIT

shared="$demo/shared"
mkdir -p "$shared/pki" "$shared/cache" "$shared/srv/salt" "$shared/srv/pillar"
chmod 0700 "$shared/pki" "$shared/cache"
declare -A ret pub pool
for m in 1 2 3; do ret[$m]=$(free_port); pub[$m]=$(free_port); pool[$m]=$(free_port); done
lb_ret=$(free_port); lb_pub=$(free_port)

for m in 1 2 3; do
  peers=()
  for o in 1 2 3; do [[ $o == "$m" ]] || peers+=("127.0.0.1:${pool[$o]}"); done
  mkdir -p "$demo/master$m/conf"
  cat > "$demo/master$m/conf/master" <<CONF
id: master$m
interface: 127.0.0.1
ret_port: ${ret[$m]}
publish_port: ${pub[$m]}
pki_dir: $demo/master$m/pki
sock_dir: $demo/master$m/sock
log_file: $demo/master$m/master.log
cluster_id: demo
cluster_peers: [${peers[0]}, ${peers[1]}]
cluster_pool_port: ${pool[$m]}
cluster_pki_dir: $shared/pki
cachedir: $shared/cache
file_roots: {base: [$shared/srv/salt]}
pillar_roots: {base: [$shared/srv/pillar]}
CONF
  "$bin/salt-master" -c "$demo/master$m/conf" -l info >"$demo/master$m.out" 2>&1 &
  pids+=($!)
done

cat > "$demo/haproxy.cfg" <<CONF
global
    stats socket $demo/haproxy.sock mode 600 level admin
    maxconn 9000
defaults
    mode tcp
    timeout connect 3s
    retries 2
    option redispatch
    default-server inter 500ms fall 2 rise 2 on-marked-down shutdown-sessions
frontend salt_publish
    bind 127.0.0.1:$lb_pub
    timeout client 86400s
    default_backend salt_publish
backend salt_publish
    balance leastconn
    timeout server 86400s
    server master1 127.0.0.1:${pub[1]} check
    server master2 127.0.0.1:${pub[2]} check
    server master3 127.0.0.1:${pub[3]} check
frontend salt_request
    bind 127.0.0.1:$lb_ret
    timeout client 60s
    default_backend salt_request
backend salt_request
    balance roundrobin
    timeout server 60s
    server master1 127.0.0.1:${ret[1]} check
    server master2 127.0.0.1:${ret[2]} check
    server master3 127.0.0.1:${ret[3]} check
CONF
haproxy -c -q -f "$demo/haproxy.cfg"
haproxy -db -f "$demo/haproxy.cfg" >"$demo/haproxy.out" 2>&1 &
pids+=($!)

for i in 1 2 3; do
  mkdir -p "$demo/minion$i/conf"
  cat > "$demo/minion$i/conf/minion" <<CONF
id: minion$i
master: 127.0.0.1
master_port: $lb_ret
publish_port: $lb_pub
root_dir: $demo/minion$i
acceptance_wait_time: 1
CONF
  "$bin/salt-minion" -c "$demo/minion$i/conf" >"$demo/minion$i.out" 2>&1 &
  pids+=($!)
done

salt_key() { "$bin/salt-key" -c "$demo/master1/conf" "$@"; }
step 4 "accept the keys and run salt '*' test.ping on each master"
echo "waiting for the three minion keys (minions -> HAProxy -> any master)..."
for _ in $(seq 1 120); do
  [[ $(salt_key -l pre --out json 2>/dev/null | grep -c '"minion[123]"' || true) -ge 3 ]] && break
  sleep 0.5
done
echo "+ salt-key -L   (on master1; the keys live in the shared cluster_pki_dir)"; salt_key -L
echo "+ salt-key -A -y"; salt_key -A -y
ok=1
for m in 1 2 3; do
  # The minions retry authentication every acceptance_wait_time (1 s here).
  for _ in $(seq 1 60); do
    out=$("$bin/salt" -c "$demo/master$m/conf" '*' test.ping -t 5 2>&1 || true)
    [[ $(grep -c True <<<"$out") -ge 3 ]] && break
    sleep 1
  done
  echo "+ salt '*' test.ping   (on master$m)"
  echo "$out"
  [[ $(grep -c True <<<"$out") -ge 3 ]] || ok=0
done
echo "+ salt-run cluster.peers   (on master1)"
"$bin/salt-run" -c "$demo/master1/conf" cluster.peers || true
((ok)) || { echo "demo: not every minion answered every master"; tail -n 20 "$demo"/*.out; exit 1; }
echo "demo: every minion answered every master of the cluster ($(( $(date +%s) - t0 )) s in all)"
