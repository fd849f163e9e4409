//! The faults, each injected into a real `redis-server` (or the TCP proxy between it
//! and Spillway, or a Redis Cluster of the trial's own) and healed again, on plaintext
//! or over TLS.

use std::fmt;
use std::time::Duration;

use spillway_redis::Access;
use spillway_testkit::proxy::{Proxy, ProxyMode};
use spillway_testkit::redis::{RedisServer, ServerTls};
use spillway_testkit::tls::{Leaf, Pki};

use crate::cluster::Cluster;

/// One way Redis fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL, then a fresh server on the same port (its counters gone).
    Kill,
    /// SIGSTOP, then SIGCONT: connections stay up, nothing answers.
    Stop,
    /// `CLIENT PAUSE ALL`, then `CLIENT UNPAUSE`.
    ClientPause,
    /// `DEBUG SLEEP`: the server blocks for the fault's length.
    DebugSleep,
    /// `SCRIPT FLUSH` and `FUNCTION FLUSH` every 10 ms: every call may meet NOSCRIPT,
    /// or find the function library gone.
    ScriptFlush,
    /// The proxy drops everything; connections stay open.
    ProxyDrop,
    /// The proxy delays every request by 50 ms (longer than the store timeout).
    ProxyDelay,
    /// The proxy resets every connection, and every new one.
    ProxyReset,
    /// Root only, in a private network namespace: the kernel drops every packet to the
    /// proxy's port (`iptables -j DROP`), new connections' SYNs included.
    IptablesDrop,
    /// Cluster: `CLUSTER FAILOVER` on each replica in turn (every master changes).
    Failover,
    /// Cluster: SIGKILL the master serving the trial's key; its replica is promoted
    /// after the node timeout, then the killed node rejoins as a replica.
    MasterKill,
    /// Cluster: the trial's slot migrated, keys and all, from master to master again
    /// and again (clients meet ASK and MOVED redirects).
    Reshard,
}

impl Fault {
    /// Every fault, in the order the report lists them.
    pub const ALL: [Fault; 12] = [
        Fault::Kill,
        Fault::Stop,
        Fault::ClientPause,
        Fault::DebugSleep,
        Fault::ScriptFlush,
        Fault::ProxyDrop,
        Fault::ProxyDelay,
        Fault::ProxyReset,
        Fault::IptablesDrop,
        Fault::Failover,
        Fault::MasterKill,
        Fault::Reshard,
    ];

