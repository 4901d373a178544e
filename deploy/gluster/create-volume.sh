#!/usr/bin/env bash
# Create (or finish creating) the replica-3 GlusterFS volume that a sylvite master cluster
# shares (cluster_pki_dir, cachedir, file_roots, pillar_roots), set the volume options sylvite
# needs, and start it. Run as root on HOST1, with glusterd running on all three hosts.
# Idempotent: peers already probed, a volume that exists, options already set and a volume
# already started are all fine. See docs/gluster.md for every option and why.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: create-volume.sh [options] VOLUME BRICK_DIR HOST1 HOST2 HOST3

  VOLUME      volume name, e.g. sylvite
  BRICK_DIR   brick directory, the same path on every host, e.g. /data/glusterfs/sylvite/brick
              (a subdirectory of a dedicated XFS/ext4 file system; "%h" in it is replaced by
              the host, for several bricks on one machine as in tests); its parent must
              exist on every host (glusterd creates only the last component)
  HOST1..3    the three servers (names or addresses every server and client can reach);
              run this on HOST1

options:
  --force               pass "force" to volume create (bricks on the root file system;
                        tests only: a brick that fills / takes the whole machine down)
  --allow LIST          auth.allow: comma-separated client addresses allowed to mount
                        (recommended: the masters' addresses; the volume holds cluster.pem)
  --sock PATH           glusterd's CLI socket (default: gluster's own, /var/run/glusterd.socket);
                        also from $GLUSTERD_SOCK
  --peer-timeout SEC    how long to wait for probed peers to be connected (default 60)
  -h, --help            this text

environment: GLUSTER (the gluster CLI, default "gluster")
EOF
}

force=""
allow=""
sock=${GLUSTERD_SOCK:-}
peer_timeout=60
while (($#)); do
  case $1 in
    --force) force=force; shift ;;
    --allow) allow=${2:?--allow needs a value}; shift 2 ;;
    --sock) sock=${2:?--sock needs a value}; shift 2 ;;
    --peer-timeout) peer_timeout=${2:?--peer-timeout needs a value}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    -*) echo "create-volume.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) break ;;
  esac
done
if (($# != 5)); then usage >&2; exit 2; fi
volume=$1 brick_dir=$2
hosts=("$3" "$4" "$5")

case $brick_dir in
  /*) ;;
  *) echo "create-volume.sh: BRICK_DIR must be an absolute path: $brick_dir" >&2; exit 2 ;;
esac

gl=("${GLUSTER:-gluster}" --mode=script)
[[ -n $sock ]] && gl+=("--glusterd-sock=$sock")
log() { echo "create-volume: $*"; }

# The options sylvite needs (docs/gluster.md, "Volume options"). Order does not matter.
options=(
  # Fresh reads after rename on another mount (lab: 198 of 200 reads were stale without).
  performance.quick-read off
  performance.open-behind off
  performance.stat-prefetch off
  # A dead replica blocks every I/O on every mount for ping-timeout (default 42 s -> ~70 s).
  network.ping-timeout 5
  # Writes need 2 of 3 bricks: no split brain when one node is cut off (the replica-3 default,
  # set explicitly so nobody "fixes" it to none).
  cluster.quorum-type auto
  # Never cache "no such file": a key or job file created on another master must appear.
  performance.nl-cache off
)
[[ -n $allow ]] && options+=(auth.allow "$allow")

# 1. Peers (probing a peer that is already in the pool succeeds).
for h in "${hosts[@]:1}"; do
  log "peer probe $h"
  "${gl[@]}" peer probe "$h"
done
deadline=$((SECONDS + peer_timeout))
while :; do
  status=$("${gl[@]}" peer status 2>&1 || true)
  connected=$(grep -c 'State: Peer in Cluster (Connected)' <<<"$status" || true)
  ((connected >= ${#hosts[@]} - 1)) && break
  if ((SECONDS >= deadline)); then
    echo "create-volume.sh: peers not all connected after ${peer_timeout}s:" >&2
    echo "$status" >&2
    exit 1
  fi
  sleep 0.5
done
log "peers connected"

# 2. The volume.
if "${gl[@]}" volume info "$volume" >/dev/null 2>&1; then
  log "volume $volume exists"
else
  bricks=()
  for h in "${hosts[@]}"; do bricks+=("$h:${brick_dir//%h/$h}"); done
  log "volume create $volume replica 3 ${bricks[*]} $force"
  # Right after a probe, glusterd may still be syncing the peer list: retry briefly.
  for try in 1 2 3 4 5 6 7 8 9 10; do
    if out=$("${gl[@]}" volume create "$volume" replica 3 "${bricks[@]}" $force 2>&1); then
      echo "$out"; break
    fi
    if ((try == 10)) || ! grep -qiE 'not (in .?peer in cluster.? state|connected)|another transaction|locking failed' <<<"$out"; then
      echo "$out" >&2; exit 1
    fi
    sleep 1
  done
fi

# 3. Options (setting an option to its current value is fine). One transaction for all of
# them; one by one if that is refused, so the error names the option.
log "volume set $volume ${options[*]}"
if ! "${gl[@]}" volume set "$volume" "${options[@]}" >/dev/null; then
  for ((i = 0; i < ${#options[@]}; i += 2)); do
    log "volume set $volume ${options[i]} ${options[i+1]}"
    "${gl[@]}" volume set "$volume" "${options[i]}" "${options[i+1]}" >/dev/null
  done
fi

# 4. Start.
if "${gl[@]}" volume info "$volume" | grep -q '^Status: Started'; then
  log "volume $volume already started"
else
  log "volume start $volume"
  "${gl[@]}" volume start "$volume" >/dev/null
fi
"${gl[@]}" volume info "$volume"
