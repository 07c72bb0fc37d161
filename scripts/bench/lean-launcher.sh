# Sourced by the bench scripts: the launcher exactly as the image ships it (images/build.sh
# --binary-only), or RANKVISOR_BIN as given. Sets target_dir, launcher and build (how it was built).
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
if [ -n "${RANKVISOR_BIN:-}" ]; then
  launcher=$RANKVISOR_BIN
  build="$RANKVISOR_BIN (as given)"
else
  bash images/build.sh --binary-only >/dev/null
  launcher="$target_dir/image/rankvisor"
  build=$(cat "$target_dir/image/build.txt")
fi
