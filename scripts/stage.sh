#!/usr/bin/env bash
# stage.sh NAME COMMAND...: runs one stage of a make target and prints how long it took as it
# ends ("stage NAME: 312 s"), also appended to target/stages.log with the time it ended, so a
# cold `make test` leaves its own table (docs/testing.md, "A cold CI run"). The command's exit
# status is the script's.
set -uo pipefail
name=$1
shift
start=$(date +%s)
"$@"
status=$?
took=$(($(date +%s) - start))
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$root/target"
printf '%s %s %d s exit %d\n' "$(date -u +%FT%TZ)" "$name" "$took" "$status" >>"$root/target/stages.log"
printf 'stage %s: %d s%s\n' "$name" "$took" "$([ "$status" = 0 ] || echo " (exit $status)")" >&2
exit "$status"
