#!/usr/bin/env bash
# Lab topology: client ns — linkem ns — server ns, N parallel paths, each an emulated link.
#
#   topo.sh up   --name P [--path SPEC]... [--paths N] [--linkem BIN] [--state DIR]
#                [--mptcp-family 4|6] [--no-mptcp] [--linkem-args "ARGS"] [--bridge] [--ends LIST]
#   topo.sh down --name P [--state DIR]
#   topo.sh ctl  --name P --index I COMMAND...      (e.g. `set a2b rate=3mbit`, `down both`, `stats`)
#
# SPEC is netem-style and applies to both directions (`rate=10mbit,delay=20ms,limit=30`), or
# `UP|DOWN` for client→server and server→client separately. Namespaces are P-cli, P-mid, P-srv.
# Path i (1-based): client c$i 10.0.i.1/24 dead:beef:i::1/64 — mid l$i | linkem | r$i — server
# s$i 10.0.i.2/24 dead:beef:i::2/64. linkem bridges at layer 2, so a path is one subnet.
# Kernel MPTCP: limits allow N-1 extra subflows; the client has a `subflow` endpoint on paths
# 2..N and joins the server's path-1 address from there, routed over that path (as simult_flows).
# --bridge replaces linkem by a plain kernel bridge (a baseline for linkem's own cost).
# --ends HEAD-TAIL,... places path i's client end c$i in namespace P-HEAD and its server end s$i
# in P-TAIL (cli, srv or a router r1..r8: a namespace that forwards, nothing more), so that paths
# chain into multi-link routes; the default is cli-srv for every path. The routes across routers
# are the caller's (`mptun lab run` sets them); with routers, the kernel's MPTCP setup is not made
# (--no-mptcp is required).
# State (pids, control sockets, logs, final stats JSON per path) lives in DIR
# (default /tmp/mptun-lab/P).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib.sh
. "$HERE/../lib.sh"

usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

ACTION=${1:-}
[ -n "$ACTION" ] || usage
shift
NAME="" PATHS=0 LINKEM="" STATE="" FAMILY=4 MPTCP=1 LINKEM_ARGS="" INDEX="" BRIDGE=0 ENDS=""
SPECS=()
while [ $# -gt 0 ]; do
    case $1 in
    --name) NAME=$2; shift 2 ;;
    --path) SPECS+=("$2"); shift 2 ;;
    --paths) PATHS=$2; shift 2 ;;
    --linkem) LINKEM=$2; shift 2 ;;
    --state) STATE=$2; shift 2 ;;
    --mptcp-family) FAMILY=$2; shift 2 ;;
    --no-mptcp) MPTCP=0; shift ;;
    --linkem-args) LINKEM_ARGS=$2; shift 2 ;;
    --index) INDEX=$2; shift 2 ;;
    --bridge) BRIDGE=1; shift ;;
    --ends) ENDS=$2; shift 2 ;;
    -h | --help) usage ;;
    *) break ;;
    esac
done
[ -n "$NAME" ] || lab_die "--name is required"
STATE=${STATE:-/tmp/mptun-lab/$NAME}
CLI=$NAME-cli MID=$NAME-mid SRV=$NAME-srv

find_linkem() {
    if [ -n "$LINKEM" ]; then echo "$LINKEM"; return; fi
    local t
    for t in "${CARGO_TARGET_DIR:-}" "$HERE/../../target"; do
        [ -n "$t" ] || continue
        for p in release debug; do
            [ -x "$t/$p/linkem" ] && { echo "$t/$p/linkem"; return; }
        done
    done
    command -v linkem || lab_die "linkem binary not found: build it (cargo build -p linkem --release) or pass --linkem"
}

