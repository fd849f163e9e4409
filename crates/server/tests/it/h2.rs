//! HTTP/2 callers that stall, on the gRPC port (issue #37, point 1): a stream that sends
//! its length prefix and then nothing was held for ever, with the buffer it announced
//! (4 MiB for the health service), 200 of them on one connection. Each call now has a
//! deadline, the health service a small message size, and a connection at most
//! `MAX_CONCURRENT_STREAMS` streams; a good caller is answered meanwhile. A connection
//! with no request in flight is closed after `idle_timeout`, and a listener at
//! `max_connections` closes a new connection at once and serves the ones it has.

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use bytes::Bytes;
use h2::client::SendRequest;
use support::{Backing, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod connections;

const POLICY: &str = "\
domain: h2
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 1000 }
";

const RLS: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
const HEALTH: &str = "/grpc.health.v1.Health/Check";

/// An HTTP/2 connection (prior knowledge, no TLS) to `addr`.
async fn connect(addr: SocketAddr) -> SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    client
}

/// A gRPC call to `path` that sends a length prefix announcing `announced` bytes and one
/// KiB of them, then nothing: the `grpc-status` it is answered with.
async fn stalled(
    client: &SendRequest<Bytes>,
    path: &str,
    announced: u32,
    timeout: Option<&str>,
) -> String {
    let mut request = grpc_call(path);
    if let Some(t) = timeout {
        request = request.header("grpc-timeout", t);
    }
    let mut client = client.clone().ready().await.unwrap();
    let (response, mut body) = client
        .send_request(request.body(()).unwrap(), false)
        .unwrap();
    let mut data = vec![0u8];
    data.extend(announced.to_be_bytes());
    data.extend(vec![0u8; 1024]);
    body.send_data(Bytes::from(data), false).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(10), response)
        .await
        .expect("answered within 10 s")
        .unwrap();
    // Kept open (not reset by a drop) until the answer is read.
    let status = grpc_status(response).await;
    drop(body);
    status
}

/// A gRPC call's request head, to `path`.
fn grpc_call(path: &str) -> http::request::Builder {
    http::Request::post(format!("http://spillway{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
}

/// The `grpc-status` of an answer: in its headers (trailers-only) or its trailers.
async fn grpc_status(response: http::Response<h2::RecvStream>) -> String {
    if let Some(s) = response.headers().get("grpc-status") {
        return s.to_str().unwrap().to_owned();
    }
    let mut body = response.into_body();
    while body.data().await.is_some() {}
    let trailers = body.trailers().await.unwrap().unwrap_or_default();
    trailers
        .get("grpc-status")
        .map_or("none".into(), |s| s.to_str().unwrap().to_owned())
}

#[tokio::test]
async fn stalled_grpc_streams_end_at_their_deadline_and_others_are_answered() {
    let s = Server::start_with("h2-stall", &[("h2.yaml", POLICY)], Backing::Memory, |c| {
        c.listen.grpc_request_timeout = Duration::from_millis(300);
    })
    .await;
    let grpc = s.running.grpc_addr;
    let client = connect(grpc).await;

    // The health service takes a small message: an announced 4 MiB is refused at once
    // (INVALID_ARGUMENT), not held until the deadline. (The round trip also brings the
    // server's SETTINGS, its stream limit among them, before the calls below.)
    assert_eq!(stalled(&client, HEALTH, 4 << 20, None).await, "3");

    // More stalled calls on one connection than it may have streams: each is ended at
    // its deadline (DEADLINE_EXCEEDED), so the ones waiting for a stream get one.
    let calls: Vec<_> = (0..120)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { stalled(&client, RLS, 60_000, None).await })
        })
        .collect();
    // Meanwhile a good caller, on its own connection, is answered.
    let answer = s
        .grpc()
        .await
        .should_rate_limit(support::request("h2", &[&[("user", "good")]]))
        .await
        .unwrap();
    assert_eq!(answer.into_inner().overall_code, 1, "OK");
    for call in calls {
        assert_eq!(call.await.unwrap(), "4", "DEADLINE_EXCEEDED");
    }

    let metrics = reqwest::get(format!("http://{}/metrics", s.running.http_addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let line = metrics
        .lines()
        .find(|l| l.starts_with("spillway_grpc_deadline_exceeded_total"))
        .unwrap_or_else(|| panic!("{metrics}"));
    let counted: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(counted >= 120.0, "{line}");
}

#[tokio::test]
async fn a_callers_shorter_grpc_timeout_is_its_deadline() {
    let s = Server::start_with("h2-timeout", &[("h2.yaml", POLICY)], Backing::Memory, |c| {
        c.listen.grpc_request_timeout = Duration::from_secs(3600);
    })
    .await;
    let client = connect(s.running.grpc_addr).await;
    assert_eq!(stalled(&client, RLS, 60_000, Some("200m")).await, "4");
}

/// A health check on `client`: its `grpc-status`.
async fn health(client: &SendRequest<Bytes>) -> String {
    let request = grpc_call(HEALTH).body(()).unwrap();
    let mut client = client.clone().ready().await.unwrap();
    let (response, mut body) = client.send_request(request, false).unwrap();
    // An empty HealthCheckRequest: a zero length prefix.
    body.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), true)
        .unwrap();
    grpc_status(response.await.unwrap()).await
}

/// `GRPC_UDS` (issue #48): the rate limit service and gRPC health on a Unix socket as
/// well as on TCP; a socket file left by an earlier run is replaced.
#[tokio::test]
async fn grpc_on_a_unix_socket() {
    let dir = support::tempdir("h2-uds");
    let path = dir.join("ratelimit.sock");
    // What a killed earlier run leaves: a socket file nobody listens on.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let s = Server::start_with("h2-uds", &[("h2.yaml", POLICY)], Backing::Memory, |c| {
        c.listen.grpc_uds = Some(path.clone());
    })
    .await;
    let stream = tokio::net::UnixStream::connect(&path).await.unwrap();
    let (client, connection) = h2::client::handshake(stream).await.unwrap();
    tokio::spawn(connection);
    let mut ready = client.ready().await.unwrap();
    let (response, mut body) = ready
        .send_request(grpc_call(RLS).body(()).unwrap(), false)
        .unwrap();
    let frame = grpc_frame(&support::request("h2", &[&[("user", "local")]]));
    body.send_data(Bytes::from(frame), true).unwrap();
    let response = response.await.unwrap();
    let mut data = Vec::new();
    let mut stream = response.into_body();
    while let Some(chunk) = stream.data().await {
        data.extend_from_slice(&chunk.unwrap());
    }
    let answer = <envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse as prost::Message>::decode(&data[5..]).unwrap();
    assert_eq!(answer.overall_code, 1, "OK, decided over the Unix socket");
    drop(s);
}

/// The frame of a gRPC message: its length prefix, then the message.
fn grpc_frame(message: &impl prost::Message) -> Vec<u8> {
    let body = message.encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend(u32::try_from(body.len()).unwrap().to_be_bytes());
    frame.extend(body);
    frame
}
