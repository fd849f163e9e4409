//! The scenario model and the runner.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use spillway_core::{Clock, Decision, Key, Limit, ManualClock, Outcome, Request, Store};

/// One conformance scenario: a name and its steps.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// What it checks.
    pub name: &'static str,
    /// The steps, in order.
    pub steps: Vec<Step>,
}

/// One step of a scenario.
#[derive(Debug, Clone)]
pub enum Step {
    /// Move the manual clock forward.
    Advance(Duration),
    /// Decide a batch of `(key, limit, cost)` and expect these decisions.
    Check {
        /// The requests.
        batch: Vec<(&'static str, Limit, u64)>,
        /// The first denying request, `None` if admitted.
        denied_by: Option<usize>,
        /// Every request's decision.
        want: Vec<Decision>,
    },
    /// Forget a key's state for a limit.
    Reset(&'static str, Limit),
    /// Decide one request bringing a member (`distinct`) and expect this decision.
    Member {
        /// The key.
        key: &'static str,
        /// The limit.
        limit: Limit,
        /// The cost (0 or 1).
        cost: u64,
        /// The member.
        member: &'static str,
        /// The decision.
        want: Decision,
    },
}

/// Runs every scenario against `store`; panics listing every mismatch.
pub async fn run_all<S: Store>(store: &S) {
    let mut failures = String::new();
    for scenario in crate::scenarios::all() {
        if let Err(e) = run(store, &scenario).await {
            let _ = writeln!(failures, "{e}");
        }
    }
    assert!(failures.is_empty(), "conformance failures:\n{failures}");
}

/// Runs one scenario on a fresh manual clock at [`T0`](crate::T0). Keys are prefixed
/// with the scenario name and a run number, so runs never see each other's state
/// even on a shared Redis.
pub async fn run<S: Store>(store: &S, scenario: &Scenario) -> Result<(), String> {
    static RUN: AtomicU64 = AtomicU64::new(0);
    let run = RUN.fetch_add(1, Ordering::Relaxed);
    let clock = ManualClock::new(crate::T0);
    let key =
        |k: &str| Key::new(format!("conformance:{run}:{}:{k}", scenario.name)).expect("valid key");
    for (n, step) in scenario.steps.iter().enumerate() {
        let at = |what: String| format!("{} step {n}: {what}", scenario.name);
        match step {
            Step::Advance(by) => clock.advance(*by),
            Step::Reset(k, limit) => store
                .reset(&key(k), limit, clock.now())
                .await
                .map_err(|e| at(format!("reset failed: {e}")))?,
            Step::Member {
                key: k,
                limit,
                cost,
                member,
                want,
            } => {
                let k = key(k);
                let request = Request::new(&k, limit, *cost).with_member(member.as_bytes());
                let got = store
                    .check(&[request], clock.now())
                    .await
                    .map_err(|e| at(format!("check failed: {e}")))?;
                if got.decisions[0] != *want {
                    return Err(at(format!(
                        "at T0+{:?}\n  request: {limit} cost {cost} member {member}\n  want:   {}\n  got:    {}",
                        clock.now().duration_since(crate::T0),
                        describe(std::slice::from_ref(want)),
                        describe(&got.decisions),
                    )));
                }
            }
            Step::Check {
                batch,
                denied_by,
                want,
            } => {
                let keys: Vec<Key> = batch.iter().map(|(k, _, _)| key(k)).collect();
                let requests: Vec<Request<'_>> = batch
                    .iter()
                    .zip(&keys)
                    .map(|((_, limit, cost), key)| Request::new(key, limit, *cost))
                    .collect();
                let got = store
                    .check(&requests, clock.now())
                    .await
                    .map_err(|e| at(format!("check failed: {e}")))?;
                if got.denied_by != *denied_by || got.decisions != *want {
                    return Err(at(format!(
                        "at T0+{:?}\n  batch:  {}\n  want:   denied_by {denied_by:?} {}\n  got:    denied_by {:?} {}",
                        clock.now().duration_since(crate::T0),
                        describe_batch(batch),
                        describe(want),
                        got.denied_by,
                        describe(&got.decisions),
                    )));
                }
            }
        }
    }
    Ok(())
}

fn describe_batch(batch: &[(&str, Limit, u64)]) -> String {
    let items: Vec<String> = batch
        .iter()
        .map(|(k, l, c)| format!("{k}: {l} cost {c}"))
        .collect();
    items.join("; ")
}

fn describe(decisions: &[Decision]) -> String {
    let items: Vec<String> = decisions
        .iter()
        .map(|d| {
            let outcome = match d.outcome {
                Outcome::Allowed => "allowed".to_string(),
                Outcome::Denied { retry_after } => format!("denied retry {retry_after:?}"),
                Outcome::CostExceedsCapacity => "never fits".to_string(),
            };
            format!(
                "[{outcome}, limit {}, remaining {}, reset {:?}]",
                d.limit, d.remaining, d.reset_after
            )
        })
        .collect();
    items.join(" ")
}
