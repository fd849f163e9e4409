//! The decide stage: the store rounds of one check (on Redis Cluster one per
//! descriptor, all at once; elsewhere one), and what answers when the store does not.

use std::cell::Cell;

use spillway_core::{Guard, Report, Request, Source, StoreFailure, Timestamp, Unanswered};
use spillway_policy::RuleLimit;
use tracing::Instrument;

use crate::metrics;
use crate::store;

use super::{Carried, Check, CheckError, Decided, Hit, Service};
use crate::store::Stores;

impl Service {
    /// The decide stage: the check's two rounds, at the same time; the decisions in
    /// hit order.
    pub(super) async fn decide(
        &self,
        check: &mut Check<'_>,
        carried: Option<&Carried<'_>>,
    ) -> Result<Vec<Decided>, CheckError> {
        let now = check.now;
        let work: u64 = check
            .hits
            .iter()
            .filter_map(request)
            .map(|r| spillway_core::work(&[r]))
            .sum();
        if work > self.options.max_request_work {
            return Err(CheckError::Invalid(format!(
                "this request would cost the store {work} units of work (its descriptors' rules: \
                 a sliding window's sub-windows, a log's entries, ...), the most one request \
                 may is {} (max_request_work)",
                self.options.max_request_work
            )));
        }
        if check.one_round
            && (self.stores.store().is_cluster() || self.spans_stores(&check.hits, &check.together))
        {
            self.stop_across_slots(&mut check.hits, &check.together, now)
                .await?;
        }
        // Nearly every check has only rules decided together: one round, awaited as
        // it is (see `at_once`).
        if check.alone.is_empty() {
            return self
                .rounds(&check.hits, &check.together, now, carried)
                .await;
        }
        at_once(
            self.rounds(&check.hits, &check.together, now, carried),
            self.rounds(&check.hits, &check.alone, now, carried),
        )
        .await
    }

