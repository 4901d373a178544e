#!/usr/bin/env bash
# Mount the sylvite GlusterFS volume on a master (FUSE client) and print, or add, its
# /etc/fstab line. Run as root on every master. Idempotent: a mount point that already has
# this volume mounted is left alone; the fstab line is added once.
set -euo pipefail

usage() {
  cat <<'EOF_USAGE'
usage: mount.sh [options] VOLUME SERVER MOUNTPOINT

  VOLUME      the volume, e.g. sylvite
  SERVER      the server the volume file is fetched from at mount time (usually this host
              or the first server); after that the client talks to all bricks directly
  MOUNTPOINT  e.g. /srv/sylvite-shared

options:
  --backup LIST   colon-separated servers to fetch the volume file from when SERVER is down
                  (backup-volfile-servers), e.g. gl2:gl3
  --fstab         also add the line to /etc/fstab (it is always printed; $FSTAB overrides
                  the file, for tests)
  --options OPTS  extra comma-separated mount options (e.g. log-file=/var/log/x.log)
  -h, --help      this text
EOF_USAGE
}

backup=""
fstab=0
extra=""
while (($#)); do
  case $1 in
    --backup) backup=${2:?--backup needs a value}; shift 2 ;;
    --fstab) fstab=1; shift ;;
    --options) extra=${2:?--options needs a value}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    -*) echo "mount.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) break ;;
  esac
done
if (($# != 3)); then usage >&2; exit 2; fi
volume=$1 server=$2 mnt=$3

# _netdev: wait for the network at boot; backup-volfile-servers: mount even if SERVER is down.
opts="defaults,_netdev"
[[ -n $backup ]] && opts+=",backup-volfile-servers=$backup"
[[ -n $extra ]] && opts+=",$extra"
line="$server:/$volume $mnt glusterfs $opts 0 0"

mkdir -p "$mnt"
# Already mounted? (field 2 of /proc/mounts, field 3 is fuse.glusterfs)
if awk -v m="$mnt" '$2 == m && $3 == "fuse.glusterfs" { found = 1 } END { exit !found }' /proc/mounts; then
  echo "mount.sh: $mnt already has a glusterfs mount"
else
  mount -t glusterfs -o "${opts#defaults,}" "$server:/$volume" "$mnt"
  echo "mount.sh: mounted $server:/$volume on $mnt"
fi

echo "fstab: $line"
if ((fstab)); then
  tab=${FSTAB:-/etc/fstab}
  if [[ -f $tab ]] && awk -v m="$mnt" '$1 !~ /^#/ && $2 == m { found = 1 } END { exit !found }' "$tab"; then
    echo "mount.sh: $tab already has an entry for $mnt (left as it is)"
  else
    echo "$line" >>"$tab"
    echo "mount.sh: added to $tab"
  fi
fi