    /// The name the command line and the report use.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Stop => "stop",
            Fault::ClientPause => "client-pause",
            Fault::DebugSleep => "debug-sleep",
            Fault::ScriptFlush => "script-flush",
            Fault::ProxyDrop => "proxy-drop",
            Fault::ProxyDelay => "proxy-delay",
            Fault::ProxyReset => "proxy-reset",
            Fault::IptablesDrop => "iptables-drop",
            Fault::Failover => "failover",
            Fault::MasterKill => "master-kill",
            Fault::Reshard => "reshard",
        }
    }

    /// Whether the fault needs root and a network namespace of its own.
    pub fn needs_root(self) -> bool {
        self == Fault::IptablesDrop
    }

    /// Whether the fault needs a Redis Cluster (the others use one server behind the proxy).
    pub fn on_cluster(self) -> bool {
        matches!(self, Fault::Failover | Fault::MasterKill | Fault::Reshard)
    }

    /// Whether Redis loses its counters (windows spanning the fault are not comparable).
    pub fn loses_state(self) -> bool {
        self == Fault::Kill
    }

    /// Keeps the fault going for `length` (a cluster fault: until the cluster has done
    /// what it was asked, and at least `length` for a reshard), then heals it.
    pub async fn run(self, rig: &mut Rig, length: Duration) -> anyhow::Result<()> {
        let (redis, proxy) = match &mut rig.servers {
            Servers::Single { redis, proxy } => (redis, proxy),
            Servers::Cluster(cluster) => {
                return tokio::task::block_in_place(|| self.run_on_cluster(cluster, length));
            }
        };
        match self {
            Fault::Kill => {
                redis.kill();
                tokio::time::sleep(length).await;
                redis.restart();
            }
            Fault::Stop => {
                redis.signal("STOP");
                tokio::time::sleep(length).await;
                redis.signal("CONT");
            }
            Fault::ClientPause => {
                let ms = length.as_millis().to_string();
                command(redis, &["CLIENT", "PAUSE", &ms, "ALL"]).await;
                tokio::time::sleep(length).await;
                command(redis, &["CLIENT", "UNPAUSE"]).await;
            }
            Fault::DebugSleep => {
                // The server blocks as soon as it reads the command; the client call
                // itself may give up sooner, so time the fault here.
                let mut sleep = redis.cli_command();
                sleep.args(["DEBUG", "SLEEP", &format!("{:.3}", length.as_secs_f64())]);
                tokio::task::spawn_blocking(move || sleep.output());
                tokio::time::sleep(length).await;
            }
            Fault::ScriptFlush => {
                let end = tokio::time::Instant::now() + length;
                while tokio::time::Instant::now() < end {
                    command(redis, &["SCRIPT", "FLUSH"]).await;
                    command(redis, &["FUNCTION", "FLUSH"]).await;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            Fault::ProxyDrop | Fault::ProxyDelay | Fault::ProxyReset => {
                proxy.set(match self {
                    Fault::ProxyDrop => ProxyMode::Blackhole,
                    Fault::ProxyDelay => ProxyMode::Delay(Duration::from_millis(50)),
                    _ => ProxyMode::Reset,
                });
                tokio::time::sleep(length).await;
                proxy.set(ProxyMode::Pass);
            }
            Fault::IptablesDrop => {
                let port = proxy.addr().port().to_string();
                let rule = ["-p", "tcp", "--dport", &port, "-j", "DROP"];
                iptables("-I", &rule)?;
                tokio::time::sleep(length).await;
                iptables("-D", &rule)?;
            }
            Fault::Failover | Fault::MasterKill | Fault::Reshard => {
                anyhow::bail!("{self} needs a cluster")
            }
        }
        Ok(())
    }

    fn run_on_cluster(self, cluster: &mut Cluster, length: Duration) -> anyhow::Result<()> {
        let (slot, owner) = cluster
            .busy_slot()
            .ok_or_else(|| anyhow::anyhow!("no key on the cluster: no load reached it"))?;
        match self {
            Fault::Failover => {
                let replicas: Vec<_> = cluster
                    .topology()
                    .into_iter()
                    .filter(|n| !n.master && !n.failed)
                    .collect();
                for r in replicas {
                    let out = cluster.cli(r.port, &["CLUSTER", "FAILOVER"]);
                    anyhow::ensure!(out.trim() == "OK", "CLUSTER FAILOVER on {}: {out}", r.port);
                    cluster.wait_until("the replica takes over", |c| {
                        c.topology().iter().any(|n| n.id == r.id && n.master)
                    })?;
                }
            }
            Fault::MasterKill => {
                cluster.node_mut(owner.port).kill();
                cluster.wait_until("a replica is promoted", |c| {
                    c.master_of(slot).is_some_and(|m| m.port != owner.port)
                })?;
                cluster.node_mut(owner.port).restart();
            }
            Fault::Reshard => {
                #[allow(clippy::disallowed_methods, reason = "a wall-clock deadline")]
                let end = std::time::Instant::now() + length;
                let mut moves = 0;
                #[allow(clippy::disallowed_methods, reason = "a wall-clock deadline")]
                while std::time::Instant::now() < end {
                    let from = cluster
                        .master_of(slot)
                        .ok_or_else(|| anyhow::anyhow!("no master serves slot {slot}"))?;
                    let to = cluster
                        .topology()
                        .into_iter()
                        .find(|n| n.master && !n.failed && n.id != from.id)
                        .ok_or_else(|| anyhow::anyhow!("no other master"))?;
                    cluster.move_slot(slot, &from, &to)?;
                    moves += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
                eprintln!("  reshard: slot {slot} moved {moves} times, keys and all");
            }
            _ => anyhow::bail!("{self} is not a cluster fault"),
        }
        Ok(())
    }
}

/// How Spillway reaches Redis in a trial.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transport {
    #[default]
    Plain,
    /// TLS with client certificates required, from a CA of the trial's own (a
    /// Cluster's bus and replication too; the proxy forwards the TLS bytes).
    Tls,
}

/// What a trial runs on: one server behind the fault proxy, or a cluster of its own;
/// over TLS, the CA that signed their certificates.
#[derive(Debug)]
pub struct Rig {
    pub servers: Servers,
    /// Kept for its files (removed on drop).
    pki: Option<Pki>,
}

/// The servers of a [`Rig`].
#[derive(Debug)]
pub enum Servers {
    Single { redis: RedisServer, proxy: Proxy },
    Cluster(Cluster),
}

impl Rig {
    /// What `fault` needs, on `transport`.
    pub async fn start(fault: Fault, transport: Transport) -> anyhow::Result<Rig> {
        let pki = (transport == Transport::Tls).then(|| Pki::new("reliability"));
        let tls = pki.as_ref().map(|pki| ServerTls {
            ca: pki.ca(),
            server: pki.issue("server", Leaf::Good),
            client: pki.issue("cli", Leaf::Good),
            auth_clients: "yes",
        });
        let servers = if fault.on_cluster() {
            Servers::Cluster(
                tokio::task::spawn_blocking(move || Cluster::start(tls.as_ref())).await??,
            )
        } else {
            let redis = tokio::task::spawn_blocking(move || match &tls {
                Some(tls) => RedisServer::start_tls(tls, &[]),
                None => RedisServer::start(),
            })
            .await?;
            let proxy = Proxy::start(redis.addr()).await;
            Servers::Single { redis, proxy }
        };
        Ok(Rig { servers, pki })
    }

    /// The store URL the service is given.
    pub fn store_url(&self) -> String {
        match &self.servers {
            Servers::Single { proxy, .. } => {
                let s = if self.pki.is_some() { "s" } else { "" };
                format!("redis{s}://{}", proxy.addr())
            }
            Servers::Cluster(cluster) => cluster.url(),
        }
    }

    /// What the service needs to reach the servers: over TLS, the CA to trust and a
    /// client certificate.
    pub fn access(&self) -> Access {
        let mut access = Access::default();
        if let Some(pki) = &self.pki {
            let files = pki.client();
            access.tls.ca_file = Some(files.ca);
            access.tls.client_cert = Some(files.client.cert);
            access.tls.client_key = Some(files.client.key);
        }
        access
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Fault {
    type Err = String;

    fn from_str(s: &str) -> Result<Fault, String> {
        Fault::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Fault::ALL.iter().map(|f| f.name()).collect();
                format!("unknown fault `{s}` (expected one of {})", names.join(", "))
            })
    }
}

fn iptables(action: &str, rule: &[&str]) -> anyhow::Result<()> {
    let status = std::process::Command::new("iptables")
        .args(["-w", action, "INPUT"])
        .args(rule)
        .status()?;
    anyhow::ensure!(status.success(), "iptables {action} INPUT {rule:?} failed");
    Ok(())
}

/// Why the root-only faults can't run here, if they can't: they need root, iptables
/// and `unshare` (they run in a network namespace of their own, so the rule touches
/// nothing else on the machine).
pub fn root_faults_unavailable() -> Option<String> {
    let ok = |cmd: &str, args: &[&str]| {
        std::process::Command::new(cmd)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    // The real user id is the first of the four.
    let uid = crate::proc_status("Uid").and_then(|v| v.split_whitespace().next().map(String::from));
    if uid.as_deref() != Some("0") {
        Some("not root".into())
    } else if !ok("iptables", &["--version"]) {
        Some("no iptables (apt-get install iptables)".into())
    } else if !ok("unshare", &["-n", "true"]) {
        Some("`unshare -n` is not allowed here".into())
    } else {
        None
    }
}

/// One command through `redis-cli`, straight to the server (not through the proxy);
/// answers are not needed.
async fn command(redis: &RedisServer, args: &[&str]) {
    let mut cmd = redis.cli_command();
    cmd.args(args);
    let _ = tokio::task::spawn_blocking(move || cmd.output()).await;
}
