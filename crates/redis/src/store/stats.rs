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
    /// Redis's time in those calls, in µs (`usec`: the script's run, not the wire).
    pub decision_usec: u64,
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
            let field = |field: &str| {
                value
                    .split(',')
                    .find_map(|f| f.strip_prefix(field)?.strip_prefix('='))
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            let calls = || field("calls");
            match name {
                "used_cpu_sys" | "used_cpu_user" => {
                    self.cpu_seconds += value.parse::<f64>().unwrap_or(0.0);
                }
                "cmdstat_fcall" | "cmdstat_evalsha" | "cmdstat_eval" => {
                    let calls = calls();
                    self.decision_calls += calls;
                    self.decision_usec += field("usec");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_cpu_and_the_decision_calls_of_an_info_reply() {
        let mut stats = ServerStats::default();
        stats.add(
            "# CPU\r\nused_cpu_sys:1.50\r\nused_cpu_user:2.25\r\n# Commandstats\r\n\
             cmdstat_fcall:calls=10,usec=150,usec_per_call=15.00,rejected_calls=0\r\n\
             cmdstat_evalsha:calls=2,usec=40,usec_per_call=20.00\r\n\
             cmdstat_incrby:calls=7,usec=7,usec_per_call=1.00\r\n\
             cmdstat_get:calls=99,usec=99\r\n",
        );
        assert_eq!(
            stats,
            ServerStats {
                cpu_seconds: 3.75,
                decision_calls: 12,
                function_calls: 10,
                decision_usec: 190,
                counted: 7,
                servers: 1,
            }
        );
    }
}
