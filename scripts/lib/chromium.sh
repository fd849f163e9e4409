# Installs Debian's Chromium and its WebDriver (chromium, chromium-driver) with apt-get
# if chromedriver is missing, for the browser test of the console page
# (crates/cli/tests/it/ui.rs). Sourced by scripts/test. Exports:
#   SPILLWAY_TEST_CHROMEDRIVER   the chromedriver binary
#   SPILLWAY_TEST_CHROMIUM       the browser it drives

chromium_install() {
    if ! command -v chromedriver >/dev/null || ! command -v chromium >/dev/null; then
        echo "chromium / chromium-driver are missing: installing them with apt-get"
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium chromium-driver >/dev/null
    fi
    chromedriver --version >/dev/null
    export SPILLWAY_TEST_CHROMEDRIVER="$(command -v chromedriver)"
    export SPILLWAY_TEST_CHROMIUM="$(command -v chromium)"
}
