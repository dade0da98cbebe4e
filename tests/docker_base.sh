#!/usr/bin/env bash
# Make the offline Docker base image for lucepatch (no registry needed).
#
# Usage: tests/docker_base.sh [--force] [TAG]
#   TAG     defaults to $LUCEPATCH_BASE_IMAGE or lucepatch/base:busybox
#   --force rebuild even if the image already exists
#
# The image is a minimal root filesystem made from the host's *static* busybox
# (Debian: busybox-static, /bin/busybox): bin/busybox plus one symlink per
# applet (sh, echo, cat, ...), imported with `docker import`. Idempotent: if the
# tag already exists it prints its id and exits 0. Safe to call concurrently
# (serialised with flock when available).
#
# Prints the image id on the last line of stdout. Exit status: 0 ok, 1 failure,
# 2 usage error.
set -euo pipefail

force=0
tag="${LUCEPATCH_BASE_IMAGE:-lucepatch/base:busybox}"
while [ $# -gt 0 ]; do
  case "$1" in
    --force) force=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    -*) echo "docker_base.sh: unknown option $1" >&2; exit 2 ;;
    *) tag="$1" ;;
  esac
  shift
done

log() { echo "docker_base.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

command -v docker >/dev/null 2>&1 || die "docker CLI not found (apt-get install docker.io)"
timeout 30 docker info >/dev/null 2>&1 || die "no Docker daemon answers (docker info failed)"

# Serialise concurrent callers (CI proof + pytest fixture, xdist workers...).
lock="${TMPDIR:-/tmp}/lucepatch-docker-base.lock"
if command -v flock >/dev/null 2>&1; then
  exec 9>"$lock"
  flock -w 300 9 || die "could not take lock $lock within 300 s"
fi

if [ "$force" = 0 ] && id=$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null); then
  log "image $tag already exists, skipping"
  echo "$id"
  exit 0
fi

# Find a statically linked busybox (a dynamic one would not run in an empty rootfs).
bb=""
for cand in "${LUCEPATCH_BUSYBOX:-}" /bin/busybox /usr/bin/busybox "$(command -v busybox 2>/dev/null || true)"; do
  [ -n "$cand" ] && [ -x "$cand" ] || continue
  if command -v ldd >/dev/null 2>&1 && ldd "$cand" >/dev/null 2>&1; then
    log "skipping $cand: dynamically linked"
    continue
  fi
  bb="$cand"
  break
done
[ -n "$bb" ] || die "no static busybox found (apt-get install busybox-static)"

root=$(mktemp -d "${TMPDIR:-/tmp}/lucepatch-rootfs.XXXXXX")
trap 'rm -rf "$root"' EXIT

mkdir -p "$root"/{bin,dev,etc,proc,sys,root,tmp,var/tmp}
chmod 1777 "$root/tmp" "$root/var/tmp"
cp "$bb" "$root/bin/busybox"
chmod 0755 "$root/bin/busybox"
n=0
for applet in $("$root/bin/busybox" --list); do
  case "$applet" in busybox|*/*) continue ;; esac
  [ -e "$root/bin/$applet" ] || { ln -s busybox "$root/bin/$applet"; n=$((n + 1)); }
done
[ -L "$root/bin/sh" ] || die "busybox has no sh applet"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"

log "importing $tag from $bb ($n applet links)"
id=$(tar -C "$root" --numeric-owner --owner=0 --group=0 -c . |
  docker import \
    --change 'LABEL org.lucepatch.base=busybox' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/sh"]' \
    - "$tag") || die "docker import failed"
log "imported $tag"
echo "$id"
