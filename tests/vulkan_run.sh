#!/bin/sh
# Runs a command when vulkan:0 exists, else exits 77 (CTest's skip code for
# the Vulkan tests). usage: vulkan_run.sh <anygrad> <command...>
cli="$1"
shift
if "$cli" info 2>/dev/null | grep -q '^vulkan  unavailable'; then
  echo "vulkan:0 unavailable: skipped"
  exit 77
fi
exec "$@"
