#!/usr/bin/env bash
# The README's two commands measured as a newcomer meets them (issue 39): a fresh clone, one
# make target, its wall and CPU time, the bytes the network interfaces received meanwhile (the
# downloads, when nothing else runs), the load before and after, and the size of the
# environments afterwards. Raw output on stdout; the command's own output in between.
#
#   bash bench/measure_make.sh /tmp/fresh demo        # clone this repository to /tmp/fresh first
#   bash bench/measure_make.sh /tmp/fresh test        # then the second command in the same clone
#   LOAD=2 bash bench/measure_make.sh /tmp/fresh test # the same beside 2 busy processes
#
# LOAD=N starts N busy-looping processes (a loaded machine) for the command's duration and
# stops them after it.
set -uo pipefail
clone=$1
target=$2
src=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -d "$clone" ]; then
  git clone -q "$src" "$clone" || exit 2
fi
cd "$clone" || exit 2
rx() { awk 'NR > 2 && $1 != "lo:" { s += $2 } END { print s + 0 }' /proc/net/dev; }
busy=()
for _ in $(seq 1 "${LOAD:-0}"); do
  (while :; do :; done) &
  busy+=($!)
done
trap '[ ${#busy[@]} -gt 0 ] && kill "${busy[@]}" 2>/dev/null' EXIT
echo "# $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD); nproc $(nproc);" \
  "busy processes beside it: ${LOAD:-0}; loadavg before: $(cat /proc/loadavg)"
echo "# command: cd $clone && make $target"
before=$(rx)
/usr/bin/time -f "# time: wall %e s, user %U s, sys %S s" make "$target" 2>&1
code=$?
after=$(rx)
echo "# exit $code;" \
  "received $(awk -v a="$before" -v b="$after" 'BEGIN { printf "%.1f MB", (b - a) / 1e6 }');" \
  "loadavg after: $(cat /proc/loadavg)"
for d in .venv .venv-floor; do
  [ -d "$d" ] && echo "# size: $(du -sh "$d" | cut -f1) $d"
done
exit $code
