//! What Redis has spent: `INFO cpu commandstats`, summed over the masters.

use redis::Value;
use spillway_core::Error as CoreError;

use super::RedisStore;

impl RedisStore {
    /// What Redis has spent so far, from `INFO cpu commandstats`: summed over every
    /// master of a Cluster (replicas are not asked). Two readings around a load give
    /// Redis CPU per decision and decisions per call (`spillway bench`).
    pub async fn server_stats(&self) -> Result<ServerStats, CoreError> {
        let mut info = redis::cmd("INFO");
        info.arg("cpu").arg("commandstats");
        let reply = self.query(&info).await?;
        let mut stats = ServerStats::default();
        let mut add = |text: &str| stats.add(text);
        match reply {
            // One reply per master on Cluster.
            Value::Map(nodes) => nodes.iter().for_each(|(_, v)| add(&text_of(v))),
            other => add(&text_of(&other)),
        }
        Ok(stats)
    }
}

/// Redis's own counters ([`RedisStore::server_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ServerStats {
    /// CPU seconds (user and system) the servers have used since they started.
    pub cpu_seconds: f64,
    /// Calls of the decision code: `FCALL`, `EVALSHA` and `EVAL`.
    pub decision_calls: u64,
    /// Of which `FCALL`.
    pub function_calls: u64,
    /// `INCRBY` calls: decisions of the reference's rules, made without the script (one
    /// per limit of such a batch).
    pub counted: u64,
    /// Servers asked.
    pub servers: usize,
}

impl ServerStats {
    fn add(&mut self, info: &str) {
        self.servers += 1;
        for line in info.lines() {
            let Some((name, value)) = line.trim().split_once(':') else {
                continue;
            };
            // `cmdstat_<command>:calls=N,usec=…`
            let calls = || {
                value
                    .split(',')
                    .find_map(|f| f.strip_prefix("calls="))
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            match name {
                "used_cpu_sys" | "used_cpu_user" => {
                    self.cpu_seconds += value.parse::<f64>().unwrap_or(0.0);
                }
                "cmdstat_fcall" | "cmdstat_evalsha" | "cmdstat_eval" => {
                    let calls = calls();
                    self.decision_calls += calls;
                    if name == "cmdstat_fcall" {
                        self.function_calls += calls;
                    }
                }
                "cmdstat_incrby" => self.counted += calls(),
                _ => {}
            }
        }
    }
}

/// A reply's text (`INFO` answers a bulk or a verbatim string).
pub(super) fn text_of(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::VerbatimString { text, .. } => text.clone(),
        Value::SimpleString(s) => s.clone(),
        _ => String::new(),
    }
}
