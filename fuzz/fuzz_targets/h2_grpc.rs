//! The gRPC port's HTTP/2 and gRPC framing, driven through a real connection: a whole
//! service (memory store) listens on loopback; each input is what a client sends after
//! the HTTP/2 preface (frames, HPACK, gRPC length prefixes and messages, or garbage),
//! then the client half-closes and reads until the server closes. A panic anywhere in
//! the service (its tasks included) aborts the process: a crash libFuzzer keeps.

#![no_main]

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Target {
    runtime: tokio::runtime::Runtime,
    grpc: SocketAddr,
}

fn target() -> &'static Target {
    static TARGET: OnceLock<Target> = OnceLock::new();
    TARGET.get_or_init(|| {
        // A panic on any thread is a finding, not a task that quietly ends.
        let report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            report(info);
            std::process::abort();
        }));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let dir = std::env::temp_dir().join(format!("spillway-fuzz-h2-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        std::fs::write(
            dir.join("fuzz.yaml"),
            "domain: fuzz\ndescriptors:\n  - key: user\n    rate_limit: { unit: second, requests_per_unit: 1000000 }\n",
        )
        .expect("a policy file");
        let mut config = spillway_server::Config::ephemeral(&dir);
        config.rules.watch = false;
        config.admin.addr = None;
        config.listen.grpc_request_timeout = Duration::from_millis(50);
        config.listen.header_read_timeout = Duration::from_millis(100);
        config.listen.idle_timeout = Duration::from_millis(100);
        let running = runtime.block_on(async {
            let app = spillway_server::App::builder(config).build().await.expect("a service");
            app.start().await.expect("listening")
        });
        let grpc = running.grpc_addr;
        std::mem::forget(running);
        Target { runtime, grpc }
    })
}

fuzz_target!(|data: &[u8]| {
    let t = target();
    t.runtime.block_on(async {
        let Ok(mut conn) = tokio::net::TcpStream::connect(t.grpc).await else {
            return;
        };
        let mut sent = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        sent.extend_from_slice(data);
        let _ = conn.write_all(&sent).await;
        let _ = conn.shutdown().await;
        let mut sink = [0u8; 16 * 1024];
        let read = async { while matches!(conn.read(&mut sink).await, Ok(n) if n > 0) {} };
        // The server closes at EOF, an error, or its own short timeouts.
        let _ = tokio::time::timeout(Duration::from_secs(2), read).await;
    });
});
