//! What every endpoint shares: the service, the header settings, and whether the
//! service is ready. (`app.rs` builds it from the configuration.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use spillway_core::{Ticket, TicketKind};

use crate::config::{Callers, Headers};
use crate::service::request::{CheckRequest, CheckResponse, Code, Valid};
use crate::service::{CheckError, Service};

mod queue;

/// The holds a check may have taken, given back when it is dropped armed: the same
/// request as a release (`/v1/release`: each descriptor gives back the hold it names,
/// nothing else is counted), sent on a task of its own. A release of a hold the call
/// never took finds nothing to give back (or the mark its denial left).
struct GiveBack<'a> {
    armed: Option<(&'a Arc<Service>, &'a Valid)>,
    /// Why, for `spillway_takes_given_back_total`: `cancelled` unless the store failed.
    reason: &'static str,
}

impl<'a> GiveBack<'a> {
    /// Armed for a request that may take holds: not for one that gives them back or
    /// renews them, or charges usage.
    fn arm(service: &'a Arc<Service>, req: &'a Valid) -> GiveBack<'a> {
        let takes = !(req.release || req.renew || req.usage);
        GiveBack {
            armed: takes.then_some((service, req)),
            reason: "cancelled",
        }
    }

    fn disarm(&mut self) {
        self.armed = None;
    }
}

impl Drop for GiveBack<'_> {
    fn drop(&mut self) {
        let Some((service, req)) = self.armed.take() else {
            return;
        };
        // Not a descriptor that is itself a release (Envoy's stream-done one).
        let descriptors: Vec<_> = req
            .descriptors
            .iter()
            .filter(|d| {
                d.entries
                    .first()
                    .is_none_or(|(k, _)| k != crate::service::RELEASE_ENTRY)
            })
            .cloned()
            .collect();
        if descriptors.is_empty() || !service.takes_holds(req) {
            return;
        }
        // A take that waits in a queue leaves it, or gives back the hold it got.
        let release = CheckRequest {
            release: true,
            descriptors,
            ticket: req.ticket.doing(spillway_core::TicketKind::GiveBack),
            ..CheckRequest::clone(req)
        }
        .validate();
        let (Ok(release), Ok(runtime)) = (release, tokio::runtime::Handle::try_current()) else {
            return;
        };
        crate::metrics::takes_given_back(self.reason);
        let service = Arc::clone(service);
        runtime.spawn(give_back(service, release));
    }
}

/// The most give-backs trying at once: past it, a take's hold lapses with its lease
/// (a store down for long makes many, and each tries for a minute).
const MAX_GIVING_BACK: usize = 4096;

