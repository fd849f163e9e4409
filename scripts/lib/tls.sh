# Makes the test certificates for the TLS Redis servers, with Debian's openssl
# (installed with apt-get if missing). Sourced by scripts/lib/redis.sh.
#   tls_certs DIR   writes into DIR:
#     ca.crt, ca.key          a test CA
#     server.crt, server.key  a server certificate from it, SANs 127.0.0.1 and localhost (EC P-256)
#     client.crt, client.key  a client certificate from it, key as PKCS#1 `RSA PRIVATE KEY`
#                             (the form Envoy Gateway and many operators hand out)
# Exports SPILLWAY_TEST_TLS_DIR=DIR for the tests.

tls_install() {
    command -v openssl >/dev/null && return
    echo "openssl is missing: installing it with apt-get"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq openssl >/dev/null
}

tls_certs() {
    local dir=$1
    tls_install
    mkdir -p "$dir"
    (
        cd "$dir"
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
            -subj "/CN=Spillway test CA" -keyout ca.key -out ca.crt 2>/dev/null
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
            -subj "/CN=localhost" -keyout server.key -out server.csr 2>/dev/null
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >server.ext
        openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
            -extfile server.ext -out server.crt 2>/dev/null
        openssl genrsa -traditional -out client.key 2048 2>/dev/null
        openssl req -new -key client.key -subj "/CN=spillway-client" -out client.csr 2>/dev/null
        printf 'extendedKeyUsage=clientAuth\n' >client.ext
        openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
            -extfile client.ext -out client.crt 2>/dev/null
        rm -f ./*.csr ./*.ext ca.srl
    )
    export SPILLWAY_TEST_TLS_DIR="$dir"
}
