//! Each hostile client played in raw frames: what it sends, and what it saw of the
//! service's answer.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

use super::H2Case;
use super::wire::{
    Conn, HEALTH, PREFACE, RLS, Transport, closed_now, connect, count_ends, ended, frame, headers,
    hpack, request_block, until_eof,
};

/// The hostile client of `case`: what it saw.
pub(super) async fn run(case: H2Case, t: &Transport, addr: SocketAddr) -> String {
    match case {
        H2Case::StalledStreams => {
            let mut conns = Vec::new();
            for _ in 0..4 {
                let Ok(mut c) = connect(t, addr).await else {
                    return "could not connect".into();
                };
                for i in 0..50u32 {
                    let id = 1 + 2 * i;
                    let mut w = headers(id, RLS, false);
                    let mut data = vec![0u8];
                    data.extend((4u32 << 20).to_be_bytes());
                    data.extend(vec![0u8; 1024]);
                    w.extend(frame(0x0, 0, id, &data));
                    let _ = c.write_all(&w).await;
                }
                conns.push(c);
            }
            // Each stream must end (trailers with grpc-status, or a reset).
            let mut ended = Vec::new();
            for mut c in conns {
                ended.push(count_ends(&mut c, 50, Duration::from_secs(10)).await);
            }
            format!(
                "{} of 200 streams ended by the server ({ended:?} a connection)",
                ended.iter().sum::<usize>()
            )
        }
        H2Case::IdleConnections(n) => {
            // Held while the server keeps them; one it closes (over the cap) is let go
            // at once, so this side holds about as many as the server does.
            let mut held: Vec<Conn> = Vec::new();
            let mut refused = 0;
            for i in 0..n {
                if let Ok(c) = connect(t, addr).await {
                    held.push(c);
                }
                if i % 256 == 255 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    let before = held.len();
                    held.retain_mut(|c| !closed_now(c));
                    refused += before - held.len();
                }
            }
            // Before the idle timeout (1 s): those closed now were over the cap.
            tokio::time::sleep(Duration::from_millis(300)).await;
            for _ in 0..2 {
                let before = held.len();
                held.retain_mut(|c| !closed_now(c));
                refused += before - held.len();
            }
            let kept = held.len();
            // Each kept must be closed by the server within its idle timeout and a
            // margin.
            let deadline = Instant::now() + Duration::from_secs(15);
            let mut closed = 0;
            for mut c in held {
                let left = deadline.saturating_duration_since(Instant::now());
                if until_eof(&mut c, left).await {
                    closed += 1;
                }
            }
            format!(
                "{} opened, all {} closed by the server",
                refused + kept,
                refused + closed
            )
        }
        H2Case::RapidReset => {
            flood(
                t,
                addr,
                |i| {
                    let id = 1 + 2 * i;
                    let mut w = headers(id, RLS, false);
                    w.extend(frame(0x3, 0, id, &8u32.to_be_bytes())); // RST_STREAM CANCEL
                    w
                },
                10_000,
            )
            .await
        }
        H2Case::SettingsFlood => flood(t, addr, |_| frame(0x4, 0, 0, &[]), 10_000).await,
        H2Case::PingFlood => flood(t, addr, |_| frame(0x6, 0, 0, &[0; 8]), 100_000).await,
        H2Case::ContinuationFlood => {
            let Ok(mut c) = connect(t, addr).await else {
                return "could not connect".into();
            };
            let mut w = frame(0x1, 0x0, 1, &hpack(":method", "POST")); // no END_HEADERS
            let block = hpack("x-filler", &"a".repeat(16_000));
            for _ in 0..1024 {
                w.extend(frame(0x9, 0x0, 1, &block));
            }
            let _ = c.write_all(&w).await;
            ended(&mut c).await
        }
        H2Case::HugeHeader => {
            let Ok(mut c) = connect(t, addr).await else {
                return "could not connect".into();
            };
            let mut block = request_block(HEALTH);
            block.extend(hpack("x-huge", &"a".repeat(1 << 20)));
            let mut w = Vec::new();
            // HEADERS then CONTINUATIONs of 16 KiB, the last with END_HEADERS.
            let chunks: Vec<&[u8]> = block.chunks(16_384).collect();
            for (i, chunk) in chunks.iter().enumerate() {
                let last = i + 1 == chunks.len();
                let (kind, flags) = if i == 0 { (0x1, 0x1) } else { (0x9, 0x0) };
                w.extend(frame(kind, flags | if last { 0x4 } else { 0 }, 1, chunk));
            }
            let _ = c.write_all(&w).await;
            ended(&mut c).await
        }
        H2Case::WindowOverflow => {
            let Ok(mut c) = connect(t, addr).await else {
                return "could not connect".into();
            };
            let w = [
                frame(0x8, 0, 0, &0x7fff_ffffu32.to_be_bytes()),
                frame(0x8, 0, 0, &0x7fff_ffffu32.to_be_bytes()),
            ]
            .concat();
            let _ = c.write_all(&w).await;
            ended(&mut c).await
        }
        H2Case::ZeroWindow => {
            let Ok(mut c) = t.open(addr).await else {
                return "could not connect".into();
            };
            // SETTINGS_INITIAL_WINDOW_SIZE (4) = 0.
            let mut w = PREFACE.to_vec();
            w.extend(frame(0x4, 0, 0, &[0, 4, 0, 0, 0, 0]));
            for i in 0..100u32 {
                let id = 1 + 2 * i;
                w.extend(headers(id, HEALTH, false));
                w.extend(frame(0x0, 0x1, id, &[0, 0, 0, 0, 0]));
            }
            let _ = c.write_all(&w).await;
            // Answers that cannot be sent are held by the server until the connection
            // goes: the client leaves after 2 s, and what was held must be freed.
            tokio::time::sleep(Duration::from_secs(2)).await;
            "left after 2 s".into()
        }
        H2Case::GarbageFrames => {
            let Ok(mut c) = t.open(addr).await else {
                return "could not connect".into();
            };
            let mut w = PREFACE.to_vec();
            w.extend((0..65_536u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8));
            let _ = c.write_all(&w).await;
            ended(&mut c).await
        }
        H2Case::BadStreamIds => {
            let Ok(mut c) = connect(t, addr).await else {
                return "could not connect".into();
            };
            let mut w = headers(2, HEALTH, true);
            w.extend(headers(1, HEALTH, true));
            w.extend(headers(1, HEALTH, true));
            let _ = c.write_all(&w).await;
            ended(&mut c).await
        }
    }
}

/// One connection that sends `n` frames made by `make`, then reads until the server
/// closes it or 10 s pass.
async fn flood(t: &Transport, addr: SocketAddr, make: impl Fn(u32) -> Vec<u8>, n: u32) -> String {
    let Ok(mut c) = connect(t, addr).await else {
        return "could not connect".into();
    };
    let mut w = Vec::new();
    for i in 0..n {
        w.extend(make(i));
    }
    // The server may close before it has read it all: a failed write is an answer.
    let wrote = tokio::time::timeout(Duration::from_secs(10), c.write_all(&w)).await;
    let written = match wrote {
        Ok(Ok(())) => "all sent",
        Ok(Err(_)) => "the server closed while it was sent",
        Err(_) => "the server stopped reading",
    };
    format!("{written}; {}", ended(&mut c).await)
}