/// Sends `release`; one the store did not answer (it failed, or its breaker was
/// open) is tried again a second later, for up to a minute (the default lease: a hold
/// lapses by then anyway).
async fn give_back(service: Arc<Service>, release: Valid) {
    static GIVING_BACK: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    if GIVING_BACK.fetch_add(1, Ordering::Relaxed) >= MAX_GIVING_BACK {
        GIVING_BACK.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    for _ in 0..60 {
        match service.checked(&release, None).await {
            Ok((_, checked)) if !checked.degraded => break,
            Err(CheckError::Invalid(_)) => break,
            _ => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
    GIVING_BACK.fetch_sub(1, Ordering::Relaxed);
}

/// What every endpoint shares.
#[derive(Debug)]
pub struct AppState {
    pub service: Arc<Service>,
    pub headers: Headers,
    /// What gRPC callers may ask beyond their descriptors (overrides, costs).
    pub grpc_callers: Callers,
    /// What `/v1/check` and `/json` callers may ask.
    pub http_callers: Callers,
    /// A permit per answer held for its wait, `max_waiters` in all: a client that sends
    /// many requests over a rule with a `max_wait` would otherwise choose how many the
    /// service holds (a key holds at most its rate times `max_wait` of them, as each
    /// reserved its slot; many keys hold as many as their clients send).
    pub waiters: tokio::sync::Semaphore,
    pub shutting_down: AtomicBool,
    /// The last policy load; subscribe to hear of reloads.
    pub load_status: tokio::sync::watch::Sender<LoadStatus>,
    /// The last candidate policy load (`--candidate-config`), if there is a candidate.
    pub candidate_status: tokio::sync::watch::Sender<LoadStatus>,
    /// How long an HTTP client may take to send a request's body, all of it (the
    /// header read timeout, again).
    pub body_read_timeout: Duration,
    /// Whether `/ui` serves the console page.
    pub ui: bool,
    /// How a reload reads the policy files.
    pub load_options: spillway_policy::LoadOptions,
    /// Rules come over xDS and none have arrived yet, and the service was not told to
    /// be ready without them (`FORCE_START_WITHOUT_INITIAL_CONFIG`): not ready.
    pub waiting_for_rules: AtomicBool,
    /// Not ready while no domain is loaded (`HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`).
    pub ready_needs_a_domain: bool,
    /// `/healthcheck` and gRPC health also fail while no connection to the store is up
    /// (`REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`); off, they follow the process alone.
    pub health_follows_store: bool,
    /// Whether the last probe of the store reached it (`upkeep` probes it each second
    /// when health follows the store): a refused or broken connection clears it, an
    /// answer sets it, and a slow answer leaves it as it was.
    pub store_connected: AtomicBool,
    /// The decision counters over the last minutes, for the console's charts.
    pub history: crate::history::History,
    /// The Rate Limit Quota Service's streams and buckets.
    pub quotas: crate::rlqs::Quotas,
    /// Overrides: limits set as data by the admin API (`/v1/limits`).
    pub limits: Arc<crate::limits::Registry>,
}

impl AppState {
    /// A set of rules is in force (over xDS): no longer waiting for the first.
    pub(crate) fn rules_arrived(&self) {
        self.waiting_for_rules.store(false, Ordering::Relaxed);
    }

    /// Decides `req` for a caller of a listener whose callers may ask what `callers`
    /// says (a request asking more is refused, or its overrides dropped); then, without
    /// holding up the answer, queues it for the candidate policies (if any) to decide in
    /// shadow.
    pub(crate) async fn check(
        &self,
        mut req: CheckRequest,
        callers: Callers,
        queue: Option<&'static str>,
    ) -> Result<CheckResponse, CheckError> {
        if queue.is_some() {
            req.ticket = Ticket::new(TicketKind::Queue, rand::random());
        }
        let req = req.admit(callers)?;
        crate::otel::domain(&tracing::Span::current(), &req.domain);
        // Armed before the store call: a call cancelled during it (Envoy resets the
        // stream when its client goes away, or its timeout passes) gives back what it
        // may have taken, as does one the store failed (a timed-out take may have
        // committed). Disarmed once the store has answered. A take waiting in a queue
        // stays armed while it waits: cancelled, it leaves the queue.
        let mut taking = GiveBack::arm(&self.service, &req);
        let released = self.service.released().notified();
        tokio::pin!(released);
        released.as_mut().enable();
        let mut answer = self.service.checked(&req, None).await;
        if let (Ok((first, _)), Some(api)) = (&answer, queue)
            && let Some(wait) = first.queued
        {
            let wait = first.may_wait_in_queue().then_some(wait);
            answer = self.wait_in_queue(&req, wait, api, released).await;
        }
        match &answer {
            Ok((_, checked)) if !checked.degraded => taking.disarm(),
            Err(CheckError::Invalid(_)) => taking.disarm(),
            // The store failed (the rules' failure policy answered): given back now.
            _ => taking.reason = "store_failed",
        }
        drop(taking);
        let (answer, _) = answer?;
        self.service.shadow(req, answer.overall == Code::Ok);
        Ok(answer)
    }

    /// Healthy, as the reference answers `/healthcheck` and gRPC health: the process
    /// serves (no shutdown begun, rules in force when it must wait for them) and, only
    /// when health follows the store, a connection to it is up. A slow store, or one
    /// that refuses every call, leaves a replica healthy: each request then fails on its
    /// own, as its failure policy says, and Envoy's `failure_mode_deny` decides.
    pub(crate) fn health(&self) -> Result<(), &'static str> {
        self.process()?;
        if self.health_follows_store && !self.store_connected.load(Ordering::Relaxed) {
            return Err("store unreachable");
        }
        Ok(())
    }

    /// The process's own part of health and readiness.
    fn process(&self) -> Result<(), &'static str> {
        if self.shutting_down.load(Ordering::Relaxed) {
            return Err("shutting down");
        }
        if self.waiting_for_rules.load(Ordering::Relaxed) {
            return Err("waiting for the first rules over xDS");
        }
        if self.ready_needs_a_domain && self.service.policies().domains().is_empty() {
            return Err("no domain loaded");
        }
        Ok(())
    }

    /// Probes the stores (the main one, and the per-second one if any) for
    /// [`health`](Self::health): a PING answered means a connection is up; one refused
    /// or broken means none is; one that timed out says nothing (the connection may be
    /// up and Redis busy) and changes nothing. Returns what a store said when it was not
    /// reached, for the log.
    pub(crate) async fn probe_store(&self) -> Option<String> {
        let mut down = None;
        let mut up = true;
        for (name, stores) in self.service.every_store() {
            match stores.store().ping().await {
                Ok(()) => {}
                // Nothing learned: the previous probe's answer stands for this store.
                Err(spillway_core::Error::Timeout(_)) => {
                    up &= self.store_connected.load(Ordering::Relaxed);
                }
                Err(e) => {
                    up = false;
                    down = Some(format!("{name}: {e}"));
                }
            }
        }
        self.store_connected.store(up, Ordering::Relaxed);
        down
    }

    /// Ready (`/readyz`, Spillway's own check), or why not in words any prober may
    /// read (never the store's own, which can name nodes and keys): healthy, and the
    /// store answers a PING within the store timeout.
    pub(crate) async fn readiness(&self) -> Result<(), String> {
        self.process().map_err(str::to_owned)?;
        for (_, stores) in self.service.every_store() {
            stores
                .store()
                .ping()
                .await
                .map_err(|_| "store unreachable".to_owned())?;
        }
        Ok(())
    }
}

/// What the last load did.
#[derive(Clone, Debug, Default)]
pub struct LoadStatus {
    /// Loads so far, good or bad (the first at startup included).
    pub generation: u64,
    /// The last load's errors, if it failed.
    pub error: Option<String>,
}
