//! A peer that speaks Redis's protocol and lies, for the hostile-reply tests: it
//! answers `PING`, `FUNCTION LOAD` and anything else as a Redis would (`+PONG`, `+OK`;
//! `INFO` with `+OK`, or as a Redis of the version it is given),
//! the first decision call (`FCALL`, `EVALSHA`, `EVAL`: the store's startup probe, a
//! peek) truthfully, and every one after it with one [`Lie`], the same every time. A reply no Redis sends must become a store error (the failure policy
//! answers), never a panic, an index past a batch or a subtraction that wraps.
//!
//! The lies are shaped for a call of one batch of one request (one descriptor, one
//! rule), where a true reply is `[denied_by, outcome, remaining, reset_us, retry_us]`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// What the peer answers a decision call with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lie {
    /// `denied_by` names request 2 of a batch of 1.
    DeniedByPastTheBatch,
    /// `remaining` a billion, above any test's limit.
    RemainingAboveTheLimit,
    /// A negative `remaining`.
    Negative,
    /// Two integers where five belong.
    TooFew,
    /// Seven integers where five belong.
    TooMany,
    /// An integer, not an array.
    NotAnArray,
    /// A nil reply.
    Nil,
    /// Outcome 9 (0 to 2 exist).
    UnknownOutcome,
    /// Allowed, with a reset of 2^63 - 1 µs (292,000 years).
    EndlessReset,
    /// Denied, retry after 2^63 - 1 µs.
    EndlessRetry,
    /// An error naming a key with another client's value in it.
    ErrorNamingAKey,
    /// A bulk string of 1 MiB where the reply's array belongs (the form of "why a batch
    /// failed").
    MegabyteOfWhy,
    /// Arrays nested 100,000 deep.
    DeepArrays,
    /// Half a reply, then the connection closed.
    HangUpMidReply,
    /// Nothing, ever (the connection stays open).
    Silence,
}

impl Lie {
    /// Every lie, in a fixed order.
    pub const ALL: [Lie; 15] = [
        Lie::DeniedByPastTheBatch,
        Lie::RemainingAboveTheLimit,
        Lie::Negative,
        Lie::TooFew,
        Lie::TooMany,
        Lie::NotAnArray,
        Lie::Nil,
        Lie::UnknownOutcome,
        Lie::EndlessReset,
        Lie::EndlessRetry,
        Lie::ErrorNamingAKey,
        Lie::MegabyteOfWhy,
        Lie::DeepArrays,
        Lie::HangUpMidReply,
        Lie::Silence,
    ];

    /// What the lie is, for a table.
    pub fn describe(self) -> &'static str {
        match self {
            Lie::DeniedByPastTheBatch => "denied_by past the batch",
            Lie::RemainingAboveTheLimit => "remaining above the limit",
            Lie::Negative => "a negative remaining",
            Lie::TooFew => "too few integers",
            Lie::TooMany => "too many integers",
            Lie::NotAnArray => "an integer, not an array",
            Lie::Nil => "nil",
            Lie::UnknownOutcome => "outcome 9",
            Lie::EndlessReset => "reset after 2^63 µs",
            Lie::EndlessRetry => "denied, retry after 2^63 µs",
            Lie::ErrorNamingAKey => "an error naming a key",
            Lie::MegabyteOfWhy => "1 MiB of \"why\"",
            Lie::DeepArrays => "arrays nested 100,000 deep",
            Lie::HangUpMidReply => "half a reply, then closed",
            Lie::Silence => "no reply, ever",
        }
    }

    /// Whether no true store could send it. A well-formed lie (a reset of 292,000
    /// years) is believed as any answer of the store is: it cannot be told from the
    /// truth without knowing the counters.
    pub fn malformed(self) -> bool {
        !matches!(self, Lie::EndlessReset | Lie::EndlessRetry)
    }

    /// The reply's bytes; `None`: say nothing.
    fn reply(self) -> Option<Vec<u8>> {
        let ints = |v: &[i64]| {
            let mut out = format!("*{}\r\n", v.len());
            for i in v {
                out.push_str(&format!(":{i}\r\n"));
            }
            out.into_bytes()
        };
        const ENDLESS: i64 = i64::MAX;
        Some(match self {
            Lie::DeniedByPastTheBatch => ints(&[2, 1, 0, 1_000, 1_000]),
            Lie::RemainingAboveTheLimit => ints(&[0, 0, 1_000_000_000, 1_000, 0]),
            Lie::Negative => ints(&[0, 0, -1, 1_000, 0]),
            Lie::TooFew => ints(&[0, 0]),
            Lie::TooMany => ints(&[0, 0, 0, 0, 0, 0, 0]),
            Lie::NotAnArray => b":42\r\n".to_vec(),
            Lie::Nil => b"*-1\r\n".to_vec(),
            Lie::UnknownOutcome => ints(&[0, 9, 0, 1_000, 0]),
            Lie::EndlessReset => ints(&[0, 0, 0, ENDLESS, 0]),
            Lie::EndlessRetry => ints(&[1, 1, 0, ENDLESS, ENDLESS]),
            Lie::ErrorNamingAKey => {
                b"-WRONGTYPE spillway:{d}:user_victim@example.com holds the wrong kind of value\r\n"
                    .to_vec()
            }
            Lie::MegabyteOfWhy => {
                let why = "x".repeat(1 << 20);
                format!("*1\r\n${}\r\n{why}\r\n", why.len()).into_bytes()
            }
            Lie::DeepArrays => {
                let mut out = b"*1\r\n".repeat(100_000);
                out.extend_from_slice(b":0\r\n");
                out
            }
            Lie::HangUpMidReply => b"*5\r\n:0\r\n:0".to_vec(),
            Lie::Silence => return None,
        })
    }
}

