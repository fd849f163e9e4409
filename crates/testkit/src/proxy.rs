//! A TCP proxy between a client and a server, for fault tests: traffic passes through,
//! or is dropped (a black hole: the connection stays up, nothing arrives), delayed, or
//! every connection is reset (RST, as a dying middlebox or a killed peer looks).
//! The mode can be changed while connections are open; it applies to them at once.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyMode {
    /// Forward everything.
    Pass,
    /// Read and discard in both directions; connections stay open.
    Blackhole,
    /// Forward each chunk from the client after this long.
    Delay(Duration),
    /// Reset every open connection, and every new one as it arrives.
    Reset,
    /// Forward what the client sends, discard what the server answers: the server
    /// does the work, and the client never learns it did (a reply lost on the way).
    LoseReplies,
}

/// A running proxy; stops when dropped.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    mode: watch::Sender<ProxyMode>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let addr = listener.local_addr().expect("a bound address");
        let (mode, _) = watch::channel(ProxyMode::Pass);
        let modes = mode.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let rx = modes.subscribe();
                tokio::spawn(connection(client, upstream, rx));
            }
        });
        Proxy { addr, mode, task }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Changes what the proxy does, for open connections too.
    pub fn set(&self, mode: ProxyMode) {
        self.mode.send_replace(mode);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn connection(client: TcpStream, upstream: SocketAddr, mut mode: watch::Receiver<ProxyMode>) {
    if *mode.borrow_and_update() == ProxyMode::Reset {
        return reset(client);
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        return reset(client);
    };
    // Without TCP_NODELAY a request split over two writes waits for the peer's delayed
    // ACK (40 ms on Linux): the proxy itself would look like a slow network.
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client, mut server) = (client, server);
    if pump(&mut client, &mut server, &mut mode).await {
        reset(client);
        reset(server);
    }
}

/// Copies both ways until either side closes (false) or the mode says reset (true).
async fn pump(
    client: &mut TcpStream,
    server: &mut TcpStream,
    mode: &mut watch::Receiver<ProxyMode>,
) -> bool {
    let (mut cr, mut cw) = client.split();
    let (mut sr, mut sw) = server.split();
    let (mut up, mut down) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    loop {
        tokio::select! {
            n = cr.read(&mut up) => {
                let Ok(n @ 1..) = n else { return false };
                let now = *mode.borrow();
                match now {
                    ProxyMode::Pass | ProxyMode::LoseReplies => {}
                    ProxyMode::Blackhole => continue,
                    ProxyMode::Delay(d) => tokio::time::sleep(d).await,
                    ProxyMode::Reset => return true,
                }
                if sw.write_all(&up[..n]).await.is_err() {
                    return false;
                }
            }
            n = sr.read(&mut down) => {
                let Ok(n @ 1..) = n else { return false };
                let now = *mode.borrow();
                match now {
                    ProxyMode::Pass | ProxyMode::Delay(_) => {}
                    ProxyMode::Blackhole | ProxyMode::LoseReplies => continue,
                    ProxyMode::Reset => return true,
                }
                if cw.write_all(&down[..n]).await.is_err() {
                    return false;
                }
            }
            changed = mode.changed() => {
                if changed.is_err() || *mode.borrow() == ProxyMode::Reset {
                    return true;
                }
            }
        }
    }
}

/// Closes with RST instead of FIN.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n @ 1..) = s.read(&mut buf).await {
                        if s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn round_trip(s: &mut TcpStream, within: Duration) -> std::io::Result<Option<Vec<u8>>> {
        s.write_all(b"ping").await?;
        let mut buf = [0u8; 4];
        match tokio::time::timeout(within, s.read_exact(&mut buf)).await {
            Ok(r) => r.map(|_| Some(buf.to_vec())),
            Err(_) => Ok(None),
        }
    }

    #[tokio::test]
    async fn passes_drops_and_resets() {
        let proxy = Proxy::start(echo_server().await).await;
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        let long = Duration::from_secs(5);
        assert_eq!(round_trip(&mut s, long).await.unwrap().unwrap(), b"ping");

        proxy.set(ProxyMode::Blackhole);
        let short = Duration::from_millis(100);
        assert_eq!(round_trip(&mut s, short).await.unwrap(), None, "dropped");

        // The server gets it (its echo comes back once replies pass again), the client
        // hears nothing meanwhile.
        let mut lost = TcpStream::connect(proxy.addr()).await.unwrap();
        proxy.set(ProxyMode::LoseReplies);
        assert_eq!(round_trip(&mut lost, short).await.unwrap(), None, "lost");

        // An open connection is reset at once, and so is a new one.
        proxy.set(ProxyMode::Reset);
        let mut buf = [0u8; 1];
        let err = s.read(&mut buf).await;
        assert!(matches!(err, Err(_) | Ok(0)), "{err:?}");
        let mut fresh = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(round_trip(&mut fresh, long).await.is_err());

        proxy.set(ProxyMode::Pass);
        let mut again = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(
            round_trip(&mut again, long).await.unwrap().unwrap(),
            b"ping"
        );
    }
}
