#!/bin/sh
# Build a Docker image from a Debian bookworm root file system made with debootstrap, for a
# machine with no image registry: nothing is pulled, Debian's packages come from its mirror.
#
#   deploy/docker/base-image.sh IMAGE ROOTFS_DIR PACKAGE[,PACKAGE...] [docker import --change ...]
#
# Steps whose result exists are skipped: the image (docker image inspect), the root file
# system (ROOTFS_DIR/.complete). Remove the image (docker rmi) or the folder to redo them.
set -eu
image=$1 rootfs=$2 packages=$3
shift 3
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

if docker image inspect "$image" >/dev/null 2>&1; then
    echo "base image $image exists"
    exit 0
fi
if [ ! -e "$rootfs/.complete" ]; then
    command -v debootstrap >/dev/null 2>&1 || {
        echo "installing debootstrap (Debian package)"
        apt-get -o DPkg::Lock::Timeout=600 install -y -qq debootstrap >/dev/null
    }
    rm -rf "$rootfs"
    mkdir -p "$rootfs" "$(dirname "$rootfs")/debs"
    echo "debootstrap bookworm into $rootfs (+ $packages)"
    debootstrap --variant=minbase --include="$packages" \
        --cache-dir="$(cd "$(dirname "$rootfs")/debs" && pwd)" bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || {
        tail -20 "$rootfs.log" >&2
        exit 1
    }
    # What an image does not need: downloaded packages, package lists, documentation.
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
           "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*
    touch "$rootfs/.complete"
fi
echo "docker import $rootfs as $image"
tar --exclude=./.complete -C "$rootfs" -c . | docker import "$@" - "$image" >/dev/null
