#!/usr/bin/env bash
# topo.sh: a two-namespace multipath lab for mptun.
#
#   topo.sh up     [--prefix P] [--paths N] [--rate R1,R2,...] [--ipv6] [--octet X]
#                  [--mtu M] [--tbf-latency L] [--kernel-mptcp]
#   topo.sh down   [--prefix P]
#   topo.sh status [--prefix P]
#   topo.sh plan   [--prefix P] [--paths N] [--octet X] [--ipv6]   (print the address plan only)
#
# Builds namespaces P-cli and P-srv joined by N routed veth pairs (cN in P-cli, sN in P-srv),
# optional tbf rate limits per path and direction, IPv4 always and IPv6 with --ipv6, and the
# policy routing that pins every packet from mptun's path-i address to veth i. The address plan
# is in netns-scripts/README.md; `plan` prints it for given options.
#
# Idempotent: `up` reconciles (creates what is missing, replaces addresses, routes, rules and
# qdiscs, removes paths beyond N) without disturbing what already runs in the namespaces, e.g.
# mptun's TUN devices. `down` deletes both namespaces and with them every interface in them. If
# `up` fails half-way and it created the namespaces, it deletes them again. Every command runs
# with `ip -n`/`tc -n` inside the lab's namespaces: the root namespace's interfaces and routes
# are never touched.
set -euo pipefail

usage() { sed -n '2,11s/^# \{0,1\}//p' "$0" >&2; exit 2; }
die() { echo "topo.sh: error: $*" >&2; exit 1; }
log() { echo "topo.sh: $*" >&2; }

CMD=${1:-}; [ -n "$CMD" ] || usage; shift
PREFIX=mpt PATHS=2 RATES="" IPV6=0 OCTET="" MTU=1500 TBF_LATENCY=50ms KERNEL_MPTCP=0
while [ $# -gt 0 ]; do
    case $1 in
        --prefix) PREFIX=${2:?}; shift 2 ;;
        --paths) PATHS=${2:?}; shift 2 ;;
        --rate) RATES=${2:?}; shift 2 ;;
        --ipv6) IPV6=1; shift ;;
        --octet) OCTET=${2:?}; shift 2 ;;
        --mtu) MTU=${2:?}; shift 2 ;;
        --tbf-latency) TBF_LATENCY=${2:?}; shift 2 ;;
        --kernel-mptcp) KERNEL_MPTCP=1; shift ;;
        -h|--help) usage ;;
        *) die "unknown option $1" ;;
    esac
done

[[ $PREFIX =~ ^[a-z0-9][a-z0-9-]{0,19}$ ]] || die "--prefix must be 1-20 of [a-z0-9-]"
[[ $PATHS =~ ^[0-9]+$ ]] && [ "$PATHS" -ge 1 ] && [ "$PATHS" -le 8 ] || die "--paths must be 1..8"
[[ $MTU =~ ^[0-9]+$ ]] && [ "$MTU" -ge 1280 ] && [ "$MTU" -le 65535 ] || die "--mtu must be 1280..65535"
# The second octet: given, or derived from the prefix so two labs with different prefixes get
# different subnets (100..199) and a capture tells them apart.
if [ -z "$OCTET" ]; then
    OCTET=$(( 100 + $(printf '%s' "$PREFIX" | cksum | cut -d' ' -f1) % 100 ))
fi
[[ $OCTET =~ ^[0-9]+$ ]] && [ "$OCTET" -ge 1 ] && [ "$OCTET" -le 254 ] || die "--octet must be 1..254"
CLI=$PREFIX-cli
SRV=$PREFIX-srv
HEX=$(printf '%x' "$OCTET")

# Address plan for path i (1-based):
v4_cli()  { echo "10.$OCTET.$1.1"; }          # client end of veth i (kernel of P-cli)
v4_srv()  { echo "10.$OCTET.$1.2"; }          # server end of veth i
v4_tnet() { echo "10.$OCTET.$((100 + $1)).0/24"; }  # mptun's path-i subnet behind a TUN in P-cli
v4_tgw()  { echo "10.$OCTET.$((100 + $1)).1"; }   # kernel side of that TUN
v4_mptun() { echo "10.$OCTET.$((100 + $1)).2"; }  # mptun's own address on path i
v6_cli()  { echo "fd00:$HEX:$1::1"; }
v6_srv()  { echo "fd00:$HEX:$1::2"; }
v6_tnet() { echo "fd00:$HEX:$((100 + $1))::/64"; }
v6_tgw()  { echo "fd00:$HEX:$((100 + $1))::1"; }
v6_mptun() { echo "fd00:$HEX:$((100 + $1))::2"; }
table()   { echo $((100 + $1)); }             # policy routing table of path i

