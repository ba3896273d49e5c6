#!/bin/bash
# kbroker-healthcheck [HOST:PORT] — the image's HEALTHCHECK: `kbroker health` (an ApiVersions v0
# round trip to the process's first listener, exit 0 if it answers, 1 if not) without starting
# Python. Docker runs it every few seconds in every container: a Python start is ~0.03 CPU-s
# (0.08 cores for docker-compose.yml's four containers at a 2 s interval), this ~0.004; Docker's
# own exec of a check (runc) adds ~0.013 in the container's cgroup either way.
#
# Without an argument it asks the first listener of $KBROKER_LISTENERS (NAME://host:port,...; a
# wildcard host meaning 127.0.0.1), as `kbroker health` does. Plaintext listeners only: a TLS
# listener needs `kbroker health -X security.protocol=ssl ...` (docker-compose.secure.yml).
# Healthy when the answer is a Kafka frame with this request's correlation id and error code 0.
set -u
address=${1:-}
if [ -z "$address" ]; then
    first=${KBROKER_LISTENERS:-PLAINTEXT://127.0.0.1:9092}
    first=${first%%,*}
    address=${first#*://}
fi
host=${address%:*} port=${address##*:}
case $host in "" | 0.0.0.0 | "::" | "[::]") host=127.0.0.1 ;; esac
host=${host#[} host=${host%]}
unhealthy() {
    echo "kbroker: unhealthy: $host:$port: $1" >&2
    exit 1
}
{ exec 3<>"/dev/tcp/$host/$port"; } 2>/dev/null || unhealthy "cannot connect"
# size 24, ApiVersions (18) v0, correlation id 1, client id "kbroker-health" (14 bytes)
printf '\0\0\0\x18\0\x12\0\0\0\0\0\x01\0\x0ekbroker-health' >&3 || unhealthy "cannot send"
# size (4 bytes), correlation id (4), error code (2)
answer=$(timeout 4 od -An -v -tx1 -N10 <&3) || unhealthy "no ApiVersions answer within 4000 ms"
answer=${answer//[$' \n']/}
[ ${#answer} = 20 ] || unhealthy "no ApiVersions answer (connection closed)"
size=$((16#${answer:0:8}))
[ "$size" -ge 6 ] && [ "$size" -le 1048576 ] && [ "${answer:8:8}" = 00000001 ] || unhealthy "not a Kafka answer"
[ "${answer:16:4}" = 0000 ] || unhealthy "ApiVersions answered error code $((16#${answer:16:4}))"
echo "$host:$port answered ApiVersions"
