#!/usr/bin/env bash
# The penalise-slow-subflow scenario matrix (simult_flows.sh topology) over linkem paths.
#
#   SCENARIO=suite|unbounded|rwnd|sndbuf|both STACK=kernel|mptun [RCVBUF=N] [SNDBUF=N] [RUNS=1] \
#   [CC=cubic] [SCHED=policy] [FAMILY=4|6] [OUT=dir] [NAME=prefix] netns-scripts/lab/scenario.sh
#
# Each case builds client ns — linkem ns — server ns with two paths shaped in both directions
# (rate, one-way delay, packet-count limit), then transfers 16 MiB one way and 80 KiB the other
# simultaneously, and again in the reverse direction. Per run it prints runtime, goodput of the
# large transfer, the large-transfer receiver's MPTcpExtOFOQueue delta, the subflow count, whether
# both SHA-256 digests match, and for `suite` the simult_flows pass bound:
#   1000·size·8·10 / ((r1+r2)·10^6·9) ms + 400 ms + 50 ms slack.
# For rwnd/sndbuf/both that bound assumes both paths are fully used and is not meaningful: read
# runtime and OFO counts. Binaries: LINKEM and XFER, or found in $CARGO_TARGET_DIR / target.
# STACK=mptun hands the whole matrix to `mptun lab penalise` (MPTUN, or found likewise), which runs
# the same workload (both streams at once) with mptun at both ends and prints the simulator's
# prediction beside it; RCVBUF/SNDBUF/CC/FAMILY are the kernel matrix's knobs only.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib.sh
. "$HERE/../lib.sh"

SCENARIO=${SCENARIO:-suite}
STACK=${STACK:-kernel}
RUNS=${RUNS:-1}
NAME=${NAME:-lab$$}
OUT=${OUT:-/tmp/mptun-lab/$NAME-results}
SIZE=$((16 * 1024 * 1024))
SMALL=$((20 * 4096))
PORT=${PORT:-5000}
CC=${CC:-}
FAMILY=${FAMILY:-4}
if [ "$FAMILY" = 6 ]; then SERVER_ADDR="[dead:beef:1::2]" BIND="[::]"; else SERVER_ADDR=10.0.1.2 BIND=0.0.0.0; fi

[ "$STACK" = kernel ] || [ "$STACK" = mptun ] || lab_die "STACK must be kernel or mptun"
lab_require_root
command -v nstat >/dev/null || lab_die "needs nstat (iproute2)"

find_bin() {
    local n=$1 t p
    for t in "${CARGO_TARGET_DIR:-}" "$HERE/../../target"; do
        [ -n "$t" ] || continue
        for p in release debug; do
            [ -x "$t/$p/$n" ] && { echo "$t/$p/$n"; return; }
        done
    done
    lab_die "$n not found: cargo build -p linkem --release (or set LINKEM/XFER)"
}
if [ "$STACK" = mptun ]; then
    [ -z "${RCVBUF:-}${SNDBUF:-}$CC" ] && [ "$FAMILY" = 4 ] ||
        lab_die "STACK=mptun runs the simulator's cases as they are (no RCVBUF/SNDBUF/CC/FAMILY)"
    MPTUN=${MPTUN:-$(find_bin mptun)}
    exec "$MPTUN" lab penalise --scenario "$SCENARIO" --runs "$RUNS" --policy "${SCHED:-default}" --name "$NAME" \
        --linkem "${LINKEM:-$(dirname "$MPTUN")/linkem}" --scripts "$HERE/.."
fi
LINKEM=${LINKEM:-$(find_bin linkem)}
XFER=${XFER:-$(find_bin mptcp-xfer)}

# Cases: r1 r2 d1 d2 limit1 limit2 rcvbuf sndbuf label
CASES=()
case $SCENARIO in
suite)
    CASES=(
        "10 10 0 0 20 20 - - balanced bwidth"
        "10 10 1 25 20 50 - - balanced bwidth with unbalanced delay"
        "10 3 0 0 30 20 - - unbalanced bwidth"
        "10 3 1 25 40 30 - - unbalanced bwidth with unbalanced delay"
        "10 3 25 1 50 30 - - unbalanced bwidth with opposed, unbalanced delay"
    )
    ;;
unbounded) CASES=("10 3 0 30 100 100 - - unbounded (autotuned buffers)") ;;
rwnd) CASES=("10 3 0 50 100 100 ${RCVBUF:-262144} - rwnd-limited") ;;
sndbuf) CASES=("10 3 0 0 30 20 - ${SNDBUF:-65536} sndbuf-limited") ;;
both) CASES=("10 3 0 50 100 100 ${RCVBUF:-262144} ${SNDBUF:-65536} rwnd+sndbuf-limited") ;;
*) lab_die "SCENARIO must be suite, unbounded, rwnd, sndbuf or both" ;;
esac

mkdir -p "$OUT"
TOPO="$HERE/topo.sh"
STATE="$OUT/topo"
cleanup() { bash "$TOPO" down --name "$NAME" --state "$STATE" >/dev/null 2>&1 || true; }
trap cleanup EXIT
trap "exit 130" INT TERM

json_field() { sed -n "s/.*\"$2\":\"\{0,1\}\([^,\"}]*\).*/\1/p" <<<"$1"; }

