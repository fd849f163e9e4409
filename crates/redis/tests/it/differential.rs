//! Differential property test: random sequences of (advance, batch of limits, costs,
//! members, usage charged after the fact and refunds; for a `concurrency` limit, takes,
//! renewals, releases and lapses, and with a wait its queue) give identical decisions from the memory store (the
//! Rust algorithms, the specification) and from the Lua script on a real Redis.

mod shares;

use crate::support;

use std::time::Duration;

use proptest::prelude::*;
use spillway_core::{
    Algorithm, Edge, Key, Limit, MemoryStore, Request, Store, Ticket, TicketKind, Timestamp,
};

fn algorithm() -> impl Strategy<Value = Algorithm> {
    prop_oneof![
        Just(Algorithm::FixedWindow),
        Just(Algorithm::SlidingLog),
        Just(Algorithm::TokenBucket),
        Just(Algorithm::Gcra),
        (
            prop::sample::select(vec![1u32, 2, 4, 10]),
            prop::sample::select(vec![Edge::Interpolate, Edge::Strict, Edge::Lenient])
        )
            .prop_map(|(precision, edge)| Algorithm::SlidingWindow { precision, edge }),
        prop::sample::select(vec![1u32, 2, 4, 10])
            .prop_map(|precision| Algorithm::Distinct { precision }),
        Just(Algorithm::Concurrency),
    ]
}

fn limit() -> impl Strategy<Value = Limit> {
    // Windows of at least a second: keys written in caller-clock mode expire on
    // Redis's clock, and a test step takes far less than that.
    let window = prop::sample::select(vec![1_000_000u64, 1_500_000, 7_000_000, 60_000_000]);
    // A wait (`max_wait`) on a third of the rate limits: admissions after a wait, and
    // the queue behind them, decided alike.
    let wait = prop_oneof![2 => Just(0u64), 1 => 1u64..3_000_000];
    // Budget alerts on half the fixed windows that count what they admit: the
    // thresholds each reaches, once a window, decided alike.
    let alerts = any::<bool>();
    (
        algorithm(),
        1u64..12,
        window,
        1u64..15,
        any::<bool>(),
        wait,
        alerts,
    )
        .prop_map(
            |(algorithm, n, window, burst, count_rejected, wait, alerts)| {
                let mut b = Limit::builder(algorithm, n, Duration::from_micros(window))
                    .count_rejected(count_rejected && !algorithm.takes_member());
                if algorithm == Algorithm::FixedWindow && !count_rejected && alerts {
                    b = b.alert_at(&[250, 500, 1000]);
                }
                if matches!(algorithm, Algorithm::TokenBucket | Algorithm::Gcra) {
                    b = b.burst(burst).max_wait(Duration::from_micros(wait));
                }
                // A concurrency limit with a wait keeps a queue: takes join it or keep
                // their place, leaves and give-backs leave it.
                if algorithm == Algorithm::Concurrency {
                    b = b.max_wait(Duration::from_micros(wait));
                }
                b.build().expect("valid limit")
            },
        )
}

/// One step: advance the clock by `advance` µs, then decide a batch of
/// (limit index, key index, cost, member index, charge); a `distinct` limit's cost is at
/// most 1, and it takes no usage; a `concurrency` limit's member is its hold's id, and
/// usage or a refund on it is a release.
#[derive(Clone, Debug)]
struct Step {
    advance: u64,
    batch: Vec<(usize, usize, u64, usize, Charge)>,
}

/// How a request of a batch charges.
#[derive(Clone, Copy, Debug)]
enum Charge {
    /// A request: checked, charged if the batch is admitted.
    Check,
    /// Usage, charged in full.
    Usage,
    /// Given back, charged this many µs ago (on the limits that refund; usage on the
    /// others).
    Refund(u64),
}

const MEMBERS: [&[u8]; 5] = [b"10.0.0.1", b"10.0.0.2", b"alice", b"", b"\x00\xff{}"];

