//! Driving a target: a closed loop (N callers, each waiting for its answer) or an open
//! loop (requests sent on a fixed schedule, latency counted from the scheduled time so
//! that a slow target cannot hide its queueing: no coordinated omission). Keys come
//! uniformly from a population, from one hot key, or by a Zipf law.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use spillway_core::Key;
use tokio::sync::Semaphore;

use super::target::{HoldId, Outcome, Target};

/// How keys are chosen.
#[derive(Clone, Debug)]
pub enum Keys {
    Uniform(Arc<Vec<Key>>),
    Hot(Key),
    Zipf(Arc<Vec<Key>>, Zipf<f64>),
}

impl Keys {
    fn pick<'a>(&'a self, rng: &mut SmallRng) -> &'a Key {
        match self {
            Keys::Uniform(keys) => &keys[rng.random_range(0..keys.len())],
            Keys::Hot(key) => key,
            Keys::Zipf(keys, zipf) => {
                let rank = zipf.sample(rng) as usize; // 1..=n
                &keys[rank.clamp(1, keys.len()) - 1]
            }
        }
    }
}

/// How requests are sent.
#[derive(Clone, Copy, Debug)]
pub enum Loop {
    Closed { callers: usize },
    Open { per_sec: f64 },
}

/// `--hold`: each admitted request holds its slot of a `concurrency` limit this long,
/// then gives it back; the holds live at once, per key, as this process sees them (from
/// an admission to the sending of its release).
#[derive(Debug)]
pub struct Holds {
    pub hold: Duration,
    /// The descriptor key that carries a hold's id to a service.
    pub id_key: String,
    live: Mutex<HashMap<Key, u64>>,
    most: AtomicU64,
}

impl Holds {
    pub fn new(hold: Duration, id_key: String) -> Holds {
        Holds {
            hold,
            id_key,
            live: Mutex::default(),
            most: AtomicU64::new(0),
        }
    }

    /// The most holds of one key live at once so far.
    pub fn most(&self) -> u64 {
        self.most.load(Ordering::Relaxed)
    }

    fn enter(&self, key: &Key) {
        let mut live = self
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = live.entry(key.clone()).or_default();
        *n += 1;
        self.most.fetch_max(*n, Ordering::Relaxed);
    }

    fn leave(&self, key: &Key) {
        let mut live = self
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = live.get_mut(key) {
            *n -= 1;
        }
    }
}

/// One request: its outcome and latency (of the decision alone); with `holds`, an
/// admitted one then holds its slot and gives it back (a failed release is an error
/// of its own kind).
#[allow(clippy::disallowed_methods)] // a load generator measures real time
async fn one(
    target: &Target,
    key: &Key,
    worker: usize,
    timeout: Duration,
    holds: Option<&Holds>,
    tally: impl FnOnce(Outcome, Duration),
) -> Option<&'static str> {
    let sent = Instant::now();
    let Some(holds) = holds else {
        tally(
            target.call(key, worker, timeout, None).await,
            sent.elapsed(),
        );
        return None;
    };
    let id = String::from_utf8(spillway_core::new_hold_id().into()).expect("hex digits");
    let hold = HoldId {
        key: &holds.id_key,
        id: &id,
    };
    let outcome = target.call(key, worker, timeout, Some(hold)).await;
    let admitted = matches!(outcome, Outcome::Admitted | Outcome::Waited(_));
    tally(outcome, sent.elapsed());
    if !admitted {
        // A denial on the memory store comes back without ever yielding: the holders'
        // timers must get their turn.
        tokio::task::yield_now().await;
        return None;
    }
    holds.enter(key);
    tokio::time::sleep(holds.hold).await;
    holds.leave(key);
    match target.release(key, worker, timeout, hold).await {
        Outcome::Error(_) => Some("release"),
        _ => None,
    }
}

/// Everything a run measured.
#[derive(Debug)]
pub struct Tally {
    /// Nanoseconds.
    pub latency: Histogram<u64>,
    /// The waits of admissions after one, nanoseconds.
    pub waits: Histogram<u64>,
    pub admitted: u64,
    pub rejected: u64,
    pub errors: BTreeMap<&'static str, u64>,
    pub elapsed: Duration,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            latency: Histogram::new(3).expect("3 significant figures is valid"),
            waits: Histogram::new(3).expect("3 significant figures is valid"),
            admitted: 0,
            rejected: 0,
            errors: BTreeMap::new(),
            elapsed: Duration::ZERO,
        }
    }

    fn error(&mut self, kind: &'static str) {
        *self.errors.entry(kind).or_default() += 1;
    }

    fn record(&mut self, outcome: Outcome, latency: Duration) {
        // `record` grows the histogram as needed (`saturating_record` would clamp instead).
        let _ = self
            .latency
            .record(latency.as_nanos().try_into().unwrap_or(u64::MAX));
        match outcome {
            Outcome::Admitted => self.admitted += 1,
            Outcome::Waited(wait) => {
                self.admitted += 1;
                let _ = self
                    .waits
                    .record(wait.as_nanos().try_into().unwrap_or(u64::MAX));
            }
            Outcome::Rejected => self.rejected += 1,
            Outcome::Error(kind) => *self.errors.entry(kind).or_default() += 1,
        }
    }

    fn merge(&mut self, other: Tally) {
        let _ = self.latency.add(other.latency);
        let _ = self.waits.add(other.waits);
        self.admitted += other.admitted;
        self.rejected += other.rejected;
        for (k, n) in other.errors {
            *self.errors.entry(k).or_default() += n;
        }
    }

    pub fn decisions(&self) -> u64 {
        self.latency.len()
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// Runs the load for `duration`, with a progress bar on a terminal.
#[allow(clippy::disallowed_methods)] // a load generator measures real time
pub async fn run(
    target: Arc<Target>,
    keys: Keys,
    mode: Loop,
    (duration, timeout): (Duration, Duration),
    holds: Option<Arc<Holds>>,
    quiet: bool,
) -> Tally {
    let done = Arc::new(AtomicU64::new(0));
    let bar = progress(duration, quiet);
    let start = Instant::now();
    let ticker = tokio::spawn({
        let (bar, done) = (bar.clone(), Arc::clone(&done));
        async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tick.tick().await;
                let elapsed = start.elapsed();
                let n = done.load(Ordering::Relaxed);
                bar.set_position(elapsed.as_millis().min(duration.as_millis()) as u64);
                bar.set_message(format!(
                    "{n} decisions, {:.0}/s",
                    n as f64 / elapsed.as_secs_f64().max(1e-3)
                ));
            }
        }
    });

    let mut tally = match mode {
        Loop::Closed { callers } => {
            closed(
                target,
                keys,
                callers,
                start,
                (duration, timeout),
                holds,
                &done,
            )
            .await
        }
        Loop::Open { per_sec } => {
            open(
                target,
                keys,
                per_sec,
                start,
                (duration, timeout),
                holds,
                &done,
            )
            .await
        }
    };
    tally.elapsed = start.elapsed();
    ticker.abort();
    bar.finish_and_clear();
    tally
}

