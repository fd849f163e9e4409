//! A metered budget under concurrency, on every store: 40 clients each look at a budget
//! of 10,000 tokens, and when admitted report what their response used (1–2,000 tokens,
//! random) as usage charged after the fact. Nothing may leak: the budget's final debt is
//! exactly the sum of every usage reported, and no look is admitted once the budget is
//! in debt. The clock stands still, so nothing is paid back during the run; each
//! decision's `reset_after` (for `gcra` and `token_bucket`, the time to pay back what is
//! owed) tells how much the budget had spent at that instant, so each answer is checked
//! against the state it was decided on.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use spillway_core::{Algorithm, Key, Limit, MemoryStore, Request, Store, Timestamp};

const BUDGET: u64 = 10_000;
const CLIENTS: usize = 40;

/// What one client saw: the spent total at each admitted look, and each usage it
/// reported.
#[derive(Default)]
struct Seen {
    looks: Vec<u64>,
    usages: Vec<u64>,
}

/// The budget: 10,000 tokens in 10,000 s, so a token is one second of `reset_after`
/// (a `gcra` TAT, a `token_bucket` refill) and the total spent reads off it exactly.
fn budget(algorithm: Algorithm) -> Limit {
    Limit::new(algorithm, BUDGET, Duration::from_secs(BUDGET)).unwrap()
}

/// Tokens spent, from a decision's `reset_after` at a clock that has not moved.
fn spent(d: &spillway_core::Decision) -> u64 {
    let micros = d.reset_after.as_micros() as u64;
    assert_eq!(micros % 1_000_000, 0, "{d:?}");
    micros / 1_000_000
}

async fn run(store: Arc<impl Store + 'static>, name: &str, algorithm: Algorithm) {
    let limit = Arc::new(budget(algorithm));
    let key = Arc::new(Key::new(format!("tenant-{name}-{algorithm}")).unwrap());
    let now = Timestamp::from_secs(1_800_000_000);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (store, limit, key) = (store.clone(), limit.clone(), key.clone());
            tokio::spawn(async move {
                let mut rng = rand::rngs::StdRng::seed_from_u64(c as u64);
                let mut seen = Seen::default();
                loop {
                    let look = store
                        .check_one(Request::new(&key, &limit, 0), now)
                        .await
                        .unwrap();
                    if !look.allowed() {
                        return seen;
                    }
                    seen.looks.push(spent(&look));
                    let used = rng.random_range(1..=2_000);
                    let after = store
                        .check_one(Request::usage(&key, &limit, used), now)
                        .await
                        .unwrap();
                    seen.usages.push(used);
                    assert!(spent(&after) >= used, "{after:?}");
                }
            })
        })
        .collect();
    let mut seen = Seen::default();
    for client in clients {
        let s = client.await.unwrap();
        seen.looks.extend(s.looks);
        seen.usages.extend(s.usages);
    }
    let reported: u64 = seen.usages.iter().sum();
    let last = store
        .check_one(Request::new(&key, &limit, 0), now)
        .await
        .unwrap();
    assert!(!last.allowed(), "{name} {algorithm}: the budget is spent");
    assert_eq!(
        spent(&last),
        reported,
        "{name} {algorithm}: charged = reported"
    );
    assert!(reported > BUDGET, "{name} {algorithm}: {reported}");
    let over = seen.looks.iter().filter(|&&s| s > BUDGET).count();
    assert_eq!(over, 0, "{name} {algorithm}: looks admitted in debt");
    // Every admitted look was followed by its client's usage.
    assert_eq!(seen.looks.len(), seen.usages.len());
    eprintln!(
        "{name} {algorithm}: {} responses charged {reported} tokens against {BUDGET}, \
         debt {}; 0 looks admitted in debt",
        seen.usages.len(),
        reported - BUDGET
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_metered_budget_never_leaks_on_any_store() {
    for algorithm in [Algorithm::Gcra, Algorithm::TokenBucket] {
        run(Arc::new(MemoryStore::new()), "memory", algorithm).await;
        for (name, url) in support::targets() {
            let store = support::caller_clock_store(&url, "usage").await;
            run(Arc::new(store), name, algorithm).await;
        }
    }
}