fn step() -> impl Strategy<Value = Step> {
    let advance = prop_oneof![
        3 => Just(0u64),
        5 => 0u64..200_000,
        2 => 0u64..3_000_000,
        1 => 0u64..90_000_000,
    ];
    let item = (
        0usize..3,
        0usize..2,
        prop_oneof![6 => 0u64..4, 1 => 0u64..20],
        0..MEMBERS.len(),
        prop_oneof![
            6 => Just(Charge::Check),
            2 => Just(Charge::Usage),
            1 => Just(Charge::Refund(0)),
            1 => (0u64..120_000_000).prop_map(Charge::Refund),
        ],
    );
    (advance, prop::collection::vec(item, 1..4))
        .prop_map(|(advance, batch)| Step { advance, batch })
}

/// One runtime per test: the connection's driver task lives on it.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

fn check_equal(
    rt: &tokio::runtime::Runtime,
    store: &impl Store,
    case: u64,
    limits: &[Limit],
    steps: &[Step],
) -> Result<Compared, TestCaseError> {
    check_equal_with(rt, store, case, limits, steps, &MEMBERS)
}

/// What a sequence compared beyond admissions: denials, waits, holds found lapsed and
/// takes queued.
#[derive(Default)]
struct Compared {
    denied: u64,
    waited: u64,
    lapsed: u64,
    queued: u64,
    alerts: u64,
}

/// On a `concurrency` limit with a wait, each member as a ticket of each kind (its
/// nonce the member's index): `[kind][member]`.
fn tickets(members: &[&[u8]]) -> Vec<Vec<Vec<u8>>> {
    [
        TicketKind::Plain,
        TicketKind::Queue,
        TicketKind::Leave,
        TicketKind::GiveBack,
        TicketKind::Last,
    ]
    .into_iter()
    .map(|kind| {
        members
            .iter()
            .enumerate()
            .map(|(m, id)| {
                let id: &[u8] = if id.is_empty() { b"id" } else { id };
                Ticket::new(kind, m as u64).member(id)
            })
            .collect()
    })
    .collect()
}

fn check_equal_with(
    rt: &tokio::runtime::Runtime,
    store: &impl Store,
    case: u64,
    limits: &[Limit],
    steps: &[Step],
    members: &[&[u8]],
) -> Result<Compared, TestCaseError> {
    let mut compared = Compared::default();
    let memory = MemoryStore::new();
    let keys: Vec<Key> = (0..2)
        .map(|k| Key::grouped(&format!("case{case}"), &format!(":k{k}")).unwrap())
        .collect();
    let tickets = tickets(members);
    let mut now = Timestamp::from_secs(1_800_000_000);
    for (n, step) in steps.iter().enumerate() {
        now = now.saturating_add(Duration::from_micros(step.advance));
        let requests: Vec<Request<'_>> = step
            .batch
            .iter()
            .map(|&(l, k, cost, m, charge)| {
                let limit = &limits[l];
                if limit.algorithm().holds() && !limit.max_wait().is_zero() {
                    // Takes that queue (one in four cannot wait, one in four tries a
                    // last time), renewals, and releases that leave, give back or
                    // release.
                    let kind = match charge {
                        Charge::Check if cost % 4 == 3 => 0,
                        Charge::Check if cost % 4 == 2 => 4,
                        Charge::Check => 1,
                        Charge::Refund(ago) => [0, 2, 3][(ago % 3) as usize],
                        Charge::Usage => 0,
                    };
                    let id = &tickets[kind][m];
                    return match charge {
                        Charge::Check => Request::new(&keys[k], limit, cost).with_member(id),
                        Charge::Refund(_) => Request::release(&keys[k], limit, id),
                        _ => Request::renew(&keys[k], limit, id, cost),
                    };
                }
                if limit.algorithm().holds() {
                    // Takes, renewals (for usage) and releases (for refunds).
                    let id = if members[m].is_empty() {
                        b"id"
                    } else {
                        members[m]
                    };
                    return match charge {
                        Charge::Check => Request::new(&keys[k], limit, cost).with_member(id),
                        Charge::Refund(_) => Request::release(&keys[k], limit, id),
                        _ => Request::renew(&keys[k], limit, id, cost),
                    };
                }
                if limit.algorithm().counts_members() {
                    return Request::new(&keys[k], limit, cost.min(1)).with_member(members[m]);
                }
                let request = Request::new(&keys[k], limit, cost).with_member(members[m]);
                match charge {
                    Charge::Check => request,
                    Charge::Refund(ago) if limit.algorithm().refunds() => {
                        let at = now.saturating_sub(Duration::from_micros(ago));
                        Request::refund(&keys[k], limit, cost, at).with_member(members[m])
                    }
                    _ => Request {
                        usage: true,
                        ..request
                    },
                }
            })
            .collect();
        let want = rt.block_on(memory.check(&requests, now)).unwrap();
        let got = rt.block_on(store.check(&requests, now)).unwrap();
        prop_assert_eq!(&got, &want, "step {}: {:?}", n, step);
        compared.denied += u64::from(!want.allowed());
        compared.waited += want.decisions.iter().filter(|d| !d.wait.is_zero()).count() as u64;
        compared.lapsed += want.lapsed.iter().map(|l| l.1).sum::<u64>();
        compared.queued += want.decisions.iter().filter(|d| d.queued).count() as u64;
        compared.alerts += want.alerts.len() as u64;
    }
    Ok(compared)
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(300)
}

