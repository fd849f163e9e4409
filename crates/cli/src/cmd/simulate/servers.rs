//! `spillway simulate --servers N --lease L | --sync D`: N servers, each a guarded store
//! as `serve` builds one, sharing one store on the manual clock; arrival `i` goes to
//! server `i mod N`, as a round-robin balancer sends it. Each server's sync counts are
//! flushed on the same `MIN_SYNC` ticks as `serve`'s. Measured per aligned window
//! against the same limit decided exactly on one store, with the bounds that
//! `spillway validate` states.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use spillway_core::sharing::MIN_SYNC;
use spillway_core::{
    Breaker, DEFAULT_DENY_CACHE_BYTES, Guard, GuardedStore, Key, Limit, MemoryStore, Mode,
    OnStoreError, Request, Sharing, Source, Timestamp,
};

use super::replay::START;

/// One shared run, measured.
#[derive(Debug, Serialize)]
pub struct Shared {
    pub algorithm: &'static str,
    pub servers: usize,
    /// `exact`, `lease 20`, `sync 100ms`.
    pub sharing: String,
    pub requests: u64,
    pub admitted: u64,
    /// The same traffic, the same limit, decided exactly on one store.
    pub exact_admitted: u64,
    /// The most admitted in one window beyond what the exact run admitted in it.
    pub over_admitted: u64,
    /// The most admitted in one window short of what the exact run admitted in it.
    pub under_admitted: u64,
    /// What the bound allows for this run: lease 0; sync, `servers × m` with `m` the
    /// most one server admitted in any `2 × sync` of a window.
    pub bound_over: u64,
    /// Lease: `servers × lease`; sync 0.
    pub bound_under: u64,
    /// Decisions that took a store call (the rest were answered by a server's share,
    /// or by its deny cache), and the flush calls.
    pub store_calls: u64,
    /// The bound in words, as `spillway validate` prints it.
    pub bound: String,
}

/// Replays `arrivals` (µs after [`START`], sorted) over `servers` servers sharing
/// `limit` by `sharing`; `tick` after every request.
pub fn replay(
    limit: &Limit,
    sharing: Sharing,
    servers: usize,
    arrivals: &[u64],
    mut tick: impl FnMut(),
) -> Shared {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
    let store = Arc::new(MemoryStore::new());
    let exact = MemoryStore::new();
    let fleet: Vec<GuardedStore<Arc<MemoryStore>>> = (0..servers)
        .map(|_| {
            // As `serve` runs it with a remote store: shares and the deny cache on.
            GuardedStore::new(Arc::clone(&store), Breaker::new(5, Duration::from_secs(1)))
                .shares(true)
                .deny_cache(DEFAULT_DENY_CACHE_BYTES)
        })
        .collect();
    let key = Key::new("client").expect("valid key");
    let guard = [Guard::new(Mode::Enforce, OnStoreError::Closed).sharing(sharing)];
    let window = limit.window_micros();
    let period = MIN_SYNC.as_micros() as u64;
    let windows = arrivals.last().map_or(1, |t| (t / window) as usize + 1);
    // Per window: admitted here, admitted by the exact run, and each server's admitted times.
    let mut admitted = vec![0u64; windows];
    let mut exact_admitted = vec![0u64; windows];
    let mut times = vec![vec![Vec::new(); servers]; windows];
    let (mut ticked, mut store_calls, mut flushes) = (0, 0, 0);
    for (i, &at) in arrivals.iter().enumerate() {
        while ticked + period <= at {
            ticked += period;
            let now = Timestamp::from_micros(START.as_micros() + ticked);
            for server in &fleet {
                flushes += rt.block_on(server.flush(now)) as u64;
            }
        }
        let now = Timestamp::from_micros(START.as_micros() + at);
        let request = [Request::new(&key, limit, 1)];
        let w = (at / window) as usize;
        let server = i % servers;
        let answer = rt
            .block_on(fleet[server].decide(&request, &guard, now))
            .expect("cost 1 on one limit is a valid request, and the memory store answers");
        store_calls += u64::from(answer.sources[0] == Source::Store);
        if answer.batch.allowed() {
            admitted[w] += 1;
            times[w][server].push(at);
        }
        let exact = exact
            .decide_one(request[0], now)
            .expect("cost 1 is always a valid request");
        exact_admitted[w] += u64::from(exact.allowed());
        tick();
    }
    let span = match sharing {
        Sharing::Sync { every } => 2 * every.as_micros() as u64,
        _ => 0,
    };
    let most_by_one = times
        .iter()
        .flatten()
        .filter(|_| span > 0)
        .map(|t| super::replay::max_in_window(t, span))
        .max()
        .unwrap_or(0);
    let n = servers as u64;
    let (bound_over, bound_under) = match sharing {
        Sharing::Exact => (0, 0),
        Sharing::Lease { units } => (0, n * units),
        Sharing::Sync { .. } => (n * most_by_one, 0),
    };
    let diff = |f: fn(u64, u64) -> u64| {
        admitted
            .iter()
            .zip(&exact_admitted)
            .map(|(&a, &e)| f(a, e))
            .max()
            .unwrap_or(0)
    };
    Shared {
        algorithm: limit.algorithm().name(),
        servers,
        sharing: sharing.to_string(),
        requests: arrivals.len() as u64,
        admitted: admitted.iter().sum(),
        exact_admitted: exact_admitted.iter().sum(),
        over_admitted: diff(|a, e| a.saturating_sub(e)),
        under_admitted: diff(|a, e| e.saturating_sub(a)),
        bound_over,
        bound_under,
        store_calls: store_calls + flushes,
        bound: sharing.bound(),
    }
}
