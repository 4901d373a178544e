#!/usr/bin/env bash
# Create the sylvite directories on the mounted shared volume. Run once, on ONE master,
# after mount.sh and before the masters start. Idempotent: existing directories get their
# mode (and owner) fixed. (Two mounts that create the same directory at the same moment
# can leave it in gfid split brain; masters take turns for the directories below these,
# under a lock in each top directory, but the tops must exist first.)
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
for d in minions minions_pre minions_rejected minions_denied minions_autosign; do mkd "pki/cluster/$d" 0700; done
mkd pki/cluster/peers 0755
mkd cache 0700
for d in sessions jobs minions; do mkd "cache/$d" 0700; done
mkd srv 0755
mkd srv/salt 0755
mkd srv/pillar 0700
