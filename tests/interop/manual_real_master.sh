#!/usr/bin/env bash
# Interop check: a real Salt 3008 salt-master (transport: tcp) drives the sylvite minion.
#
#   tests/interop/manual_real_master.sh [BUILD_DIR] [SALT_VENV]
#
# Starts a salt-master on 127.0.0.1 with free ports and everything under a temp dir,
# starts build/bin/salt-minion against it, accepts the key with the real salt-key, runs
# the real `salt` CLI (test.ping, cmd.run, grains.get, test.echo, pillar.items,
# cp.get_file, test.arg, saltutil.find_job, an unknown function), then `salt-call
# test.ping` through the sylvite salt-call, restarts the master (new AES key) and checks
# that the minion comes back by itself. Prints PASS/FAIL per step; exit status = failures.
# Keep LAB=<dir> in the environment to keep the temp dir for inspection.
set -u
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${1:-$ROOT/build}"
VENV="${2:-/tmp/saltvenv/3008}"
[[ "$BUILD" = /* ]] || BUILD="$ROOT/$BUILD"
SALT_MASTER="$VENV/bin/salt-master"
for b in "$SALT_MASTER" "$VENV/bin/salt" "$VENV/bin/salt-key" "$BUILD/bin/salt-minion" "$BUILD/bin/salt-call"; do
  [[ -x "$b" ]] || { echo "missing $b"; exit 2; }
done

LAB="${LAB:-$(mktemp -d /tmp/sylvite-interop.XXXXXX)}"
mkdir -p "$LAB"
MID="sylvite-m1"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
PUB_PORT=$(free_port); RET_PORT=$(free_port)
while [[ "$RET_PORT" == "$PUB_PORT" ]]; do RET_PORT=$(free_port); done

MDIR="$LAB/master"; NDIR="$LAB/minion"
mkdir -p "$MDIR" "$NDIR" "$LAB/srv/salt" "$LAB/srv/pillar"
cat > "$MDIR/master" <<EOF
id: interop-master
interface: 127.0.0.1
transport: tcp
publish_port: $PUB_PORT
ret_port: $RET_PORT
user: root
root_dir: $LAB
pki_dir: $LAB/master-root/pki
cachedir: $LAB/master-root/cache
sock_dir: $LAB/master-root/sock
log_file: $LAB/master.log
log_level_logfile: debug
file_roots:
  base:
    - $LAB/srv/salt
pillar_roots:
  base:
    - $LAB/srv/pillar
EOF
cat > "$NDIR/minion" <<EOF
id: $MID
master: 127.0.0.1
master_port: $RET_PORT
transport: tcp
root_dir: $LAB
pki_dir: $LAB/minion-root/pki
cachedir: $LAB/minion-root/cache
sock_dir: $LAB/minion-root/sock
log_file: $LAB/minion.log
log_level_logfile: debug
acceptance_wait_time: 2
grains:
  roles:
    - interop
EOF
cat > "$LAB/srv/pillar/top.sls" <<EOF
base:
  '*':
    - data
EOF
cat > "$LAB/srv/pillar/data.sls" <<EOF
color: blue
nested:
  key: value
EOF
printf 'hello from the salt fileserver\n' > "$LAB/srv/salt/f"

PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  sleep 1
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  [[ -n "${KEEP:-}" ]] || echo "lab dir: $LAB"
}
trap cleanup EXIT

start_master() {
  "$SALT_MASTER" -c "$MDIR" -l warning >"$LAB/master.out" 2>&1 &
  MASTER_PID=$!
  PIDS+=("$MASTER_PID")
  for _ in $(seq 1 60); do
    (echo > "/dev/tcp/127.0.0.1/$RET_PORT") 2>/dev/null && return 0
    sleep 0.5
  done
  echo "master did not start"; cat "$LAB/master.out"; exit 2
}

FAILS=0
check() {  # name, expected substring, command...
  local name="$1" want="$2"; shift 2
  local out
  out="$("$@" 2>&1)"
  if grep -qF -- "$want" <<<"$out"; then echo "PASS $name"; else echo "FAIL $name"; echo "$out" | sed 's/^/    /'; FAILS=$((FAILS+1)); fi
}
SALT() { "$VENV/bin/salt" -c "$MDIR" --timeout 20 "$@"; }

start_master
"$BUILD/bin/salt-minion" -c "$NDIR" -l info --log-file "$LAB/minion.log" >"$LAB/minion.out" 2>&1 &
MINION_PID=$!
PIDS+=("$MINION_PID")

# Key shows up as pending, accept it with the real salt-key.
for _ in $(seq 1 40); do
  "$VENV/bin/salt-key" -c "$MDIR" -l un 2>/dev/null | grep -qx "$MID" && break
  sleep 0.5
done
check "salt-key sees pending key" "$MID" "$VENV/bin/salt-key" -c "$MDIR" -l un
"$VENV/bin/salt-key" -c "$MDIR" -a "$MID" -y >/dev/null
# Wait for the minion to sign in (acceptance_wait_time 2 s) and start.
for _ in $(seq 1 40); do
  grep -q "Minion is ready to receive requests" "$LAB/minion.log" 2>/dev/null && break
  sleep 0.5
done

check "test.ping"           "True"                 SALT "$MID" test.ping
check "cmd.run echo hi"     "hi"                   SALT "$MID" cmd.run 'echo hi'
check "grains.get os"       "$(. /etc/os-release; case $ID in debian) echo Debian;; ubuntu) echo Ubuntu;; *) echo "$NAME";; esac)" SALT "$MID" grains.get os
check "test.echo x"         "\"$MID\": \"x\""  SALT "$MID" test.echo x --out json
check "pillar.items"        "blue"                 SALT "$MID" pillar.items unmask=True
check "pillar.items masked" "**********"           SALT "$MID" pillar.items
check "pillar.get nested"   "value"                SALT "$MID" pillar.get nested:key unmask=True
rm -f "$LAB/x"
check "cp.get_file"         "$LAB/x"               SALT "$MID" cp.get_file salt://f "$LAB/x"
check "cp.get_file content" "hello from the salt fileserver" cat "$LAB/x"
check "grain targeting"     "True"                 SALT -G 'roles:interop' test.ping
check "test.arg kwargs"     "__pub_jid"            SALT "$MID" test.arg a b=c
check "cmd.run_all retcode" "\"retcode\": 3"       SALT "$MID" cmd.run_all 'exit 3' --out json
check "unknown function"    "'foo.bar' is not available." SALT "$MID" foo.bar
check "json out"            "\"$MID\": true"       SALT "$MID" test.ping --out json
check "salt-call test.ping" "True"                 "$BUILD/bin/salt-call" -c "$NDIR" test.ping
check "salt-call json"      "\"local\": true"      "$BUILD/bin/salt-call" -c "$NDIR" --out json test.ping
check "salt-call --local"   "True"                 "$BUILD/bin/salt-call" -c "$NDIR" --local test.ping
check "salt-call return in job cache" "test.ping" "$VENV/bin/salt-run" -c "$MDIR" jobs.list_jobs search_function=test.ping

# Master restart: new AES key, same master key; the minion must come back by itself.
kill "$MASTER_PID"; wait "$MASTER_PID" 2>/dev/null
sleep 1
start_master
for _ in $(seq 1 60); do
  out="$(SALT "$MID" test.ping --timeout 5 2>&1)"
  grep -q True <<<"$out" && break
  sleep 1
done
check "test.ping after master restart" "True" SALT "$MID" test.ping

kill "$MINION_PID"; wait "$MINION_PID"; rc=$?
if [[ $rc -eq 0 ]]; then echo "PASS minion SIGTERM exit 0"; else echo "FAIL minion SIGTERM exit $rc"; FAILS=$((FAILS+1)); fi
echo "failures: $FAILS"
exit "$FAILS"
