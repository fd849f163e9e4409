# Starts the real Redis servers the tests need, on free loopback ports (never 6379),
# and stops them by PID when the calling script exits, whatever its exit status.
# Sourced by scripts/test. Exports for the tests:
#   SPILLWAY_TEST_REDIS     redis://127.0.0.1:PORT                 a standalone server
#   SPILLWAY_TEST_CLUSTER   redis+cluster://127.0.0.1:P1,…         3 masters + 3 replicas
#   SPILLWAY_TEST_SENTINEL  redis+sentinel://127.0.0.1:PORT/spillway   one sentinel watching the standalone server

REDIS_DIR=""
REDIS_PIDS=()
REDIS_PORTS=()

redis_stop() {
    local pid
    for pid in "${REDIS_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${REDIS_PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    done
    REDIS_PIDS=()
    [ -n "$REDIS_DIR" ] && rm -rf "$REDIS_DIR"
}

redis_install() {
    command -v redis-server >/dev/null && return
    echo "redis-server is missing: installing it with apt-get"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Prints a base port B such that B..B+count-1 and their cluster bus ports (+10000) are free.
free_ports() {
    local count=$1 base i busy
    for _ in $(seq 100); do
        # Below 22,760: a cluster node's bus (port + 10000) stays under Linux's
        # ephemeral ports (32768+), which an outgoing connection may take between this
        # check and the node's bind (a node that cannot bind its bus never starts).
        base=$((20000 + RANDOM % 2750))
        busy=0
        for ((i = 0; i < count; i++)); do
            if port_in_use $((base + i)) || port_in_use $((base + i + 10000)); then busy=1; break; fi
        done
        [ $busy -eq 0 ] && { echo "$base"; return; }
    done
    echo "no free ports found" >&2
    return 1
}

wait_for() { # wait_for DESCRIPTION COMMAND...: up to 30 s
    local what=$1; shift
    for _ in $(seq 300); do "$@" >/dev/null 2>&1 && return; sleep 0.1; done
    echo "timed out waiting for $what" >&2
    return 1
}

redis_node() { # redis_node PORT [extra args]: starts one server in the background
    local port=$1; shift
    mkdir -p "$REDIS_DIR/$port"
    REDIS_PORTS+=("$port")
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$REDIS_DIR/$port" --logfile "$REDIS_DIR/$port/log" "$@" &
    REDIS_PIDS+=($!)
}

redis_start() {
    redis_install
    trap redis_stop EXIT
    REDIS_DIR=$(mktemp -d /tmp/spillway-redis.XXXXXX)
    local base port i nodes=()
    base=$(free_ports 8)

    # The standalone server, and a sentinel watching it as master `spillway`.
    local single=$((base + 6)) sentinel=$((base + 7))
    redis_node "$single"
    wait_for "redis-server on $single" redis-cli -p "$single" ping
    mkdir -p "$REDIS_DIR/$sentinel"
    printf 'port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor spillway 127.0.0.1 %s 1\n' \
        "$sentinel" "$REDIS_DIR/$sentinel" "$single" >"$REDIS_DIR/$sentinel/sentinel.conf"
    redis-server "$REDIS_DIR/$sentinel/sentinel.conf" --sentinel \
        --logfile "$REDIS_DIR/$sentinel/log" &
    REDIS_PIDS+=($!)

    # Six cluster nodes: three masters, one replica each.
    for ((i = 0; i < 6; i++)); do
        port=$((base + i))
        redis_node "$port" --cluster-enabled yes --cluster-config-file nodes.conf \
            --cluster-node-timeout 5000
        nodes+=("127.0.0.1:$port")
    done
    for port in $(seq "$base" $((base + 5))); do
        wait_for "cluster node on $port" redis-cli -p "$port" ping
    done
    redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >/dev/null
    for port in $(seq "$base" $((base + 5))); do
        wait_for "cluster_state:ok on $port" \
            sh -c "redis-cli -p $port cluster info | grep -q cluster_state:ok"
    done
    wait_for "sentinel on $sentinel" \
        sh -c "redis-cli -p $sentinel sentinel get-master-addr-by-name spillway | grep -q $single"

    export SPILLWAY_TEST_REDIS="redis://127.0.0.1:$single"
    export SPILLWAY_TEST_CLUSTER="redis+cluster://$(IFS=,; echo "${nodes[*]}")"
    export SPILLWAY_TEST_SENTINEL="redis+sentinel://127.0.0.1:$sentinel/spillway"
    echo "redis: standalone $single, sentinel $sentinel, cluster ${base}-$((base + 5)) (pids ${REDIS_PIDS[*]})"
}

# Fails if any key on the test servers has no TTL (PTTL -1). Keys that expire while
# being checked answer -2 and are fine.
redis_check_ttls() {
    local port key ttl checked=0 bad=0
    for port in "${REDIS_PORTS[@]}"; do
        redis-cli -p "$port" role | head -1 | grep -q master || continue
        while IFS= read -r key; do
            ttl=$(redis-cli -p "$port" pttl "$key")
            checked=$((checked + 1))
            if [ "$ttl" = "-1" ]; then
                echo "no TTL: $key (port $port)" >&2
                bad=$((bad + 1))
            fi
        done < <(redis-cli -p "$port" --scan)
    done
    echo "$checked keys checked, $bad without a TTL"
    [ "$bad" -eq 0 ]
}
