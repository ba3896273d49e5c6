#!/bin/sh
# Unmount every file system mounted below DIR (DIR itself stays), deepest first, and fail if one
# is left: debootstrap, or a package's maintainer script in the root file system it builds, can
# leave /proc (or more) mounted there, and whatever walks the tree afterwards (tar, rm -rf, a
# package finder following links) walks into it.
#
#   deploy/docker/unmount-below.sh DIR          unmount, then exit 1 naming what is still mounted
#   deploy/docker/unmount-below.sh --check DIR  only exit 1 (naming them) if anything is mounted
#
# Needs root to unmount (base-image.sh runs as root for debootstrap anyway).
set -eu
check_only=false
if [ "${1:-}" = "--check" ]; then
    check_only=true
    shift
fi
dir=$1
[ -d "$dir" ] || exit 0
abs=$(cd "$dir" && pwd -P)

# Mount points strictly below $abs, from /proc/self/mountinfo (field 5, octal escapes such as
# \040 for a space decoded), children before parents.
below() {
    awk '{ print $5 }' /proc/self/mountinfo | while IFS= read -r m; do
        m=$(printf '%b' "$m")
        case $m in "$abs"/*) printf '%s\n' "$m" ;; esac
    done | sort -r -u
}

if ! $check_only; then
    rounds=0
    while [ -n "$(below)" ] && [ $rounds -lt 10 ]; do  # a mount point may be stacked several times
        below | while IFS= read -r m; do
            umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
        done
        rounds=$((rounds + 1))
    done
fi
left=$(below)
if [ -n "$left" ]; then
    echo "still mounted below $abs:" >&2
    echo "$left" | sed 's/^/  /' >&2
    exit 1
fi