# transfer CIN SIN: client sends CIN bytes, server SIN bytes; prints one result row.
transfer() {
    local cin=$1 sin=$2 rcv=$3 snd=$4 bound=$5 label=$6 dir=$7
    local bufs=()
    [ "$rcv" = - ] || bufs+=(--rcvbuf "$rcv")
    [ "$snd" = - ] || bufs+=(--sndbuf "$snd")
    # Set per socket: a namespace may only choose the host's allowed algorithms by sysctl.
    [ -z "$CC" ] || bufs+=(--cc "$CC")
    PORT=$((PORT + 1))
    local before_c before_s
    before_c=$(lab_nstat "$NAME-cli" MPTcpExtOFOQueue)
    before_s=$(lab_nstat "$NAME-srv" MPTcpExtOFOQueue)
    timeout 180 ip netns exec "$NAME-srv" "$XFER" server --bind "$BIND:$PORT" --send "$sin" \
        --wait-subflows 2 "${bufs[@]}" >"$OUT/srv.json" 2>"$OUT/srv.err" &
    local spid=$!
    lab_wait_for bash -c "ip netns exec $NAME-srv ss -Hltn 'sport = :$PORT' | grep -q ." ||
        lab_die "server did not listen"
    local cjson sjson rc=0
    cjson=$(timeout 180 ip netns exec "$NAME-cli" "$XFER" client --connect "$SERVER_ADDR:$PORT" --send "$cin" \
        --wait-subflows 2 "${bufs[@]}" 2>"$OUT/cli.err") || rc=$?
    wait "$spid" || rc=$?
    sjson=$(cat "$OUT/srv.json")
    local ofo_ns large_rx
    if [ "$sin" -gt "$cin" ]; then ofo_ns=$NAME-cli; large_rx=client; else ofo_ns=$NAME-srv; large_rx=server; fi
    local after ofo
    after=$(lab_nstat "$ofo_ns" MPTcpExtOFOQueue)
    if [ "$ofo_ns" = "$NAME-cli" ]; then ofo=$((after - before_c)); else ofo=$((after - before_s)); fi
    local runtime sha=mismatch subflows result
    runtime=$(json_field "$cjson" runtime_ms)
    runtime=${runtime%.*}
    if [ "$rc" = 0 ] && [ -n "$runtime" ] &&
        [ "$(json_field "$cjson" sent_sha256)" = "$(json_field "$sjson" received_sha256)" ] &&
        [ "$(json_field "$sjson" sent_sha256)" = "$(json_field "$cjson" received_sha256)" ] &&
        [ "$(json_field "$cjson" received)" = "$sin" ] && [ "$(json_field "$sjson" received)" = "$cin" ]; then
        sha=match
    fi
    subflows=$(json_field "$cjson" subflows_max)
    local goodput="-"
    [ -n "$runtime" ] && [ "$runtime" -gt 0 ] &&
        goodput=$(awk -v b="$SIZE" -v t="$runtime" 'BEGIN { printf "%.2f", b * 8 / t / 1000 }')
    if [ "$sha" != match ]; then
        result=FAIL
        cat "$OUT/cli.err" "$OUT/srv.err" >&2
    elif [ "$bound" = - ]; then
        result=-
    elif [ "$runtime" -le "$bound" ]; then
        result=OK
    else
        result=FAIL
    fi
    printf '%-9s %-58s %-8s %8s %8s %8s %7s %4s %-8s %s\n' "$SCENARIO" "$label" "$dir" "${runtime:--}" \
        "$bound" "$goodput" "$ofo" "${subflows:--}" "$sha" "$result" | tee -a "$OUT/matrix.txt"
    echo "$SCENARIO	$label	$dir	${runtime:--}	$bound	$goodput	$ofo	$large_rx	${subflows:--}	$sha	$result" \
        >>"$OUT/matrix.tsv"
}

printf '%-9s %-58s %-8s %8s %8s %8s %7s %4s %-8s %s\n' scenario case dir runtime bound goodput ofo sf sha256 \
    result | tee "$OUT/matrix.txt"
echo "# $STACK stack, kernel $(uname -r), IPv$FAMILY, cc ${CC:-default}, $(date -u +%FT%TZ)" >"$OUT/matrix.tsv"
for c in "${CASES[@]}"; do
    read -r r1 r2 d1 d2 l1 l2 rcv snd label <<<"$c"
    spec() { echo "rate=${1}mbit,delay=${2}ms,limit=${3}"; }
    bound=-
    if [ "$SCENARIO" = suite ]; then
        bound=$((1000 * SIZE * 8 * 10 / ((r1 + r2) * 1000 * 1000 * 9) + 400 + 50))
    fi
    desc="$label ($r1/$r2 mbit, $d1/$d2 ms, limit $l1/$l2)"
    for run in $(seq "$RUNS"); do
        bash "$TOPO" up --name "$NAME" --state "$STATE" --path "$(spec "$r1" "$d1" "$l1")" \
            --path "$(spec "$r2" "$d2" "$l2")" --linkem "$LINKEM" --mptcp-family "$FAMILY" >"$OUT/topo.log" 2>&1 ||
            { cat "$OUT/topo.log" >&2; lab_die "topology setup failed"; }
        lab_log "run $run: congestion control ${CC:-$(ip netns exec "$NAME-cli" sysctl -n net.ipv4.tcp_congestion_control)}, IPv$FAMILY"
        transfer "$SMALL" "$SIZE" "$rcv" "$snd" "$bound" "$desc" "download"
        transfer "$SIZE" "$SMALL" "$rcv" "$snd" "$bound" "$desc" "upload"
        bash "$TOPO" down --name "$NAME" --state "$STATE" >/dev/null
        for i in 1 2; do
            [ -e "$STATE/path$i.json" ] && cp "$STATE/path$i.json" "$OUT/$(echo "$label" | tr -c 'a-z0-9\n' _)-run$run-path$i.json"
        done
    done
done
echo "results: $OUT/matrix.txt (tsv: $OUT/matrix.tsv; linkem stats per path alongside)"
