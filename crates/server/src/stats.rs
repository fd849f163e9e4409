//! The reference's stats, for deployments whose dashboards, alerts and statsd agents
//! read them: `ratelimit.service.rate_limit.<domain>.<path>.total_hits` and the rest,
//! counted in **hits** as the reference counts them (a stream-done charge of 600 is 600
//! hits), served two ways:
//!
//! - as Prometheus series beside `spillway_*` (`reference_metrics`), named by a
//!   statsd_exporter mapping as the reference's in-process exporter names them
//!   (`mapper.rs`: the reference's default mapping, or `prometheus_mapper`'s);
//! - to statsd (`statsd_addr`): counters as deltas every `stats_flush_interval`,
//!   timers in ms, plain or DogStatsD (`statsd.rs`).
//!
//! Off (neither asked for), nothing here runs on the request path: each call site
//! checks [`Stats::on`] first. On, a decision costs a few atomic adds: each stat is
//! registered once, its Prometheus name mapped once, and kept with its rule.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use metrics::{Counter, CounterFn, Histogram};
use parking_lot::Mutex;
use spillway_policy::Rule;

mod hits;
pub mod mapper;
mod names;
pub(crate) mod statsd;

pub use hits::{Hits, hits};
use mapper::{Kind, Mapper};
pub use names::{REFERENCE_STATS, ReferenceStat};

/// The statsd name of a stat about `domain`'s rule at `path` (the reference's
/// `<DOMAIN>.<KEY_PATH>`), sanitised as the reference does: `:` and `|` become `_`,
/// and so do the dots of an IPv4 address.
pub fn rule_stat_name(domain: &str, path: &str, stat: &str) -> String {
    let raw = format!("ratelimit.service.rate_limit.{domain}.{path}.{stat}");
    sanitize(&raw)
}

