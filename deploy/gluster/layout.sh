#!/usr/bin/env bash
# Create the sylvite directories on the mounted shared volume. Run once, on any master,
# after mount.sh. Idempotent: existing directories get their mode (and owner) fixed.
#
#   MOUNTPOINT/pki/cluster   cluster_pki_dir  (0700: cluster.pem, the cluster AES key, minion keys)
#   MOUNTPOINT/cache         cachedir         (0700: per-minion session keys, job returns)
#   MOUNTPOINT/srv/salt      file_roots base  (0755)
#   MOUNTPOINT/srv/pillar    pillar_roots base (0700: pillar data is usually secret)
set -euo pipefail

usage() {
  cat <<'EOF_USAGE'
usage: layout.sh [--user USER] MOUNTPOINT

  MOUNTPOINT  where the volume is mounted (mount.sh), e.g. /srv/sylvite-shared
  --user USER owner of the directories: the user salt-master runs as (default root)
EOF_USAGE
}

user=root
while (($#)); do
  case $1 in
    --user) user=${2:?--user needs a value}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    -*) echo "layout.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) break ;;
  esac
done
if (($# != 1)); then usage >&2; exit 2; fi
mnt=$1
if [[ ! -d $mnt ]]; then echo "layout.sh: $mnt is not a directory" >&2; exit 1; fi
if ! awk -v m="$mnt" '$2 == m && $3 == "fuse.glusterfs" { found = 1 } END { exit !found }' /proc/mounts; then
  if [[ ${LAYOUT_ALLOW_LOCAL:-0} != 1 ]]; then
    echo "layout.sh: $mnt is not a glusterfs mount (set LAYOUT_ALLOW_LOCAL=1 for a local directory)" >&2
    exit 1
  fi
fi

mkd() {  # mkd DIR MODE
  mkdir -p "$mnt/$1"
  chmod "$2" "$mnt/$1"
  chown "$user:" "$mnt/$1"
  echo "layout.sh: $mnt/$1 $2 $user"
}
chmod 0755 "$mnt"
mkd pki 0700
mkd pki/cluster 0700
mkd cache 0700
mkd srv 0755
mkd srv/salt 0755
mkd srv/pillar 0700
