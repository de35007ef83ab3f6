#!/bin/bash
# Send a `harness ... --ray` command a signal once a node's first row is in OUT/NODE/results.json; print its exit
# status and how long it took to exit after the signal (docs/fleet.md, #55).
# usage: SIG=TERM|INT tools/ray_kill_after_row.sh OUT HARNESS-ARGS...   (the output: OUT.log)
out=$1; shift
t0=$(date +%s.%N)
harness "$@" --out "$out" > "$out.log" 2>&1 &
pid=$!
tk=$t0
while kill -0 $pid 2>/dev/null; do
  f=$(ls "$out"/*/results.json 2>/dev/null | head -1)
  if [ -n "$f" ] && python -c "import json,sys; sys.exit(0 if json.load(open('$f'))['cases'] else 1)" 2>/dev/null; then
    tk=$(date +%s.%N); kill -"${SIG:-TERM}" $pid; break
  fi
  sleep 0.2
done
wait $pid; rc=$?
te=$(date +%s.%N)
echo "rc=$rc signal_at_s=$(echo "$tk - $t0" | bc) exit_after_signal_s=$(echo "$te - $tk" | bc)"
