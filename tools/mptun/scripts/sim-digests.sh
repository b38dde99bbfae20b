#!/usr/bin/env bash
# Prints the `run_digest` of every simulator scenario, one "name digest" line
# each. A pure restructuring of the protocol core must leave this list
# unchanged: run it before and after and diff the two outputs.
#
#   tools/mptun/scripts/sim-digests.sh [path/to/mptun] > digests.txt
set -euo pipefail
MPTUN=${1:-target/release/mptun}
[ -x "$MPTUN" ] || { echo "build it first: cargo build --release --bin mptun" >&2; exit 1; }
digest() {
    local name=$1; shift
    printf '%-44s %s\n' "$name" "$("$MPTUN" sim "$@" --json | sed -n 's/.*"run_digest": *"\([0-9a-f]*\)".*/\1/p' | tail -1)"
}
for cc in reno cubic; do
    digest "tcp-single/$cc" tcp-single --cc "$cc"
    digest "tcp-single/$cc/loss1%" tcp-single --cc "$cc" --loss 1%
    digest "tcp-single/$cc/reorder2%" tcp-single --cc "$cc" --reorder 2% --seed 7
done
digest hystart hystart
digest edt-rr edt-rr
digest cc-compare cc-compare
digest aggregate aggregate
digest failover failover
digest fallback fallback
digest handover/break handover --mode break
digest handover/make handover --mode make
for scenario in suite unbounded rwnd sndbuf both; do
    for policy in default penalise penalise-guarded mptcp-org; do
        digest "penalise/$scenario/$policy" penalise --scenario "$scenario" --policy "$policy" --seeds "${SEEDS:-2}"
    done
done
# The fast paths (1 Gbit/s, the payload check), BBR, the
# topologies and every scenario file. A report without a digest (`sim bbr`)
# is hashed whole, its wall-clock lines left out.
digest tcp-single/1gbit tcp-single --rate 1gbit --delay 5ms --size 1GB
digest tcp-single/100mbit tcp-single --rate 100mbit --delay 5ms --size 200MB
digest tcp-single/bbr tcp-single --cc bbr
digest tcp-single/bbr/1gbit tcp-single --cc bbr --rate 1gbit --delay 5ms --size 300MB
digest tcp-single/loss0.5%/seed3 tcp-single --loss 0.5% --seed 3
digest shared-bottleneck shared-bottleneck
digest sched-compare sched-compare
printf '%-44s %s\n' bbr "$("$MPTUN" sim bbr --json | grep -v -e wall_s -e sim_gbps | sha256sum | cut -c1-64)"
for f in "$(dirname "$0")"/../../../docs/scenarios/*.toml; do
    digest "run/$(basename "$f")" run "$f"
done