/// Runs `cases` random sequences against the store at `url` (through core's
/// `GuardedStore`, deny cache on, when `guarded`) and the memory store.
fn differential(url: &str, cases: u32, guarded: bool) {
    let rt = runtime();
    let store = rt.block_on(support::caller_clock_store(url, "differential"));
    if guarded {
        let breaker = spillway_core::Breaker::new(5, Duration::from_millis(500));
        return run_cases(
            &rt,
            &spillway_core::GuardedStore::new(store, breaker),
            cases,
        );
    }
    run_cases(&rt, &store, cases);
}

fn run_cases(rt: &tokio::runtime::Runtime, store: &impl Store, cases: u32) {
    let (lapsed, _, alerts) = run_cases_of(rt, store, cases, limit());
    // The sequences let holds lapse: the count of those cleared was compared too; and
    // budget alerts were reached.
    eprintln!("{lapsed} lapsed holds and {alerts} budget alerts compared");
    assert!(
        lapsed > 0,
        "no hold lapsed: the lapsed counts were never compared"
    );
    assert!(alerts > 0, "no budget alert was reached: none was compared");
}

/// Runs `cases` random sequences over limits of `limit`; the holds found lapsed, the
/// takes queued and the budget alerts reached they compared.
fn run_cases_of(
    rt: &tokio::runtime::Runtime,
    store: &impl Store,
    cases: u32,
    limit: impl Strategy<Value = Limit>,
) -> (u64, u64, u64) {
    use std::sync::atomic::{AtomicU64, Ordering};
    let (case, lapsed, queued) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let alerts = AtomicU64::new(0);
    proptest!(ProptestConfig::with_cases(cases), |(
        limits in prop::collection::vec(&limit, 3),
        steps in prop::collection::vec(step(), 1..40),
    )| {
        let n = case.fetch_add(1, Ordering::Relaxed);
        let compared = check_equal(rt, store, n, &limits, &steps)?;
        lapsed.fetch_add(compared.lapsed, Ordering::Relaxed);
        queued.fetch_add(compared.queued, Ordering::Relaxed);
        alerts.fetch_add(compared.alerts, Ordering::Relaxed);
    });
    (
        lapsed.into_inner(),
        queued.into_inner(),
        alerts.into_inner(),
    )
}

/// Limits that queue: `concurrency` with a wait, small enough to fill.
fn queue_limit() -> impl Strategy<Value = Limit> {
    let lease = prop::sample::select(vec![1_000_000u64, 7_000_000, 60_000_000]);
    (1u64..5, lease, 1u64..3_000_000).prop_map(|(n, lease, wait)| {
        Limit::builder(Algorithm::Concurrency, n, Duration::from_micros(lease))
            .max_wait(Duration::from_micros(wait))
            .build()
            .expect("valid limit")
    })
}

