//! A Redis Cluster of the suite's own (3 masters, 3 replicas, on free loopback ports),
//! so the cluster faults can fail over, kill and reshard it without touching the
//! shared one the test suite uses. Driven with `redis-cli`, as an operator would.
//! Over TLS too: every node, its bus and its replication, client certificates required.

use std::time::Duration;

use spillway_testkit::redis::{RedisServer, ServerTls};

/// How long a node may be silent before the others call it failed (the shared test
/// cluster uses 5 s; a kill trial waits for it).
pub const NODE_TIMEOUT_MS: u64 = 1000;

/// Six nodes, killed on drop.
#[derive(Debug)]
pub struct Cluster {
    nodes: Vec<RedisServer>,
}

/// One line of `CLUSTER NODES`.
#[derive(Clone, Debug)]
pub struct Node {
    pub id: String,
    pub port: u16,
    pub master: bool,
    pub failed: bool,
    /// The slots it serves (masters only), as inclusive ranges.
    pub slots: Vec<(u16, u16)>,
}

impl Cluster {
    /// Starts six nodes (over TLS with `tls`), joins them as three masters with one
    /// replica each, and waits until every node reports `cluster_state:ok`.
    pub fn start(tls: Option<&ServerTls>) -> anyhow::Result<Cluster> {
        let timeout = NODE_TIMEOUT_MS.to_string();
        let nodes: Vec<RedisServer> = (0..6)
            .map(|_| {
                let args = [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    &timeout,
                    // Redis 7.0 may count a fresh replica's link as down since the
                    // epoch and refuse to take over ("disconnected from master for
                    // longer than allowed"): a killed master's replica must always try.
                    "--cluster-replica-validity-factor",
                    "0",
                    // A replica's first sync starts at once, not 5 s later.
                    "--repl-diskless-sync-delay",
                    "0",
                ];
                match tls {
                    None => RedisServer::start_with(&args),
                    Some(tls) => RedisServer::start_tls(
                        tls,
                        &[
                            &args[..],
                            &["--tls-cluster", "yes", "--tls-replication", "yes"],
                        ]
                        .concat(),
                    ),
                }
            })
            .collect();
        let mut create = nodes[0].cli_command();
        create.args(["--cluster", "create"]);
        create.args(nodes.iter().map(|n| n.addr().to_string()));
        create.args(["--cluster-replicas", "1", "--cluster-yes"]);
        let cluster = Cluster { nodes };
        let out = create.output()?;
        anyhow::ensure!(
            out.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        cluster.wait_until("every node reports cluster_state:ok", |c| {
            c.nodes
                .iter()
                .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
        })?;
        // A replica still in its first sync can't take over (a manual failover waits
        // for it): every replica linked to its master first.
        cluster.wait_until("every replica is in sync with its master", |c| {
            c.topology().iter().filter(|n| !n.master).all(|n| {
                c.cli(n.port, &["INFO", "replication"])
                    .contains("master_link_status:up")
            })
        })?;
        Ok(cluster)
    }

    /// `redis+cluster://` (`rediss+cluster://` over TLS) with every node as a seed.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self.nodes.iter().map(|n| n.addr().to_string()).collect();
        let scheme = self.nodes[0].url();
        let scheme = scheme.split("://").next().unwrap_or("redis");
        format!("{scheme}+cluster://{}", seeds.join(","))
    }

    /// The cluster as the first live node sees it.
    pub fn topology(&self) -> Vec<Node> {
        let live = self
            .nodes
            .iter()
            .map(|n| n.cli(&["CLUSTER", "NODES"]))
            .find(|out| !out.is_empty())
            .unwrap_or_default();
        live.lines().filter_map(parse_node).collect()
    }

    /// The node listening on `port`.
    pub fn node_mut(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .expect("a node of this cluster")
    }

    /// The one slot holding keys (a trial's keys share one hash tag), and its master.
    pub fn busy_slot(&self) -> Option<(u16, Node)> {
        self.topology()
            .into_iter()
            .filter(|n| n.master && !n.failed)
            .find_map(|n| {
                let key = self.cli(n.port, &["RANDOMKEY"]);
                let slot = self.cli(n.port, &["CLUSTER", "KEYSLOT", key.trim()]);
                (!key.trim().is_empty())
                    .then(|| slot.trim().parse().ok())
                    .flatten()
                    .map(|slot| (slot, n))
            })
    }