    /// The store rounds for the hits at `which`: with a per-second store, its rules'
    /// on it and the others' on the main store, at once (all-or-nothing within each
    /// store, as no call spans two). `carried` rides the first of them to decide
    /// something.
    pub(super) async fn rounds(
        &self,
        hits: &[Hit<'_>],
        which: &[usize],
        now: Timestamp,
        carried: Option<&Carried<'_>>,
    ) -> Result<Vec<Decided>, CheckError> {
        if self.per_second().is_none() {
            return self
                .round(("main", &self.stores), hits, which, now, carried)
                .await;
        }
        let (second, main): (Vec<usize>, Vec<usize>) = which
            .iter()
            .partition(|&&i| self.stores_for(&hits[i].rule).0 == "per_second");
        let per_second = self
            .per_second()
            .map(|s| ("per_second", s))
            .expect("checked above");
        at_once(
            self.round(("main", &self.stores), hits, &main, now, carried),
            self.round(per_second, hits, &second, now, carried),
        )
        .await
    }

    /// Whether the hits at `which` decide on two stores (the per-second one and the
    /// main one).
    fn spans_stores(&self, hits: &[Hit<'_>], which: &[usize]) -> bool {
        self.per_second().is_some()
            && which
                .windows(2)
                .any(|w| self.stores_for(&hits[w[0]].rule).0 != self.stores_for(&hits[w[1]].rule).0)
    }

    /// The rounds on one store for the hits at `which`. On Redis Cluster each
    /// descriptor's limits share a slot, but different descriptors do not: there each
    /// descriptor is its own round (all of them at once), all-or-nothing within the
    /// descriptor.
    async fn round(
        &self,
        stores: (&'static str, &Stores),
        hits: &[Hit<'_>],
        which: &[usize],
        now: Timestamp,
        carried: Option<&Carried<'_>>,
    ) -> Result<Vec<Decided>, CheckError> {
        let spans_slots = spans_descriptors(hits, which);
        if !(stores.1.store().is_cluster() && spans_slots) {
            return self
                .round_on_one_slot(stores, hits, which, now, carried)
                .await;
        }
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for &i in which {
            match groups.last_mut() {
                Some(g) if hits[g[0]].descriptor == hits[i].descriptor => g.push(i),
                _ => groups.push(vec![i]),
            }
        }
        let rounds = groups
            .iter()
            .map(|g| self.round_on_one_slot(stores, hits, g, now, carried));
        let mut decided = Vec::with_capacity(which.len());
        for result in futures_util::future::join_all(rounds).await {
            decided.extend(result?);
        }
        Ok(decided)
    }

    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` on Redis Cluster, where a request's
    /// descriptors are in different slots and no one script sees them all (or on two
    /// stores, the per-second one and the main one): as the reference does, look first
    /// (cost 0), and if some rule would go over its limit, charge the others nothing.
    /// Two round trips, not atomic (as the reference's GET then INCRBY); one slot
    /// needs neither, its script decides it whole.
    pub(super) async fn stop_across_slots(
        &self,
        hits: &mut [Hit<'_>],
        which: &[usize],
        now: Timestamp,
    ) -> Result<(), CheckError> {
        let spans_slots = spans_descriptors(hits, which);
        if !spans_slots {
            return Ok(());
        }
        let costs: Vec<u64> = hits.iter().map(|h| h.cost).collect();
        for &i in which {
            hits[i].cost = 0;
        }
        let looked = self.rounds(hits, which, now, None).await;
        for (h, cost) in hits.iter_mut().zip(&costs) {
            h.cost = *cost;
        }
        let over: Vec<usize> = looked?
            .into_iter()
            .filter(|d| !d.decision.allowed() || d.decision.remaining < hits[d.hit].cost)
            .map(|d| d.hit)
            .collect();
        if !over.is_empty() {
            for &i in which {
                if !over.contains(&i) {
                    hits[i].cost = 0;
                }
            }
        }
        Ok(())
    }

    /// One store round; a failure goes to the rules' failure policies.
    pub(super) async fn round_on_one_slot(
        &self,
        (name, stores): (&'static str, &Stores),
        hits: &[Hit<'_>],
        which: &[usize],
        now: Timestamp,
        carried: Option<&Carried<'_>>,
    ) -> Result<Vec<Decided>, CheckError> {
        if which.is_empty() {
            return Ok(Vec::new());
        }
        let batch = requests(hits, which);
        let keep = carried
            .filter(|_| !batch.is_empty())
            .and_then(Carried::claim);
        let guards: Vec<Guard> = which
            .iter()
            .map(|&i| {
                let rule = &hits[i].rule;
                let policy = rule.on_store_error.unwrap_or(self.options.on_store_error);
                Guard::new(rule.mode, policy).sharing(rule.sharing)
            })
            .collect();
        let call = async {
            match keep {
                None => stores.decide(&batch, &guards, now).await.map(|a| (a, None)),
                Some(keep) => stores.decide_keeping(&batch, &guards, now, keep).await,
            }
        };
        let span = crate::otel::store_span(name, stores.store().kind(), batch.len());
        let result = call.instrument(span).await;
        let reporter = Reporter {
            store: (name, stores),
            locally: Cell::new(false),
        };
        spillway_core::report(result.as_ref().map(|(answer, _)| answer), &reporter);
        if reporter.locally.get() {
            metrics::fallback("local");
        }
        let answer = match result {
            Ok((answer, kept)) => {
                if let Some(carried) = carried.filter(|_| keep.is_some()) {
                    *carried.kept.lock() = kept.map(|handle| (name, handle));
                }
                answer
            }
            Err(Unanswered::Invalid(e)) => return Err(CheckError::Invalid(e.to_string())),
            // The caller learns the kind; the log has the store's own words (they
            // can name nodes and keys, which a caller has no business reading).
            Err(Unanswered::Unavailable(failure)) => {
                return Err(CheckError::Unavailable(unavailable(&failure)));
            }
        };
        // `degraded`: a failure policy decided, not the store (nor its cache).
        let mut decided: Vec<Decided> = which
            .iter()
            .zip(answer.batch.decisions)
            .zip(answer.sources)
            .map(|((&hit, decision), source)| Decided {
                hit,
                decision,
                degraded: source.degraded(),
                lapsed: 0,
                reached: None,
            })
            .collect();
        for (j, holds) in answer.batch.lapsed {
            decided[j].lapsed = holds;
        }
        for c in answer.batch.alerts {
            decided[c.request].reached = Some((c.from, c.to, c.used));
        }
        Ok(decided)
    }
}

/// Two sets of rounds at the same time, their decisions in hit order. Each is boxed: a
/// future holds every future it joins, and a check's future is copied whole at each
/// await that holds it, so unboxed these would add kilobytes to every decision's copies
/// (memory store included), while only a check with rules decided alone, or a service
/// with a per-second store, comes here.
/// (Boxed when called, not in an `async fn`'s body: that would keep both unboxed in its
/// own future until its first poll.)
fn at_once(
    a: impl Future<Output = Result<Vec<Decided>, CheckError>>,
    b: impl Future<Output = Result<Vec<Decided>, CheckError>>,
) -> impl Future<Output = Result<Vec<Decided>, CheckError>> {
    let (a, b) = (Box::pin(a), Box::pin(b));
    async move {
        let (a, b) = tokio::join!(a, b);
        let mut decided = a?;
        decided.extend(b?);
        decided.sort_unstable_by_key(|d| d.hit);
        Ok(decided)
    }
}

/// A round's answer in the service's metrics and log.
struct Reporter<'s> {
    store: (&'static str, &'s Stores),
    /// A decision of the round was `local`'s: counted once a round.
    locally: Cell<bool>,
}

impl Report for Reporter<'_> {
    fn failed(&self, failure: &StoreFailure, closed: bool) {
        failed(self.store, failure, closed);
        if closed {
            metrics::fallback("closed");
        }
    }

    fn answered_by(&self, _: usize, source: Source) {
        match source {
            Source::Store => {}
            Source::Cache => metrics::deny_cache_hit(),
            Source::Share => metrics::share_hit(),
            Source::Local => self.locally.set(true),
            Source::Open => metrics::fallback("open"),
        }
    }
}

/// A round the store did not answer: metrics, and a log line for a failed call.
pub(super) fn failed(
    (name, stores): (&'static str, &Stores),
    failure: &StoreFailure,
    closed: bool,
) {
    store::observe(name, stores, failure);
    // Only failed calls are logged: while the breaker is open nothing new is
    // learned, and a line per request would flood the log during an outage.
    if !matches!(failure, StoreFailure::BreakerOpen) {
        tracing::warn!(store = name, error = %failure, closed, "store failed; answering by each rule's on_store_error");
    }
}

/// What a caller is told when the store failed and a rule's policy is `closed`.
pub(crate) fn unavailable(failure: &StoreFailure) -> String {
    format!("rate limit store unavailable ({})", failure.kind())
}

/// Whether the hits at `which` (in descriptor order) belong to more than one
/// descriptor: on Redis Cluster, more than one slot.
fn spans_descriptors(hits: &[Hit<'_>], which: &[usize]) -> bool {
    which
        .windows(2)
        .any(|w| hits[w[0]].descriptor != hits[w[1]].descriptor)
}

pub(super) fn requests<'h>(hits: &'h [Hit<'_>], which: &[usize]) -> Vec<Request<'h>> {
    which.iter().filter_map(|&i| request(&hits[i])).collect()
}

/// A hit's store request: `None` when its rule has no limit or no key.
fn request<'h>(hit: &'h Hit<'_>) -> Option<Request<'h>> {
    match (&hit.rule.limit, &hit.key) {
        (RuleLimit::Limited(limit), Some(key)) => {
            let request = Request {
                usage: hit.usage,
                refund: hit.refund,
                ..Request::new(key, limit, hit.cost)
            };
            Some(match &hit.member {
                Some(m) => request.with_member(m.as_bytes()),
                None => request,
            })
        }
        _ => None,
    }
}
