# Sourced by bench/results/*/run.sh: a fresh journaled ext4 image (4 GiB, 2,000,000 inodes)
# mounted at $mnt for bench/run --tmp-dir, unmounted and deleted when the script exits.
# Why an image: this VM's / is ext4 without a journal, where file creates stay slow for
# minutes after a run deletes its temp dir (docs/benchmarks.md, "Goal 1, session 15").
# Needs root (mount).
img=/var/tmp/sylvite-bench-ext4.img mnt=/mnt/sylvite-bench
if [[ $EUID -ne 0 ]]; then
  echo "bench/ext4-image.sh: needs root to mount $img on $mnt" >&2
  exit 1
fi
truncate -s 4G $img && mkfs.ext4 -q -F -N 2000000 $img && mkdir -p $mnt && mount -o loop $img $mnt
trap 'umount $mnt; rm -f $img' EXIT
