# Shared helpers for the netns lab scripts. Source it: `. "$(dirname "$0")/../lib.sh"`.
#
# Every namespace, interface and process a script creates is recorded so `lab_cleanup` (run from
# an EXIT trap) removes exactly those and nothing else: the root namespace's routes and
# interfaces are never touched.

LAB_NAMESPACES=()

lab_log() { printf '%s\n' "$*" >&2; }
lab_die() { lab_log "error: $*"; exit 1; }

lab_require_root() {
    [ "$(id -u)" = 0 ] || lab_die "needs root (network namespaces)"
    command -v ip >/dev/null || lab_die "needs iproute2 (ip)"
}

# lab_ns_create NAME: a fresh namespace with loopback up. Fails if NAME exists, so two runs
# never share a namespace by accident.
lab_ns_create() {
    local ns=$1
    if ip netns list | awk '{print $1}' | grep -qx "$ns"; then
        lab_die "namespace $ns already exists (another run? remove it with: ip netns del $ns)"
    fi
    ip netns add "$ns" || lab_die "ip netns add $ns"
    LAB_NAMESPACES+=("$ns")
    ip -n "$ns" link set lo up
}

lab_ns_delete() {
    local ns=$1
    ip netns del "$ns" 2>/dev/null || true
}

# lab_offloads_off NS DEV: wire-sized frames, checksums computed in software. linkem forwards
# frames one by one through AF_PACKET; a 64 KB TSO super-frame would not fit the egress and a
# CHECKSUM_PARTIAL frame would arrive with a half-computed checksum.
lab_offloads_off() {
    local ns=$1 dev=$2
    if command -v ethtool >/dev/null; then
        ip netns exec "$ns" ethtool -K "$dev" tso off gso off gro off tx off rx off >/dev/null 2>&1 ||
            ip netns exec "$ns" ethtool -K "$dev" tso off gso off gro off tx off >/dev/null 2>&1 ||
            lab_log "warning: could not turn offloads off on $ns/$dev"
    else
        lab_log "warning: ethtool missing; offloads stay on for $ns/$dev (linkem counts oversize frames)"
    fi
}

# lab_veth NS1 DEV1 NS2 DEV2: a veth pair between two namespaces, both ends up, offloads off.
lab_veth() {
    local ns1=$1 dev1=$2 ns2=$3 dev2=$4
    ip link add "$dev1" netns "$ns1" type veth peer name "$dev2" netns "$ns2" ||
        lab_die "veth $ns1/$dev1 <-> $ns2/$dev2"
    ip -n "$ns1" link set "$dev1" up
    ip -n "$ns2" link set "$dev2" up
    lab_offloads_off "$ns1" "$dev1"
    lab_offloads_off "$ns2" "$dev2"
}

# lab_wait_for CMD... : retries CMD every 50 ms for up to LAB_WAIT_S (default 5) seconds.
lab_wait_for() {
    local deadline=$((SECONDS + ${LAB_WAIT_S:-5}))
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.05
    done
}

# lab_stop_pid PID: TERM, then KILL after 5 s; only for processes this script started.
lab_stop_pid() {
    local pid=$1 i
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || return 0
    for i in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.05
    done
    kill -KILL "$pid" 2>/dev/null || true
}

lab_cleanup() {
    local ns
    for ns in "${LAB_NAMESPACES[@]}"; do
        lab_ns_delete "$ns"
    done
    LAB_NAMESPACES=()
}

# lab_nstat NS COUNTER: the absolute value of a kernel counter in NS (0 if absent).
lab_nstat() {
    local v
    v=$(ip netns exec "$1" nstat -asz "$2" 2>/dev/null | awk -v c="$2" '$1 == c {print $2}')
    echo "${v:-0}"
}
