# Installs Debian's libfaketime with apt-get if it is missing, for the test that runs a
# calendar period's end behind Envoy (crates/cli/tests/it/envoy_metering.rs): Spillway is
# started with its wall clock set a few seconds before a month ends, and the month
# rolls over during the test. Sourced by scripts/test. Exports:
#   SPILLWAY_TEST_FAKETIME   the library to preload (libfaketime.so.1)

faketime_install() {
    local lib=/usr/lib/$(uname -m)-linux-gnu/faketime/libfaketime.so.1
    if [ ! -e "$lib" ]; then
        echo "libfaketime is missing: installing it (faketime) with apt-get"
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq faketime >/dev/null
    fi
    [ -e "$lib" ]
    export SPILLWAY_TEST_FAKETIME="$lib"
}
