#!/usr/bin/env bash
# Given to `bench eviction` as --controller: samples the controller from its start for 10 s (its
# lists up to /readyz), which `bench --profile` (the storm only) does not cover. perf attaches to
# this shell's PID, which exec keeps, and follows the threads the controller starts.
#   bench eviction --nodes 5000 --pods 30 --target 100 --controller docs/bench/fast-path-costs/5000-rounds-2/profile/perfwrap.sh
#   perf report -i ready.data --no-children -g none --time FIRST_SAMPLE,FIRST_SAMPLE+4
perf record -F 999 -g --clockid realtime -p $$ -o "${PROFILE:-ready.data}" -- sleep 10 >/dev/null 2>&1 &
sleep 0.3
exec "${CARGO_TARGET_DIR:-target}/release/node-lifecycle-controller" "$@"