ns_exists() { [ -e "/run/netns/$1" ]; }
# sysctl inside a namespace, without needing procps: /proc/sys/net follows the process's netns.
ns_sysctl() { ip netns exec "$1" sh -c "echo $3 > /proc/sys/$(echo "$2" | tr . /)"; }

# tbf wants a bucket of at least one packet, and enough to keep the rate at the kernel's timer
# granularity: ~4 ms of traffic, never below 2 MTUs.
parse_rate_bps() {
    local r=$1 n unit
    [[ $r =~ ^([0-9]+)([kmg]?)(bit|bps)?$ ]] || die "bad rate '$r' (e.g. 50mbit, 800kbit)"
    n=${BASH_REMATCH[1]}; unit=${BASH_REMATCH[2]}
    case $unit in k) n=$((n * 1000)) ;; m) n=$((n * 1000000)) ;; g) n=$((n * 1000000000)) ;; esac
    [ "${BASH_REMATCH[3]:-bit}" = bps ] && n=$((n * 8))
    [ "$n" -gt 0 ] || die "rate '$r' is zero"
    echo "$n"
}

set_rate() {  # NS DEV RATE
    local ns=$1 dev=$2 rate=$3 bps burst
    if [ -z "$rate" ] || [ "$rate" = "-" ]; then
        tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null || true
        return
    fi
    bps=$(parse_rate_bps "$rate")
    burst=$(( bps / 8 / 250 ))
    [ "$burst" -ge $((2 * MTU)) ] || burst=$((2 * MTU))
    tc -n "$ns" qdisc replace dev "$dev" root tbf rate "${bps}bit" burst "$burst" latency "$TBF_LATENCY"
}

print_plan() {
    echo "namespaces: $CLI (client; mptun runs here behind TUN devices) and $SRV (server)"
    for i in $(seq 1 "$PATHS"); do
        echo "path $i: veth c$i $(v4_cli "$i")/24 <-> s$i $(v4_srv "$i")/24;" \
            "mptun source $(v4_mptun "$i") on a TUN with $(v4_tgw "$i")/24; table $(table "$i")"
        if [ "$IPV6" = 1 ]; then
            echo "        veth c$i $(v6_cli "$i")/64 <-> s$i $(v6_srv "$i")/64;" \
                "mptun source $(v6_mptun "$i") on a TUN with $(v6_tgw "$i")/64"
        fi
    done
}