fn sanitize(name: &str) -> String {
    let name = name.replace([':', '|'], "_");
    static IPV4: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let ipv4 = IPV4.get_or_init(|| {
        regex::Regex::new(r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}").expect("a valid pattern")
    });
    ipv4.replace_all(&name, |c: &regex::Captures<'_>| c[0].replace('.', "_"))
        .into_owned()
}

/// One counter, by its statsd name: its running total, what statsd has been sent of
/// it, and its Prometheus series (if the mapping keeps one).
#[derive(Debug)]
pub(crate) struct Stat {
    name: String,
    value: AtomicU64,
    sent: AtomicU64,
    prometheus: Option<Counter>,
}

impl CounterFn for Stat {
    fn increment(&self, n: u64) {
        self.value.fetch_add(n, Ordering::Relaxed);
        if let Some(p) = &self.prometheus {
            p.increment(n);
        }
    }

    fn absolute(&self, n: u64) {
        self.value.fetch_max(n, Ordering::Relaxed);
        if let Some(p) = &self.prometheus {
            p.absolute(n);
        }
    }
}

impl Stat {
    /// What has been counted since the last call (statsd counters are deltas).
    fn delta(&self) -> u64 {
        let now = self.value.load(Ordering::Relaxed);
        now - self.sent.swap(now, Ordering::Relaxed)
    }
}

/// What one send to statsd takes: counters' deltas (name, delta), then timer samples
/// (name, ms).
pub(crate) type Drained = (Vec<(String, u64)>, Vec<(&'static str, u64)>);

/// The reference's stats of one service. Cheap to share.
#[derive(Debug, Default)]
pub struct Stats {
    /// Whether any sink reads them.
    on: bool,
    /// Names the Prometheus series; `None`: no series.
    mapper: Option<Mapper>,
    /// Whether statsd is sent to (then timers are kept for it, and counters registered
    /// for its deltas).
    statsd: bool,
    counters: Mutex<Vec<Arc<Stat>>>,
    /// Timer samples (name, ms) waiting for statsd.
    timers: Samples,
    /// Counters of a name known only at run time (a domain's `domain_not_found`).
    by_name: Mutex<HashMap<String, Counter>>,
    /// The service's own, registered when the stats are made (no lookup per call).
    fixed: Option<Fixed>,
    response_time: Option<Histogram>,
}

/// The stats of fixed names, one handle each.
#[derive(Debug)]
struct Fixed {
    total_requests: Counter,
    redis_error: Counter,
    service_error: Counter,
    config_load_success: Counter,
    config_load_error: Counter,
    global_shadow: Counter,
}

/// The most timer samples kept between two sends to statsd (the reference drops them
/// too when its buffer is full): a second of a busy replica's requests.
const MAX_TIMER_SAMPLES: usize = 50_000;

/// Timer samples waiting for statsd, in shards so that the request threads adding them
/// do not queue on one lock: each thread adds to its own shard (by a number it takes
/// once), the sender takes them all.
#[derive(Debug, Default)]
struct Samples([Mutex<Vec<(&'static str, u64)>>; SHARDS]);

const SHARDS: usize = 16;

impl Samples {
    fn push(&self, name: &'static str, ms: u64) {
        use std::sync::atomic::AtomicUsize;
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        thread_local! {
            static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
        }
        let mut shard = self.0[SHARD.with(|s| *s)].lock();
        if shard.len() < MAX_TIMER_SAMPLES / SHARDS {
            shard.push((name, ms));
        }
    }

    fn take(&self) -> Vec<(&'static str, u64)> {
        self.0
            .iter()
            .flat_map(|shard| std::mem::take(&mut *shard.lock()))
            .collect()
    }
}

/// The reference's response-time timer (ms).
pub const RESPONSE_TIME: &str = "ratelimit_server.ShouldRateLimit.response_time";
const TOTAL_REQUESTS: &str = "ratelimit_server.ShouldRateLimit.total_requests";
const REDIS_ERROR: &str = "ratelimit.service.call.should_rate_limit.redis_error";
const SERVICE_ERROR: &str = "ratelimit.service.call.should_rate_limit.service_error";
const CONFIG_LOAD_SUCCESS: &str = "ratelimit.service.config_load_success";
const CONFIG_LOAD_ERROR: &str = "ratelimit.service.config_load_error";
const GLOBAL_SHADOW: &str = "ratelimit.service.global_shadow_mode";

impl Stats {
    /// Stats read by a Prometheus mapping (`None`: no series) and, with `statsd`,
    /// sent to statsd.
    pub fn new(mapper: Option<Mapper>, statsd: bool) -> Stats {
        let response_time = mapper
            .as_ref()
            .and_then(|m| m.map(RESPONSE_TIME, Kind::Timer))
            .map(|m| metrics::histogram!(m.name, m.labels));
        let mut stats = Stats {
            on: mapper.is_some() || statsd,
            mapper,
            statsd,
            response_time,
            ..Stats::default()
        };
        if stats.on {
            stats.fixed = Some(Fixed {
                total_requests: stats.counter(TOTAL_REQUESTS.into()),
                redis_error: stats.counter(REDIS_ERROR.into()),
                service_error: stats.counter(SERVICE_ERROR.into()),
                config_load_success: stats.counter(CONFIG_LOAD_SUCCESS.into()),
                config_load_error: stats.counter(CONFIG_LOAD_ERROR.into()),
                global_shadow: stats.counter(GLOBAL_SHADOW.into()),
            });
        }
        stats
    }

    /// Whether anything reads the stats: check before computing any.
    #[inline]
    pub fn on(&self) -> bool {
        self.on
    }

    /// A counter named `name` in statsd, its series as the mapping says.
    pub(crate) fn counter(&self, name: String) -> Counter {
        let prometheus = self
            .mapper
            .as_ref()
            .and_then(|m| m.map(&name, Kind::Counter))
            .map(|m| metrics::counter!(m.name, m.labels));
        let stat = Arc::new(Stat {
            name,
            value: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            prometheus,
        });
        if self.statsd {
            self.counters.lock().push(Arc::clone(&stat));
        }
        Counter::from_arc(stat)
    }

    /// Adds `n` to the counter named `name`, registered on its first use. For stats
    /// whose name is known only at run time; a rule's own are kept with the rule.
    pub(crate) fn add(&self, name: &str, n: u64) {
        if !self.on {
            return;
        }
        let mut by_name = self.by_name.lock();
        match by_name.get(name) {
            Some(c) => c.increment(n),
            None => {
                let c = self.counter(name.to_owned());
                c.increment(n);
                by_name.insert(name.to_owned(), c);
            }
        }
    }

    /// One rule's decision of `hits`, in the reference's stats.
    pub(crate) fn rule(&self, domain: &str, rule: &Rule, hits: Hits) {
        let c = &rule.counters;
        let add = |handle: &spillway_policy::Handle, stat: &str, n: u64| {
            if n > 0 {
                handle
                    .get_or_register(|| self.counter(rule_stat_name(domain, &rule.metric, stat)))
                    .increment(n);
            }
        };
        add(&c.total_hits, "total_hits", hits.total);
        add(&c.hits_over_limit, "over_limit", hits.over_limit);
        add(&c.hits_near_limit, "near_limit", hits.near_limit);
        add(&c.within_limit, "within_limit", hits.within_limit);
        add(&c.shadow_mode, "shadow_mode", hits.shadow_mode);
    }

    /// A gRPC `ShouldRateLimit` call answered after `took`.
    pub(crate) fn grpc_call(&self, took: Duration) {
        let Some(fixed) = &self.fixed else { return };
        fixed.total_requests.increment(1);
        if let Some(h) = &self.response_time {
            h.record(took.as_secs_f64());
        }
        if self.statsd {
            let ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
            self.timers.push(RESPONSE_TIME, ms);
        }
    }

    /// A request failed: its store failed (`redis_error`), or it was refused
    /// (`service_error`).
    pub(crate) fn call_error(&self, store: bool) {
        if let Some(f) = &self.fixed {
            if store {
                &f.redis_error
            } else {
                &f.service_error
            }
            .increment(1);
        }
    }

    /// A (re)load of the rules: `config_load_success` or `config_load_error`.
    pub(crate) fn config_load(&self, ok: bool) {
        if let Some(f) = &self.fixed {
            if ok {
                &f.config_load_success
            } else {
                &f.config_load_error
            }
            .increment(1);
        }
    }

    /// A request named a domain no rule set defines.
    pub(crate) fn domain_not_found(&self, domain: &str, descriptors: u64) {
        if self.on {
            let name = sanitize(&format!(
                "ratelimit.service.rate_limit.{domain}.domain_not_found"
            ));
            self.add(&name, descriptors);
        }
    }

    /// The global shadow mode turned an over-limit answer into OK.
    pub(crate) fn global_shadow(&self) {
        if let Some(f) = &self.fixed {
            f.global_shadow.increment(1);
        }
    }

    /// Counters' deltas since the last call (zero deltas left out, as the reference
    /// leaves them), then the timer samples taken meanwhile.
    pub(crate) fn drain(&self, counters: bool) -> Drained {
        let deltas = if counters {
            self.counters
                .lock()
                .iter()
                .filter_map(|s| Some((s.name.clone(), Some(s.delta()).filter(|&d| d > 0)?)))
                .collect()
        } else {
            Vec::new()
        };
        (deltas, self.timers.take())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitised_as_the_reference_does() {
        assert_eq!(
            rule_stat_name("domain", "masked_remote_address_0.0.0.0/0", "over_limit"),
            "ratelimit.service.rate_limit.domain.masked_remote_address_0_0_0_0/0.over_limit"
        );
        assert_eq!(
            rule_stat_name("d", "a.remote_address_172.18.0.1", "total_hits"),
            "ratelimit.service.rate_limit.d.a.remote_address_172_18_0_1.total_hits"
        );
        assert_eq!(
            rule_stat_name("d", "foo:bar.x|y", "near_limit"),
            "ratelimit.service.rate_limit.d.foo_bar.x_y.near_limit"
        );
    }
}
