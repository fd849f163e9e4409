# Installs Debian's libfaketime with apt-get if it is missing, for the tests that set
# Spillway's wall clock (crates/cli/tests/it/support/clock.rs): a calendar period's end
# behind Envoy, a replica's clock ahead of another's, and the tests that count in an
# hour window, started at the start of the next hour. Sourced by scripts/test. Exports:
#   SPILLWAY_TEST_FAKETIME   the library to preload: libfaketimeMT.so.1, the variant
#                            that takes a lock around each reading. The plain
#                            libfaketime.so.1, read by many threads at once with its
#                            clock in a file (FAKETIME_NO_CACHE), now and then answered
#                            the real time: 150 requests at once on an hour window of
#                            100 admitted 101 or 102 in 5 runs of 12 (two windows).

faketime_install() {
    local lib=/usr/lib/$(uname -m)-linux-gnu/faketime/libfaketimeMT.so.1
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