    /// The live master serving `slot`.
    pub fn master_of(&self, slot: u16) -> Option<Node> {
        self.topology().into_iter().find(|n| {
            n.master && !n.failed && n.slots.iter().any(|&(a, b)| (a..=b).contains(&slot))
        })
    }

    /// Polls `done` every 20 ms, for up to 30 s.
    pub fn wait_until(&self, what: &str, done: impl Fn(&Cluster) -> bool) -> anyhow::Result<()> {
        for _ in 0..1500 {
            if done(self) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        anyhow::bail!("the cluster did not settle within 30 s: {what}")
    }

    /// Moves `slot` and its keys from one master to another, as `redis-cli --cluster
    /// reshard` does: IMPORTING on the target, MIGRATING on the source, MIGRATE the keys
    /// in batches (clients meanwhile get ASK redirects), then the masters are told the
    /// new owner.
    pub fn move_slot(&self, slot: u16, from: &Node, to: &Node) -> anyhow::Result<()> {
        let s = slot.to_string();
        let set = |port, args: &[&str]| -> anyhow::Result<()> {
            let mut all = vec!["CLUSTER", "SETSLOT", &s];
            all.extend_from_slice(args);
            let out = self.cli(port, &all);
            anyhow::ensure!(
                out.trim() == "OK",
                "CLUSTER SETSLOT {args:?} on {port}: {out}"
            );
            Ok(())
        };
        set(to.port, &["IMPORTING", &from.id])?;
        set(from.port, &["MIGRATING", &to.id])?;
        loop {
            let keys = self.cli(from.port, &["CLUSTER", "GETKEYSINSLOT", &s, "100"]);
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let port = to.port.to_string();
            let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            migrate.extend(keys);
            let out = self.cli(from.port, &migrate);
            anyhow::ensure!(out.trim() == "OK", "MIGRATE from {}: {out}", from.port);
        }
        // The target first, then the source, as the Redis manual orders it: were the
        // source told first, it would send clients to a target that still sends them
        // back (MOVED both ways until it learns).
        set(to.port, &["NODE", &to.id])?;
        set(from.port, &["NODE", &to.id])?;
        for n in self.topology().iter().filter(|n| n.master && !n.failed) {
            if n.id != to.id && n.id != from.id {
                set(n.port, &["NODE", &to.id])?;
            }
        }
        Ok(())
    }

    /// One `redis-cli` command against the node on `port`; its output ("" when the
    /// node does not answer).
    pub fn cli(&self, port: u16, args: &[&str]) -> String {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .map(|n| n.cli(args))
            .unwrap_or_default()
    }
}

/// `<id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch> <link> <slot>…`
fn parse_node(line: &str) -> Option<Node> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let port = f.get(1)?.split(['@', ',']).next()?.rsplit(':').next()?;
    let flags = f.get(2)?;
    let slots = f
        .iter()
        .skip(8)
        .filter(|s| !s.starts_with('['))
        .filter_map(|s| match s.split_once('-') {
            Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
            None => s.parse().ok().map(|a| (a, a)),
        })
        .collect();
    Some(Node {
        id: f[0].to_string(),
        port: port.parse().ok()?,
        master: flags.contains("master"),
        failed: flags.contains("fail") || flags.contains("noaddr"),
        slots,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cluster_nodes_lines() {
        let master = "07c3 127.0.0.1:30004@40004 myself,master - 0 0 1 connected 0-5460 7000 \
                      [93->-e7d1]";
        let n = parse_node(master).unwrap();
        assert_eq!((n.port, n.master, n.failed), (30004, true, false));
        assert_eq!(n.slots, vec![(0, 5460), (7000, 7000)]);
        let replica = "e7d1 127.0.0.1:30001@40001 slave,fail 07c3 0 0 1 disconnected";
        let n = parse_node(replica).unwrap();
        assert_eq!((n.port, n.master, n.failed), (30001, false, true));
        assert!(n.slots.is_empty());
    }
}