#[allow(clippy::disallowed_methods)]
async fn closed(
    target: Arc<Target>,
    keys: Keys,
    callers: usize,
    start: Instant,
    (duration, timeout): (Duration, Duration),
    holds: Option<Arc<Holds>>,
    done: &Arc<AtomicU64>,
) -> Tally {
    let tasks: Vec<_> = (0..callers)
        .map(|worker| {
            let (target, keys, done) = (Arc::clone(&target), keys.clone(), Arc::clone(done));
            let holds = holds.clone();
            tokio::spawn(async move {
                let mut rng = SmallRng::seed_from_u64(worker as u64);
                let mut tally = Tally::new();
                while start.elapsed() < duration {
                    let key = keys.pick(&mut rng);
                    let record = |outcome, latency| tally.record(outcome, latency);
                    let failed = one(&target, key, worker, timeout, holds.as_deref(), record).await;
                    if let Some(kind) = failed {
                        tally.error(kind);
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
                tally
            })
        })
        .collect();
    let mut all = Tally::new();
    for t in tasks {
        if let Ok(t) = t.await {
            all.merge(t);
        }
    }
    all
}

/// The most requests an open loop keeps in flight; past it the target is not keeping
/// up, and further requests are counted as `overload` errors instead of queued without end.
const MAX_IN_FLIGHT: usize = 10_000;

#[allow(clippy::disallowed_methods)]
async fn open(
    target: Arc<Target>,
    keys: Keys,
    per_sec: f64,
    start: Instant,
    (duration, timeout): (Duration, Duration),
    holds: Option<Arc<Holds>>,
    done: &Arc<AtomicU64>,
) -> Tally {
    // Answers are tallied under a lock rather than sent to a collecting task: waking
    // that task for every answer cost more CPU than the request itself.
    let tally = Arc::new(Mutex::new(Tally::new()));
    let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let runtime = tokio::runtime::Handle::current();
    let done = Arc::clone(done);
    // The schedule runs on a thread of its own with the OS's sleep (tens of µs late at
    // most), not on tokio's 1 ms timer wheel, whose lateness would count as latency.
    // Each wake sends every request already due: at high rates one sleep (and one
    // wake of the runtime) serves several, and the latency of each still counts from
    // its own due time.
    let scheduler = {
        let (tally, permits) = (Arc::clone(&tally), Arc::clone(&permits));
        tokio::task::spawn_blocking(move || {
            let interval = Duration::from_secs_f64(1.0 / per_sec);
            let mut rng = SmallRng::seed_from_u64(0);
            let mut n = 0u64;
            loop {
                // Fixed in advance: request n is due at start + n × interval.
                let due = start + interval.mul_f64(n as f64);
                if due.duration_since(start) >= duration {
                    break;
                }
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                    continue;
                }
                n += 1;
                let key = keys.pick(&mut rng).clone();
                let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
                    lock(&tally).record(Outcome::Error("overload"), due.elapsed());
                    continue;
                };
                let (target, tally, done) =
                    (Arc::clone(&target), Arc::clone(&tally), Arc::clone(&done));
                let holds = holds.clone();
                runtime.spawn(async move {
                    // Latency from the due time: the schedule's, not the send's.
                    let record = |outcome, _| lock(&tally).record(outcome, due.elapsed());
                    let failed =
                        one(&target, &key, n as usize, timeout, holds.as_deref(), record).await;
                    if let Some(kind) = failed {
                        lock(&tally).error(kind);
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                    drop(permit);
                });
            }
        })
    };
    let _ = scheduler.await;
    // Every request answered (or timed out): all permits back.
    let all = u32::try_from(MAX_IN_FLIGHT).expect("a small bound");
    let _ = permits.acquire_many(all).await;
    std::mem::replace(&mut *lock(&tally), Tally::new())
}

/// The tally, even after a request's task panicked while holding it.
fn lock(tally: &Mutex<Tally>) -> std::sync::MutexGuard<'_, Tally> {
    tally
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn progress(duration: Duration, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(duration.as_millis() as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{bar:40}] {elapsed}/{duration} {msg}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar
}
