#!/usr/bin/env bash
# send-vs-iperf3.sh: `mptun send --kernel --no-mptcp` against iperf3 on one veth (BENCH.md, "mptun send
# --kernel against iperf3"). Plain TCP on the kernel's stack for both tools, so what differs is the tool:
# its copies and its integrity check. Rounds are interleaved (iperf3, mptun with its default check, mptun
# with each --hash given) so a machine's drift touches every column alike.
#
#   send-vs-iperf3.sh [--rounds N] [--size SIZE] [--mptun PATH] [--hash H]... [--prefix P]
#
# Defaults: 3 rounds of 2G, the mptun on PATH, extra check sha256. Prints a line per run and the medians.
# Needs root, iproute2 and iperf3; the two namespaces (P-a, P-b; P is svi) are deleted on exit, even on
# failure.
# Offloads stay on: this is the path a user's iperf3 run takes.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

ROUNDS=3
SIZE=2G
MPTUN=mptun
HASHES=()
PREFIX=svi
while [ $# -gt 0 ]; do
    case $1 in
        --rounds) ROUNDS=$2; shift 2 ;;
        --size) SIZE=$2; shift 2 ;;
        --mptun) MPTUN=$2; shift 2 ;;
        --hash) HASHES+=("$2"); shift 2 ;;
        --prefix) PREFIX=$2; shift 2 ;;
        -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
        *) lab_die "unknown argument $1 (see --help)" ;;
    esac
done
[ ${#HASHES[@]} -gt 0 ] || HASHES=(sha256)
lab_require_root
command -v iperf3 >/dev/null || lab_die "needs iperf3"
command -v "$MPTUN" >/dev/null || [ -x "$MPTUN" ] || lab_die "no mptun binary at $MPTUN (--mptun PATH)"
command -v python3 >/dev/null || lab_die "needs python3 (reads the JSON reports)"

A=$PREFIX-a
B=$PREFIX-b
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do lab_stop_pid "$p"; done
    lab_cleanup
}
trap cleanup EXIT
trap 'exit 130' INT TERM

lab_ns_create "$A"
lab_ns_create "$B"
ip link add va netns "$A" type veth peer name vb netns "$B" || lab_die "veth"
ip -n "$A" addr add 10.35.0.1/24 dev va
ip -n "$B" addr add 10.35.0.2/24 dev vb
ip -n "$A" link set va up
ip -n "$B" link set vb up

ip netns exec "$B" iperf3 -s -p 5301 >/dev/null 2>&1 &
PIDS+=($!)
ip netns exec "$B" "$MPTUN" serve --kernel --no-mptcp -B 10.35.0.2 -p 5302 --no-control >/dev/null 2>&1 &
PIDS+=($!)
port_open() { ip netns exec "$B" ss -Htln "sport = :$1" | grep -q .; }
lab_wait_for port_open 5301 || lab_die "iperf3 server did not listen"
lab_wait_for port_open 5302 || lab_die "mptun serve did not listen"

# "GBPS CHECK" from a JSON report on stdin (both tools print iperf3's shape); mptun's must say its
# check matched.
gbps() {
    python3 -c '
import json, sys
try:
    d = json.load(sys.stdin)
except ValueError:
    sys.exit("no JSON report (the tool failed: its error is above)")
m = d["end"].get("mptcp")
if m is not None and not m["sha256_match"]:
    sys.exit("mptun: integrity check failed")
print("%.2f %s" % (d["end"]["sum_received"]["bits_per_second"] / 1e9, m["hash"] if m else "-"))
'
}

declare -A RUNS
COLS=(iperf3 default "${HASHES[@]}")
for r in $(seq "$ROUNDS"); do
    v=$(ip netns exec "$A" iperf3 -c 10.35.0.2 -p 5301 -n "$SIZE" -J | gbps)
    RUNS[iperf3]+="${v%% *} "
    echo "round $r iperf3 ${v%% *} Gbit/s"
    for col in default "${HASHES[@]}"; do
        args=()
        [ "$col" = default ] || args=(--hash "$col")
        out=$(ip netns exec "$A" "$MPTUN" send 10.35.0.2:5302 --kernel --no-mptcp -n "$SIZE" "${args[@]}" --json | gbps)
        RUNS[$col]+="${out%% *} "
        echo "round $r mptun $col (check: ${out#* }) ${out%% *} Gbit/s"
    done
done

base=$(printf '%s\n' ${RUNS[iperf3]} | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
for col in "${COLS[@]}"; do
    med=$(printf '%s\n' ${RUNS[$col]} | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    printf 'median %-8s %6s Gbit/s  (%s x iperf3)  runs: %s\n' "$col" "$med" \
        "$(awk -v m="$med" -v b="$base" 'BEGIN {printf "%.2f", m / b}')" "${RUNS[$col]}"
done
