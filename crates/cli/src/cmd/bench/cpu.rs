//! What a decision costs in CPU: read before and after a run, for this process (the
//! load generator, and with `--store` the store's client), a running service
//! (`--server-pid`), and Redis (`INFO cpu commandstats`: its CPU and the calls of the
//! decision code). On a small machine throughput is shared with the load generator;
//! CPU per decision is what a deployment pays.

use std::time::Duration;

use anyhow::Context;
use spillway_redis::{RedisStore, ServerStats};

/// Readings taken when a run starts.
pub(super) struct Meter {
    own: Duration,
    server: Option<(u32, Duration)>,
    redis: Option<(RedisStore, ServerStats)>,
}

/// CPU per decision over a run, in µs.
#[derive(Debug, Default)]
pub(super) struct Cost {
    /// This process.
    pub(super) bench: f64,
    /// The service (`--server-pid`).
    pub(super) server: Option<f64>,
    /// Redis, every master together.
    pub(super) redis: Option<f64>,
    /// Decisions per call of the decision code.
    pub(super) per_call: Option<f64>,
    /// Which calls the run made: `FCALL`, `EVALSHA`, or both (counted by Redis, so
    /// a service's as well as this process's).
    pub(super) calls: Option<&'static str>,
}

impl Meter {
    pub(super) async fn start(
        server_pid: Option<u32>,
        redis: Option<RedisStore>,
    ) -> anyhow::Result<Meter> {
        let server = match server_pid {
            Some(pid) => Some((pid, process_cpu(pid)?)),
            None => None,
        };
        let redis = match redis {
            Some(store) => {
                let stats = store
                    .server_stats()
                    .await
                    .context("reading Redis's INFO cpu commandstats")?;
                Some((store, stats))
            }
            None => None,
        };
        Ok(Meter {
            own: process_cpu(std::process::id())?,
            server,
            redis,
        })
    }

    pub(super) async fn finish(self, decisions: u64) -> anyhow::Result<Cost> {
        let n = decisions.max(1) as f64;
        let per = |spent: Duration| spent.as_secs_f64() * 1e6 / n;
        let mut cost = Cost {
            bench: per(process_cpu(std::process::id())?.saturating_sub(self.own)),
            ..Cost::default()
        };
        if let Some((pid, before)) = self.server {
            cost.server = Some(per(process_cpu(pid)?.saturating_sub(before)));
        }
        if let Some((store, before)) = self.redis {
            let after = store.server_stats().await?;
            cost.redis = Some((after.cpu_seconds - before.cpu_seconds) * 1e6 / n);
            let calls = after.decision_calls.saturating_sub(before.decision_calls);
            let functions = after.function_calls.saturating_sub(before.function_calls);
            let counted = after.counted.saturating_sub(before.counted);
            cost.per_call = (calls > 0).then(|| decisions as f64 / calls as f64);
            cost.calls = match (functions, calls - functions, counted) {
                (0, 0, 0) => None,
                (0, 0, _) => Some("INCRBY, no script"),
                (_, 0, 0) => Some("FCALL"),
                (0, _, 0) => Some("EVALSHA"),
                (_, _, 0) => Some("FCALL and EVALSHA"),
                (_, 0, _) => Some("FCALL, and INCRBY for reference rules"),
                (0, _, _) => Some("EVALSHA, and INCRBY for reference rules"),
                _ => Some("FCALL and EVALSHA, and INCRBY for reference rules"),
            };
            if calls == 0 && counted > 0 {
                cost.per_call = Some(decisions as f64 / counted as f64);
            }
        }
        Ok(cost)
    }
}

/// User and system CPU process `pid` has used (Linux: `/proc/<pid>/stat`, fields 14 and
/// 15 in clock ticks, which are 1/100 s wherever Linux exposes them to user space).
fn process_cpu(pid: u32) -> anyhow::Result<Duration> {
    const TICKS_PER_SEC: u64 = 100;
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {path} (CPU per decision needs Linux's /proc)"))?;
    // The command name (field 2) may hold spaces: count from the `)` that ends it.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    // After the `)`: state is field 3, so utime (14) and stime (15) are 11 and 12.
    match (tick(11), tick(12)) {
        (Some(user), Some(system)) => Ok(Duration::from_millis(
            (user + system) * 1000 / TICKS_PER_SEC,
        )),
        _ => anyhow::bail!("{path} is not a process's stat line"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_uses_cpu_and_a_missing_one_is_an_error() {
        // Spins until the reading moves (a tick is 10 ms), for at most about 10^10
        // multiplications: seconds of CPU on any machine.
        let before = process_cpu(std::process::id()).unwrap();
        let mut x = 0u64;
        let mut rounds = 0;
        while process_cpu(std::process::id()).unwrap() == before {
            for _ in 0..1_000_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
            rounds += 1;
            assert!(rounds < 10_000, "no CPU counted");
        }
        let err = process_cpu(u32::MAX).unwrap_err().to_string();
        assert!(err.contains("/proc/"), "{err}");
    }
}