do_up() {
    lab_require_root
    [ "$PATHS" -gt 0 ] || PATHS=${#SPECS[@]}
    [ "$PATHS" -gt 0 ] || PATHS=1
    [ "$PATHS" -le 8 ] || lab_die "at most 8 paths"
    [ "$BRIDGE" = 1 ] || LINKEM=$(find_linkem)
    mkdir -p "$STATE"
    # On failure, leave nothing behind (but never remove namespaces another run owns).
    UP_OK=0
    STARTED=()
    trap 'if [ "$UP_OK" != 1 ]; then lab_log "topology setup failed; cleaning up"; stop_started; lab_cleanup; fi' EXIT
    # Each path's ends: HEAD (its c$i) and TAIL (its s$i), P-cli and P-srv unless --ends says.
    local heads=() tails=() routers=() e
    IFS=, read -r -a e <<<"$ENDS"
    for i in $(seq "$PATHS"); do
        local pair=${e[$((i - 1))]:-cli-srv} h t
        h=${pair%%-*} t=${pair#*-}
        for n in "$h" "$t"; do
            [[ $n =~ ^(cli|srv|r[1-8])$ ]] || lab_die "--ends: path $i's end '$n' is not cli, srv or r1..r8"
            [[ $n == r* ]] && [[ " ${routers[*]} " != *" $n "* ]] && routers+=("$n")
        done
        [ "$h" != "$t" ] && [ "$h" != srv ] && [ "$t" != cli ] || lab_die "--ends: path $i runs $h to $t"
        heads+=("$NAME-$h") tails+=("$NAME-$t")
    done
    [ ${#routers[@]} = 0 ] || [ "$MPTCP" = 0 ] || lab_die "--ends with routers needs --no-mptcp"
    for ns in "$CLI" "$MID" "$SRV"; do lab_ns_create "$ns"; done
    for r in "${routers[@]}"; do
        lab_ns_create "$NAME-$r"
        ip netns exec "$NAME-$r" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 \
            net.ipv4.conf.default.rp_filter=0
    done
    echo "$CLI $MID $SRV ${routers[*]/#/$NAME-}" >"$STATE/namespaces"
    for i in $(seq "$PATHS"); do
        local head=${heads[$((i - 1))]} tail=${tails[$((i - 1))]}
        lab_veth "$head" "c$i" "$MID" "l$i"
        lab_veth "$MID" "r$i" "$tail" "s$i"
        # The middle namespace is a wire: no addresses, no IPv6 chatter of its own.
        for d in "l$i" "r$i"; do
            ip netns exec "$MID" sysctl -qw "net.ipv6.conf.$d.disable_ipv6=1"
        done
        ip -n "$head" addr add "10.0.$i.1/24" dev "c$i"
        ip -n "$tail" addr add "10.0.$i.2/24" dev "s$i"
        ip -n "$head" addr add "dead:beef:$i::1/64" dev "c$i" nodad
        ip -n "$tail" addr add "dead:beef:$i::2/64" dev "s$i" nodad
    done
    for ns in "$CLI" "$SRV"; do
        ip netns exec "$ns" sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
    done
    if [ "$MPTCP" = 1 ]; then
        for ns in "$CLI" "$SRV"; do
            ip netns exec "$ns" sysctl -qw net.mptcp.enabled=1
            ip -n "$ns" mptcp endpoint flush
            ip -n "$ns" mptcp limits set subflows $((PATHS - 1)) add_addr_accepted 0
        done
        # simult_flows style: the server keeps one address (path 1's); the client opens one extra
        # subflow per path from its own address there. Source routing plus a permanent neighbour
        # entry for the server's address on that path's interface keep each subflow on its path,
        # in IPv4 and IPv6 alike (IPv6 would not resolve an off-interface address by ND).
        for i in $(seq 2 "$PATHS"); do
            local mac
            mac=$(ip -n "$SRV" -br link show "s$i" | awk '{print $3}')
            ip -n "$CLI" rule add from "10.0.$i.1" table $((100 + i))
            ip -n "$CLI" route add default dev "c$i" table $((100 + i))
            ip -n "$CLI" -6 rule add from "dead:beef:$i::1" table $((100 + i))
            ip -n "$CLI" -6 route add default dev "c$i" table $((100 + i))
            ip -n "$CLI" neigh replace 10.0.1.2 lladdr "$mac" dev "c$i" nud permanent
            ip -n "$CLI" -6 neigh replace dead:beef:1::2 lladdr "$mac" dev "c$i" nud permanent
            if [ "$FAMILY" = 6 ]; then addr="dead:beef:$i::1"; else addr="10.0.$i.1"; fi
            ip -n "$CLI" mptcp endpoint add "$addr" dev "c$i" subflow
        done
    fi
    local last=""
    for i in $(seq "$PATHS"); do
        local spec=${SPECS[$((i - 1))]:-$last}
        last=$spec
        local up=$spec down=$spec
        if [[ $spec == *"|"* ]]; then up=${spec%%|*}; down=${spec#*|}; fi
        rm -f "$STATE/path$i.sock" "$STATE/path$i.json"
        if [ "$BRIDGE" = 1 ]; then
            ip -n "$MID" link add "br$i" type bridge
            ip -n "$MID" link set "l$i" master "br$i"
            ip -n "$MID" link set "r$i" master "br$i"
            ip -n "$MID" link set "br$i" up
            echo "path $i: kernel bridge (no emulation)"
            continue
        fi
        # shellcheck disable=SC2086
        ip netns exec "$MID" "$LINKEM" --a "l$i" --b "r$i" --a2b "$up" --b2a "$down" --seed "$i" \
            --control "$STATE/path$i.sock" --stats-json "$STATE/path$i.json" $LINKEM_ARGS \
            >"$STATE/linkem$i.log" 2>&1 &
        STARTED+=($!)
        echo $! >"$STATE/linkem$i.pid"
        if ! LAB_WAIT_S=10 lab_wait_for grep -q "linkem: ready" "$STATE/linkem$i.log"; then
            cat "$STATE/linkem$i.log" >&2
            false
        fi
        echo "path $i: a2b(up)=[$up] b2a(down)=[$down]"
    done
    echo "$PATHS" >"$STATE/paths"
    UP_OK=1
    # Resolve neighbours once so the first measured packet does not pay for ARP/ND.
    for i in $(seq "$PATHS"); do
        ip netns exec "${heads[$((i - 1))]}" ping -c1 -W2 "10.0.$i.2" >/dev/null 2>&1 || true
    done
    echo "topology $NAME up: $CLI / $MID / $SRV${routers[*]:+ / routers ${routers[*]}}, $PATHS path(s), state in $STATE"
}

# Only the linkem processes this invocation started (a failed `up` must not stop another run's).
stop_started() {
    local pid
    for pid in "${STARTED[@]}"; do lab_stop_pid "$pid"; done
}

stop_linkems() {
    local f
    for f in "$STATE"/linkem*.pid; do
        [ -e "$f" ] || continue
        lab_stop_pid "$(cat "$f")"
        rm -f "$f"
    done
}

do_down() {
    stop_linkems
    for ns in "$CLI" "$MID" "$SRV"; do lab_ns_delete "$ns"; done
    # Routers (--ends), whether or not the state directory survived.
    for n in 1 2 3 4 5 6 7 8; do lab_ns_delete "$NAME-r$n"; done
    local f
    for f in "$STATE"/path*.json; do
        [ -e "$f" ] && echo "stats: $f"
    done
    return 0
}

do_ctl() {
    [ -n "$INDEX" ] || lab_die "--index is required"
    "$(find_linkem)" ctl "$STATE/path$INDEX.sock" "$@"
}

case $ACTION in
up) do_up ;;
down) do_down ;;
ctl) do_ctl "$@" ;;
*) usage ;;
esac
