//! A connection's life on the listeners: closed when idle, refused at the cap, sent away at its age.

use super::*;

/// Reads `stream` until the server closes it (or 10 s pass: a failure).
async fn closed_by_server(stream: &mut tokio::net::TcpStream) {
    let mut buf = [0u8; 4096];
    let read_to_end = async { while !matches!(stream.read(&mut buf).await, Ok(0) | Err(_)) {} };
    tokio::time::timeout(Duration::from_secs(10), read_to_end)
        .await
        .expect("the server closed the connection within 10 s");
}

#[tokio::test]
async fn a_connection_with_no_request_in_flight_is_closed_after_the_idle_timeout() {
    let idle = Duration::from_millis(300);
    let s = Server::start_with("h2-idle", &[("h2.yaml", POLICY)], Backing::Memory, |c| {
        c.listen.idle_timeout = idle;
        c.listen.grpc_request_timeout = Duration::from_millis(600);
    })
    .await;

    // HTTP/2 that sends nothing after its handshake: GOAWAY, then closed.
    let started = Instant::now();
    let tcp = tokio::net::TcpStream::connect(s.running.grpc_addr)
        .await
        .unwrap();
    let (_client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), connection)
        .await
        .expect("closed within 10 s")
        .unwrap();
    assert!(started.elapsed() >= idle, "{:?}", started.elapsed());

    // HTTP/1 kept alive after an answer: closed as well.
    let mut http1 = tokio::net::TcpStream::connect(s.running.http_addr)
        .await
        .unwrap();
    let host = s.running.http_addr;
    http1
        .write_all(format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let answered = Instant::now();
    closed_by_server(&mut http1).await;
    assert!(answered.elapsed() >= idle, "{:?}", answered.elapsed());

    // A request in flight (a stalled body, ended by its 600 ms deadline) keeps its
    // connection: after it, another call on the same connection is answered, which it
    // could not be after a GOAWAY.
    let tcp = tokio::net::TcpStream::connect(s.running.grpc_addr)
        .await
        .unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    let connection = tokio::spawn(connection);
    assert_eq!(stalled(&client, RLS, 60_000, None).await, "4");
    assert_eq!(health(&client).await, "0");
    // Then, idle, it is closed too (by the server: the client is still held).
    tokio::time::timeout(Duration::from_secs(10), connection)
        .await
        .expect("closed within 10 s")
        .unwrap()
        .unwrap();
    drop(client);

    let metrics = reqwest::get(format!("http://{}/metrics", s.running.http_addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let closed = |listener: &str| -> f64 {
        let name = format!("spillway_connections_idle_closed_total{{listener=\"{listener}\"}}");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&name)?.trim().parse().ok())
            .unwrap_or(0.0)
    };
    assert!(closed("grpc") >= 2.0, "{metrics}");
    assert!(closed("http") >= 1.0, "{metrics}");
}

#[tokio::test]
async fn at_its_connection_cap_a_listener_closes_new_connections_and_serves_its_own() {
    let s = Server::start_with("h2-cap", &[("h2.yaml", POLICY)], Backing::Memory, |c| {
        c.listen.max_connections = Some(3);
    })
    .await;
    let grpc = s.running.grpc_addr;
    // Three connections: the cap. One is a caller's; two only hold their place.
    let caller = connect(grpc).await;
    assert_eq!(health(&caller).await, "0");
    let mut holders = Vec::new();
    for _ in 0..2 {
        let holder = connect(grpc).await;
        assert_eq!(health(&holder).await, "0");
        holders.push(holder);
    }
    // A fourth is closed at once, whatever it sends.
    let mut fourth = tokio::net::TcpStream::connect(grpc).await.unwrap();
    let _ = fourth.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await;
    closed_by_server(&mut fourth).await;
    // The caller's connection is still answered.
    assert_eq!(health(&caller).await, "0");

    let metrics = reqwest::get(format!("http://{}/metrics", s.running.http_addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let refused = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("spillway_connections_refused_total{listener=\"grpc\"}")?
                .trim()
                .parse::<f64>()
                .ok()
        })
        .unwrap_or(0.0);
    assert!(refused >= 1.0, "{metrics}");

    // When a holder leaves, its place is a new caller's (once the server has seen it
    // go: a connection refused meanwhile is simply tried again).
    drop(holders);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let tcp = tokio::net::TcpStream::connect(grpc).await.unwrap();
        if let Ok((client, connection)) = h2::client::handshake(tcp).await {
            tokio::spawn(connection);
            if let Ok(Ok(status)) = tokio::time::timeout(
                Duration::from_secs(2),
                tokio::spawn(async move { health(&client).await }),
            )
            .await
            {
                assert_eq!(status, "0");
                break;
            }
        }
        assert!(Instant::now() < deadline, "no place freed within 10 s");
        tokio::task::yield_now().await;
    }
}

/// `GRPC_MAX_CONNECTION_AGE` (issue #48): a busy client's connection, past its age (less
/// up to a tenth), is sent a GOAWAY, so that its next calls open a new connection (and
/// reach a replica added since); the call it had in flight, its body half sent, is
/// answered within the grace; then the connection closes.
#[tokio::test]
async fn a_connection_past_its_age_goes_away_and_its_call_in_flight_finishes() {
    let s = Server::start_with("h2-age", &[("h2.yaml", POLICY)], Backing::Memory, |c| {
        c.listen.max_connection_age = Duration::from_secs(1);
        c.listen.max_connection_age_grace = Duration::from_secs(20);
        c.listen.grpc_request_timeout = Duration::from_secs(30);
    })
    .await;
    let tcp = tokio::net::TcpStream::connect(s.running.grpc_addr)
        .await
        .unwrap();
    let opened = Instant::now();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    let closed = tokio::spawn(connection);

    // A call in flight: its headers and the first bytes of its message sent.
    let frame = grpc_frame(&support::request("h2", &[&[("user", "busy")]]));
    let mut ready = client.clone().ready().await.unwrap();
    let (response, mut body) = ready
        .send_request(grpc_call(RLS).body(()).unwrap(), false)
        .unwrap();
    body.send_data(Bytes::copy_from_slice(&frame[..3]), false)
        .unwrap();

    // Other calls are answered until the age; then a new stream is refused as the
    // connection goes away.
    let went_away = loop {
        assert!(
            opened.elapsed() < Duration::from_secs(10),
            "no GOAWAY within 10 s of an age of 1 s"
        );
        let refused = match client.clone().ready().await {
            Err(e) => Some(e),
            Ok(mut c) => match c.send_request(grpc_call(HEALTH).body(()).unwrap(), true) {
                Err(e) => Some(e),
                Ok((answer, _)) => answer.await.err(),
            },
        };
        if let Some(e) = refused {
            break e;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        went_away.is_go_away() || went_away.reason() == Some(h2::Reason::REFUSED_STREAM),
        "{went_away:?}"
    );
    let age = opened.elapsed();
    assert!(
        age >= Duration::from_millis(900),
        "asked to go away after {age:?}"
    );

    // The call in flight finishes: the rest of its message, then its answer.
    body.send_data(Bytes::copy_from_slice(&frame[3..]), true)
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(10), response)
        .await
        .expect("answered within the grace")
        .unwrap();
    assert_eq!(
        grpc_status(response).await,
        "0",
        "the call in flight was answered OK"
    );
    // Nothing left in flight: the connection closes well within the grace.
    tokio::time::timeout(Duration::from_secs(10), closed)
        .await
        .expect("the connection closed")
        .unwrap()
        .ok();
}
