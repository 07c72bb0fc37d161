#!/usr/bin/env bash
# The container figures: the image sizes, and `docker start` -> the child running as rankvisor's
# child (the child touches a file in a bind mount; its mtime is when it ran), over N runs.
# Usage: bash images/bench.sh [N] [IMAGE]     (N defaults to 20, IMAGE to rankvisor:dev)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20}
image=${2:-rankvisor:dev}
docker image inspect "$image" >/dev/null 2>&1 || bash images/build.sh "$image" >/dev/null
for t in "$image" "$image-slim"; do
  b=$(docker image inspect -f '{{.Size}}' "$t" 2>/dev/null) || continue
  echo "image $t: $b bytes ($(awk "BEGIN{printf \"%.2f\", $b/1048576}") MiB)"
done
dir=$(mktemp -d)
name=rv-bench-$$
trap 'docker rm -f "$name" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
# run LABEL ENTRYPOINT [ARGS...]: N starts of ENTRYPOINT ARGS... "touch /out/tI".
run() {
  local label=$1 ep=$2; shift 2
  local samples=() i code t0 t1
  for i in $(seq 1 "$n"); do
    docker rm -f "$name" >/dev/null 2>&1 || true
    rm -f "$dir/t$i"
    docker create --name "$name" -v "$dir:/out" --entrypoint "$ep" "$image" "$@" "touch /out/t$i" >/dev/null
    t0=$(date +%s%N)
    docker start "$name" >/dev/null
    code=$(docker wait "$name")
    [ "$code" = 0 ] || { echo "run $i exited $code" >&2; docker logs "$name" >&2; exit 1; }
    t1=$(stat -c %.9Y "$dir/t$i" | tr -d .)
    samples+=($(( (t1 - t0) / 1000 )))
  done
  printf '%s\n' "${samples[@]}" | sort -n | awk -v n="$n" -v label="$label" '
    { v[NR] = $1 }
    END { printf "docker start -> child started, %s (%d runs): median %.1f ms, p90 %.1f ms, min %.1f ms, max %.1f ms\n",
            label, n, v[int((n + 1) / 2)] / 1000, v[int(n * 0.9 + 0.5)] / 1000, v[1] / 1000, v[n] / 1000 }'
}
# rankvisor as PID 1 (the image's ENTRYPOINT) running `sh -c ...`, against busybox sh as PID 1:
# the difference is what rankvisor adds to a container's start.
run "rankvisor as PID 1" /rankvisor -- sh -c
run "busybox sh as PID 1" /bin/sh -c
