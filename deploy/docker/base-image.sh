#!/bin/sh
# Build a Docker image from a Debian bookworm root file system made with debootstrap, for a
# machine with no image registry: nothing is pulled, Debian's packages come from its mirror.
#
#   deploy/docker/base-image.sh IMAGE ROOTFS_DIR PACKAGE[,PACKAGE...] [docker import --change ...]
#
# The image is what is kept and reused: when it exists (docker image inspect) nothing else is
# done, except removing a root file system an earlier run left behind. Otherwise debootstrap
# builds ROOTFS_DIR (skipped when ROOTFS_DIR/.complete says an earlier run built it and the
# import failed), whatever got mounted below it (debootstrap or a maintainer script can leave
# /proc mounted) is unmounted once debootstrap ends, on success and on failure alike, the tree
# is imported only when nothing is mounted below it, and it is deleted once imported. Remove
# the image (docker rmi) to build it again.
set -eu
image=$1 rootfs=$2 packages=$3
shift 3
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
here=$(cd "$(dirname "$0")" && pwd)
debs=$(dirname "$rootfs")/debs-$(basename "$rootfs")

# Unmount what is below the tree, then delete it without crossing into another file system
# (should an unmount have failed, rm leaves that mount alone rather than walk into it).
remove_rootfs() {
    [ -e "$rootfs" ] || return 0
    "$here/unmount-below.sh" "$rootfs"
    rm -rf --one-file-system "$rootfs"
}

if docker image inspect "$image" >/dev/null 2>&1; then
    echo "base image $image exists"
    remove_rootfs
    exit 0
fi
# Whatever happens from here (debootstrap fails, tar fails, ^C), nothing stays mounted below the tree.
trap '"$here/unmount-below.sh" "$rootfs" || true' EXIT
trap 'exit 130' INT TERM
if [ ! -e "$rootfs/.complete" ]; then
    command -v debootstrap >/dev/null 2>&1 || {
        echo "installing debootstrap (Debian package)"
        apt-get -o DPkg::Lock::Timeout=600 install -y -qq debootstrap >/dev/null
    }
    remove_rootfs
    mkdir -p "$rootfs" "$debs"
    echo "debootstrap bookworm into $rootfs (+ $packages)"
    debootstrap --variant=minbase --include="$packages" \
        --cache-dir="$(cd "$debs" && pwd)" bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || {
        tail -20 "$rootfs.log" >&2
        exit 1
    }
    "$here/unmount-below.sh" "$rootfs" || true  # what it cannot unmount stops the import below
    # What an image does not need: downloaded packages, package lists, documentation.
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
           "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*
    touch "$rootfs/.complete"
fi
"$here/unmount-below.sh" "$rootfs" 2>/dev/null || true  # a tree kept from an earlier run may have mounts too
"$here/unmount-below.sh" --check "$rootfs" || {
    echo "refusing to docker import $rootfs: a file system is mounted below it" >&2
    exit 1
}
echo "docker import $rootfs as $image"
tar --one-file-system --exclude=./.complete -C "$rootfs" -c . | docker import "$@" - "$image" >/dev/null
remove_rootfs