CREATED=()
on_error() {
    local rc=$?
    trap - EXIT
    if [ "$rc" != 0 ] && [ ${#CREATED[@]} -gt 0 ]; then
        log "failed (exit $rc); removing ${CREATED[*]}"
        for ns in "${CREATED[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
    fi
    exit "$rc"
}

up() {
    [ "$(id -u)" = 0 ] || die "needs root"
    command -v ip >/dev/null && command -v tc >/dev/null || die "needs iproute2 (ip, tc)"
    local rates=() i n
    if [ -n "$RATES" ]; then IFS=, read -r -a rates <<<"$RATES"; fi
    [ ${#rates[@]} -le "$PATHS" ] || die "--rate has ${#rates[@]} entries for $PATHS paths"
    trap on_error EXIT
    for ns in "$CLI" "$SRV"; do
        if ! ns_exists "$ns"; then
            ip netns add "$ns"
            CREATED+=("$ns")
        fi
        ip -n "$ns" link set lo up
    done
    # The client namespace routes between mptun's TUNs and the veths.
    ns_sysctl "$CLI" net.ipv4.ip_forward 1
    ns_sysctl "$CLI" net.ipv4.conf.all.rp_filter 0
    ns_sysctl "$CLI" net.ipv4.conf.default.rp_filter 0
    if [ "$IPV6" = 1 ]; then
        ns_sysctl "$CLI" net.ipv6.conf.all.forwarding 1
        ns_sysctl "$SRV" net.ipv6.conf.all.disable_ipv6 0
        ns_sysctl "$CLI" net.ipv6.conf.all.disable_ipv6 0
    fi
    # Paths left over from an earlier `up --paths` with a larger N.
    for dev in $(ip -n "$CLI" -o link show type veth | sed -n 's/^[0-9]*: \(c[0-9]*\)@.*/\1/p'); do
        n=${dev#c}
        if [ "$n" -gt "$PATHS" ]; then
            log "removing path $n"
            ip -n "$CLI" link del "$dev"
            ip -n "$CLI" rule del pref "$(table "$n")" 2>/dev/null || true
            ip -n "$CLI" -6 rule del pref "$(table "$n")" 2>/dev/null || true
            ip -n "$CLI" route flush table "$(table "$n")" 2>/dev/null || true
            ip -n "$SRV" route del "$(v4_tnet "$n")" 2>/dev/null || true
            ip -n "$SRV" -6 route del "$(v6_tnet "$n")" 2>/dev/null || true
        fi
    done
    for i in $(seq 1 "$PATHS"); do
        local c=c$i s=s$i t
        t=$(table "$i")
        if ! ip -n "$CLI" link show "$c" >/dev/null 2>&1; then
            ip -n "$CLI" link add "$c" type veth peer name "$s" netns "$SRV"
        fi
        ip -n "$CLI" link set "$c" mtu "$MTU" up
        ip -n "$SRV" link set "$s" mtu "$MTU" up
        ip -n "$CLI" addr replace "$(v4_cli "$i")/24" dev "$c"
        ip -n "$SRV" addr replace "$(v4_srv "$i")/24" dev "$s"
        # Replies to mptun's path-i addresses come back over path i.
        ip -n "$SRV" route replace "$(v4_tnet "$i")" via "$(v4_cli "$i")" dev "$s"
        # Whatever mptun sends from its path-i address leaves by veth i, whichever server
        # address it goes to: that is what makes a subflow a path.
        ip -n "$CLI" route replace default via "$(v4_srv "$i")" dev "$c" table "$t"
        ip -n "$CLI" rule del pref "$t" 2>/dev/null || true
        ip -n "$CLI" rule add pref "$t" from "$(v4_tnet "$i")" lookup "$t"
        if [ "$IPV6" = 1 ]; then
            ip -n "$CLI" addr replace "$(v6_cli "$i")/64" dev "$c" nodad
            ip -n "$SRV" addr replace "$(v6_srv "$i")/64" dev "$s" nodad
            ip -n "$SRV" -6 route replace "$(v6_tnet "$i")" via "$(v6_cli "$i")" dev "$s"
            ip -n "$CLI" -6 route replace default via "$(v6_srv "$i")" dev "$c" table "$t"
            ip -n "$CLI" -6 rule del pref "$t" 2>/dev/null || true
            ip -n "$CLI" -6 rule add pref "$t" from "$(v6_tnet "$i")" lookup "$t"
        fi
        # Rate i shapes both directions of path i (tbf on each veth's egress).
        set_rate "$CLI" "$c" "${rates[$((i - 1))]:-}"
        set_rate "$SRV" "$s" "${rates[$((i - 1))]:-}"
    done
    if [ "$KERNEL_MPTCP" = 1 ]; then
        # A kernel-to-kernel baseline between the veth addresses (as in crates/mptun-wire/tests/data/).
        ns_sysctl "$CLI" net.mptcp.enabled 1
        ns_sysctl "$SRV" net.mptcp.enabled 1
        ip -n "$CLI" mptcp endpoint flush
        ip -n "$SRV" mptcp endpoint flush
        ip -n "$CLI" mptcp limits set subflows "$PATHS" add_addr_accepted "$PATHS"
        ip -n "$SRV" mptcp limits set subflows "$PATHS" add_addr_accepted "$PATHS"
        for i in $(seq 2 "$PATHS"); do
            ip -n "$CLI" mptcp endpoint add "$(v4_cli "$i")" dev "c$i" subflow
            ip -n "$SRV" mptcp endpoint add "$(v4_srv "$i")" dev "s$i" signal
        done
    fi
    trap - EXIT
    print_plan
}

down() {
    [ "$(id -u)" = 0 ] || die "needs root"
    for ns in "$CLI" "$SRV"; do
        if ns_exists "$ns"; then
            ip netns del "$ns"
            log "deleted $ns"
        fi
    done
}

status() {
    for ns in "$CLI" "$SRV"; do
        if ! ns_exists "$ns"; then echo "$ns: absent"; continue; fi
        echo "== $ns"
        ip -n "$ns" -br addr
        ip -n "$ns" route
        [ "$ns" = "$CLI" ] && ip -n "$ns" rule
        tc -n "$ns" qdisc show | grep -v 'noqueue' || true
    done
}

case $CMD in
    up) up ;;
    down) down ;;
    status) status ;;
    plan) print_plan ;;
    *) usage ;;
esac