/// In-flight queues (takes that queue, try a last time or cannot wait; leaves and
/// give-backs) decide alike on Redis, Valkey and their Clusters.
#[test]
fn queues_decide_as_the_memory_store() {
    let rt = runtime();
    for url in [
        spillway_testkit::redis::standalone_url(),
        spillway_testkit::redis::cluster_url(),
        spillway_testkit::redis::valkey_url(),
        spillway_testkit::redis::valkey_cluster_url(),
    ] {
        let store = rt.block_on(support::caller_clock_store(&url, "queues"));
        let (_, queued, _) = run_cases_of(&rt, &store, cases() / 2, queue_limit());
        eprintln!("{url}: {queued} queued takes compared");
        assert!(queued > 0, "no take queued: the queues were never compared");
    }
}

#[test]
fn redis_decides_as_the_memory_store() {
    differential(&spillway_testkit::redis::standalone_url(), cases(), false);
}

/// The deny cache changes no decision: the same sequences through it.
#[test]
fn redis_through_the_deny_cache_decides_as_the_memory_store() {
    differential(
        &spillway_testkit::redis::standalone_url(),
        cases() / 2,
        true,
    );
}

#[test]
fn redis_cluster_decides_as_the_memory_store() {
    differential(&spillway_testkit::redis::cluster_url(), cases() / 4, false);
}

#[test]
fn valkey_decides_as_the_memory_store() {
    differential(&spillway_testkit::redis::valkey_url(), cases() / 2, false);
}

#[test]
fn valkey_cluster_decides_as_the_memory_store() {
    differential(
        &spillway_testkit::redis::valkey_cluster_url(),
        cases() / 4,
        false,
    );
}

/// A sketched `distinct` limit (above `distinct::EXACT_MAX`), Redis's own HyperLogLogs
/// in a ring of keys against the memory store's copy of them: the same decisions, the
/// same retry_after, through the limit and past it, with batches that touch one key
/// twice and peeks.
#[test]
fn sketched_distinct_on_redis_decides_as_the_memory_store() {
    use spillway_core::algorithm::distinct::EXACT_MAX;
    let pool: Vec<Vec<u8>> = (0..400)
        .map(|i| format!("198.51.{i}").into_bytes())
        .collect();
    let members: Vec<&[u8]> = pool.iter().map(Vec::as_slice).collect();
    let sketched = (
        prop::sample::select(vec![1u32, 2, 3, 4]),
        EXACT_MAX + 1..EXACT_MAX + 40,
        prop::sample::select(vec![60_000_000u64, 600_000_000]),
    )
        .prop_map(|(precision, n, window)| {
            Limit::new(
                Algorithm::Distinct { precision },
                n,
                Duration::from_micros(window),
            )
            .unwrap()
        });
    let step = (
        prop_oneof![8 => Just(0u64), 2 => 0u64..400_000, 1 => 0u64..2_000_000],
        prop::collection::vec(
            (
                0usize..2,
                0usize..2,
                prop_oneof![5 => Just(1u64), 1 => Just(0)],
                0..pool.len(),
                Just(Charge::Check),
            ),
            1..4,
        ),
    )
        .prop_map(|(advance, batch)| Step { advance, batch });
    let rt = runtime();
    let denied = std::sync::atomic::AtomicU64::new(0);
    for url in [
        spillway_testkit::redis::standalone_url(),
        spillway_testkit::redis::cluster_url(),
    ] {
        let store = rt.block_on(support::caller_clock_store(&url, "sketched"));
        let case = std::sync::atomic::AtomicU64::new(0);
        proptest!(ProptestConfig::with_cases(cases() / 20 + 1), |(
            limits in prop::collection::vec(sketched.clone(), 2),
            steps in prop::collection::vec(step.clone(), 300..600),
        )| {
            let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let d = check_equal_with(&rt, &store, n, &limits, &steps, &members)?.denied;
            denied.fetch_add(d, std::sync::atomic::Ordering::Relaxed);
        });
    }
    // The sequences reach the limits: the deny path and its retry_after were compared.
    let denied = denied.into_inner();
    eprintln!("{denied} denials compared");
    assert!(denied > 100, "too few denials to compare");
}
