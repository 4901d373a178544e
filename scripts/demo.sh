#!/usr/bin/env bash
# README command 1: set up, build, then run one sylvite master and three sylvite
# minions on 127.0.0.1, accept their keys with `salt-key -A -y` and run
# `salt '*' test.ping`. Everything lives in a temp dir that is removed at the end
# (DEMO_KEEP=1 keeps it and leaves the daemons running, printing how to stop them).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bash "$here/scripts/setup.sh" "$here/build"
bash "$here/scripts/build.sh" "$here/build"
bin="$here/build/bin"

demo=$(mktemp -d /tmp/sylvite-demo.XXXXXX)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ret_port=$(free_port); pub_port=$(free_port)
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

mkdir -p "$demo/master/conf" "$demo/srv/salt" "$demo/srv/pillar"
cat > "$demo/master/conf/master" <<CONF
id: demo-master
interface: 127.0.0.1
ret_port: $ret_port
publish_port: $pub_port
root_dir: $demo/master
file_roots: {base: [$demo/srv/salt]}
pillar_roots: {base: [$demo/srv/pillar]}
CONF
"$bin/salt-master" -c "$demo/master/conf" -l info >"$demo/master.out" 2>&1 &
pids+=($!)

for i in 1 2 3; do
  mkdir -p "$demo/minion$i/conf"
  cat > "$demo/minion$i/conf/minion" <<CONF
id: minion$i
master: 127.0.0.1
master_port: $ret_port
root_dir: $demo/minion$i
acceptance_wait_time: 1
CONF
  "$bin/salt-minion" -c "$demo/minion$i/conf" >"$demo/minion$i.out" 2>&1 &
  pids+=($!)
done

salt_key() { "$bin/salt-key" -c "$demo/master/conf" "$@"; }
echo "waiting for the three minion keys..."
for _ in $(seq 1 120); do
  [[ $(salt_key -l pre --out json 2>/dev/null | grep -c '"minion[123]"' || true) -ge 3 ]] && break
  sleep 0.5
done
echo "+ salt-key -L"; salt_key -L
echo "+ salt-key -A -y"; salt_key -A -y
# The minions retry authentication every acceptance_wait_time (1 s here).
for _ in $(seq 1 60); do
  out=$("$bin/salt" -c "$demo/master/conf" '*' test.ping -t 5 2>&1 || true)
  [[ $(grep -c True <<<"$out") -ge 3 ]] && break
  sleep 1
done
echo "+ salt '*' test.ping"
echo "$out"
[[ $(grep -c True <<<"$out") -ge 3 ]] || { echo "demo: not every minion answered"; tail -n 20 "$demo"/*.out; exit 1; }