/// A running liar; stops when dropped.
#[derive(Debug)]
pub struct Liar {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Liar {
    /// Listens on a free loopback port and tells `lie` to every decision call.
    /// `INFO` it answers `+OK`, as a proxy that hides the server's version would.
    pub async fn start(lie: Lie) -> Liar {
        Liar::start_as(lie, None).await
    }

    /// The same, answering `INFO` as a Redis of `redis_version` would.
    pub async fn start_as(lie: Lie, redis_version: Option<&str>) -> Liar {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let addr = listener.local_addr().expect("a bound address");
        let probed = Arc::new(AtomicBool::new(false));
        let info: Arc<[u8]> = match redis_version {
            Some(v) => {
                let text = format!("# Server\r\nredis_version:{v}\r\nredis_mode:standalone\r\n");
                format!("${}\r\n{text}\r\n", text.len()).into_bytes().into()
            }
            None => b"+OK\r\n".as_slice().into(),
        };
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(serve(conn, lie, Arc::clone(&probed), Arc::clone(&info)));
            }
        });
        Liar { addr, task }
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }
}

impl Drop for Liar {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Answers one connection's commands until it closes.
async fn serve(conn: TcpStream, lie: Lie, probed: Arc<AtomicBool>, info: Arc<[u8]>) {
    let mut conn = BufReader::new(conn);
    while let Some(command) = read_command(&mut conn).await {
        let name = command.first().map(|c| c.to_ascii_uppercase());
        let reply = match name.as_deref() {
            Some(b"PING") => b"+PONG\r\n".to_vec(),
            Some(b"HELLO") => b"-ERR unknown command 'HELLO'\r\n".to_vec(),
            Some(b"INFO") => info.to_vec(),
            Some(b"FCALL" | b"FCALL_RO" | b"EVALSHA" | b"EVAL")
                if !probed.swap(true, Ordering::SeqCst) =>
            {
                // The probe: a peek at one key, allowed with nothing left.
                b"*5\r\n:0\r\n:0\r\n:0\r\n:0\r\n:0\r\n".to_vec()
            }
            Some(b"FCALL" | b"FCALL_RO" | b"EVALSHA" | b"EVAL") => match lie.reply() {
                Some(reply) => reply,
                // Silence: keep reading (and ignoring) until the client gives up.
                None => continue,
            },
            _ => b"+OK\r\n".to_vec(),
        };
        if conn.get_mut().write_all(&reply).await.is_err() {
            return;
        }
        if lie == Lie::HangUpMidReply && matches!(name.as_deref(), Some(b"FCALL" | b"EVALSHA")) {
            return;
        }
    }
}

/// One command as its arguments (`*N` of `$len` bulk strings); `None` at the end or on
/// bytes that are not a command.
async fn read_command(conn: &mut BufReader<TcpStream>) -> Option<Vec<Vec<u8>>> {
    let mut line = String::new();
    conn.read_line(&mut line).await.ok()?;
    let n: usize = line.trim_end().strip_prefix('*')?.parse().ok()?;
    let mut args = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        line.clear();
        conn.read_line(&mut line).await.ok()?;
        let len: usize = line.trim_end().strip_prefix('$')?.parse().ok()?;
        let mut arg = vec![0u8; len + 2];
        conn.read_exact(&mut arg).await.ok()?;
        arg.truncate(len);
        args.push(arg);
    }
    Some(args)
}
