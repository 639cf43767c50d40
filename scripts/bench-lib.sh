# Shared by the benchmark scripts (sourced): the release build, a scratch directory, softrnic
# daemons in or out of network namespaces, and two namespaces joined by a veth pair
# (198.18.1.1 and 198.18.1.2), all removed on exit. Needs root for the namespaces.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --release -q -p softrnic
bin=$PWD/target/release/softrnic
work=$(mktemp -d)
ns=(srnbench$$a srnbench$$b)
# Stops the namespaces' daemons and removes the namespaces (and so the veth pair).
hosts_down() {
    for n in "${ns[@]}"; do ip netns pids "$n" 2>/dev/null | xargs -r kill 2>/dev/null || true; ip netns del "$n" 2>/dev/null || true; done
    rm -f "$work/a.sock" "$work/b.sock"
}
cleanup() {
    pkill -f "softrnic-bench-$$" 2>/dev/null || true
    hosts_down
    rm -rf "$work"
}
trap cleanup EXIT

# `run_in NS CMD...`: in a namespace, or here for "-".
run_in() { local n=$1; shift; if [ "$n" = - ]; then "$@"; else ip netns exec "$n" "$@"; fi; }

# A daemon with one device: `daemon NAME NS [NETDEV]`; its socket is $work/NAME.sock. With
# WORKERS set, it runs that many data-path threads; with DEVICES, that many local devices; with
# SHARDS, that many shards for each.
daemon() {
    local name=$1 n=$2 dev=${3:-}
    local sock=$work/$name.sock
    run_in "$n" env SOFTRNIC_SOCKET="$sock" bash -c "exec -a softrnic-bench-$$ $bin daemon ${WORKERS:+--workers $WORKERS} ${SHARDS:+--shards $SHARDS}" >"$work/$name.log" 2>&1 &
    for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
    if [ -n "$dev" ]; then
        run_in "$n" env SOFTRNIC_SOCKET="$sock" "$bin" up --netdev "$dev" >/dev/null
    else
        for _ in $(seq "${DEVICES:-1}"); do SOFTRNIC_SOCKET="$sock" "$bin" up >/dev/null; done
    fi
}

# The two namespaces and their veth pair at MTU $1 (default 1500), with QUEUES receive and
# transmit queues a side (default 1); a daemon on each end (sockets $work/a.sock, b.sock).
two_hosts() {
    local mtu=${1:-1500} q=${QUEUES:-1}
    for n in "${ns[@]}"; do ip netns add "$n"; done
    ip link add srnb$$x numtxqueues "$q" numrxqueues "$q" type veth peer name srnb$$y \
        numtxqueues "$q" numrxqueues "$q"
    local ifs=(srnb$$x srnb$$y)
    for i in 0 1; do
        ip link set "${ifs[$i]}" netns "${ns[$i]}"
        ip -n "${ns[$i]}" link set lo up
        ip -n "${ns[$i]}" addr add "198.18.1.$((i + 1))/24" dev "${ifs[$i]}"
        ip -n "${ns[$i]}" link set "${ifs[$i]}" mtu "$mtu" up
        ip netns exec "${ns[$i]}" ethtool -K "${ifs[$i]}" tx off >/dev/null
    done
    sleep 2 # IPv6 duplicate address detection gives the link-local GID
    daemon a "${ns[0]}" "${ifs[0]}"
    daemon b "${ns[1]}" "${ifs[1]}"
}
