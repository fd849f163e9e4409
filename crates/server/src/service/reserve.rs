//! Reservations: reserve an estimate on the request path (`/v1/reserve`), then commit
//! what the work really cost (`/v1/commit`): the excess charged as usage, into debt
//! past the limit, the unused estimate given back; `used: 0` releases it all.
//!
//! A reservation is a record in the store, under an id the caller keeps: the request
//! (domain, descriptors), its estimate and when it was charged. On Redis it is a key
//! with the reservation's TTL (`<prefix>reservation:<id>`), so it survives a restart of
//! Spillway and any replica can commit it; on the memory store it lives in this process.
//! A commit takes the record (`GETDEL`: one commit wins) and settles against the rules
//! in force then. A reservation not committed within its TTL expires and its estimate
//! stays charged: a caller that never reports has most likely used what it reserved,
//! and giving it back would let a client that never commits spend for free.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;
use rand::Rng;
use serde::{Deserialize, Serialize};
use spillway_core::Timestamp;
use spillway_policy::RuleLimit;

use super::Service;
use super::request::{CheckError, CheckRequest, CheckResponse, Code, Descriptor};
use crate::store::AnyStore;

/// How long a reservation waits for its commit unless the caller says.
pub const DEFAULT_TTL: Duration = Duration::from_secs(300);

/// The longest a reservation may wait for its commit.
pub const MAX_TTL: Duration = Duration::from_secs(86_400);

/// The most reservations the memory store keeps open at once.
const MAX_OPEN_IN_MEMORY: usize = 1_000_000;

/// A reservation made: its id, and how long it waits for its commit.
#[derive(Clone, Debug)]
pub struct Reserved {
    pub id: String,
    pub ttl: Duration,
}

/// What a commit was told: the estimate it settled, and the check after it.
#[derive(Clone, Debug)]
pub struct Committed {
    pub estimate: u64,
    pub used: u64,
    pub answer: CheckResponse,
}

/// Why a commit could not settle.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// No open reservation has this id: committed already, expired, or never made
    /// (HTTP 404).
    #[error(
        "no open reservation {0}: committed already, or expired after its ttl (its \
         estimate stays charged)"
    )]
    Unknown(String),
    #[error(transparent)]
    Check(#[from] CheckError),
}

/// What the store keeps of a reservation.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    domain: String,
    descriptors: Vec<Vec<(String, String)>>,
    estimate: u64,
    /// µs since the epoch: when the estimate was charged.
    at: u64,
    /// µs since the epoch: when the reservation expires.
    expires: u64,
}

/// The memory store's open reservations: record and when it expires.
#[derive(Debug, Default)]
pub(crate) struct Records(Mutex<HashMap<String, (Vec<u8>, Timestamp)>>);

impl Service {
    /// Reserves `req.hits` (the estimate) on every limit `req` matches, all or nothing,
    /// for `ttl`: admitted only if it fits, and then charged like any request. Refused
    /// (400) for usage, per-descriptor costs or limit overrides, and for rules whose
    /// limit cannot give units back (a sliding log or window, `distinct`).
    pub async fn reserve(
        &self,
        req: &CheckRequest,
        ttl: Duration,
    ) -> Result<(CheckResponse, Option<Reserved>), CheckError> {
        reservable(req, ttl)?;
        self.refundable(req)?;
        let at = self.now();
        let req = CheckRequest {
            reserve: true,
            ..req.clone()
        };
        let answer = self.check(&req).await?;
        if answer.overall != Code::Ok {
            return Ok((answer, None));
        }
        let record = Record {
            domain: req.domain.clone(),
            descriptors: req.descriptors.iter().map(|d| d.entries.clone()).collect(),
            estimate: req.hits,
            at: at.as_micros(),
            expires: at.saturating_add(ttl).as_micros(),
        };
        let id = new_id();
        let bytes = serde_json::to_vec(&record).expect("a record serializes");
        self.hold(&id, bytes, ttl)
            .await
            .map_err(|e| CheckError::Unavailable(format!("reservation not kept: {e}")))?;
        Ok((answer, Some(Reserved { id, ttl })))
    }

    /// Settles reservation `id` with what the work `used`: the excess over its estimate
    /// charged as usage, the rest of the estimate given back. The answer is the check
    /// after it: over the limit while a limit is in debt.
    pub async fn commit(&self, id: &str, used: u64) -> Result<Committed, CommitError> {
        if used > spillway_core::MAX_EXACT {
            return Err(CheckError::Invalid(format!("used {used} is larger than 2^53")).into());
        }
        let unknown = || CommitError::Unknown(id.to_owned());
        if !valid_id(id) {
            return Err(unknown());
        }
        let bytes = self
            .take(id)
            .await
            .map_err(|e| CheckError::Unavailable(format!("reservation not read: {e}")))?
            .ok_or_else(unknown)?;
        let record: Record = serde_json::from_slice(&bytes).map_err(|_| unknown())?;
        let at = Timestamp::from_micros(record.at);
        let req = CheckRequest {
            domain: record.domain.clone(),
            descriptors: record
                .descriptors
                .iter()
                .map(|entries| Descriptor {
                    entries: entries.clone(),
                    ..Descriptor::default()
                })
                .collect(),
            hits: used.abs_diff(record.estimate),
            usage: true,
            reserve: false,
            refund: (used < record.estimate).then_some(at),
        };
        let answer = match self.check(&req).await {
            Ok(answer) => answer,
            Err(e) => {
                // Not settled: the record goes back for the caller to commit again.
                let left = record.expires.saturating_sub(self.now().as_micros());
                if left > 0 {
                    let _ = self.hold(id, bytes, Duration::from_micros(left)).await;
                }
                return Err(e.into());
            }
        };
        Ok(Committed {
            estimate: record.estimate,
            used,
            answer,
        })
    }

    /// Every rule `req` matches can give back what a commit does not use.
    fn refundable(&self, req: &CheckRequest) -> Result<(), CheckError> {
        let policies = self.policies();
        let Some(domain) = policies.domain(&req.domain) else {
            return Ok(());
        };
        for (i, d) in req.descriptors.iter().enumerate() {
            let Some(m) = domain.resolve(&d.entries) else {
                continue;
            };
            for rule in m.rules {
                let name = rule.name.as_deref().unwrap_or(&rule.metric);
                if !super::rule_refunds(rule) {
                    return Err(CheckError::Invalid(format!(
                        "descriptor {i}: rule {name} cannot take a reservation: what a \
                         commit does not use is given back, which only a fixed_window, \
                         token_bucket or gcra limit can do"
                    )));
                }
                if let RuleLimit::Limited(limit) = &rule.limit
                    && req.hits > limit.max_usage()
                {
                    return Err(CheckError::Invalid(format!(
                        "descriptor {i}: an estimate of {} is more than rule {name} can give \
                         back at once ({})",
                        req.hits,
                        limit.max_usage()
                    )));
                }
            }
        }
        Ok(())
    }

    async fn hold(&self, id: &str, record: Vec<u8>, ttl: Duration) -> Result<(), String> {
        match self.stores.store() {
            AnyStore::Memory(_) => {
                let now = self.now();
                let mut open = self.records.0.lock();
                if open.len() >= MAX_OPEN_IN_MEMORY {
                    open.retain(|_, (_, expires)| *expires > now);
                }
                if open.len() >= MAX_OPEN_IN_MEMORY {
                    return Err(format!("{MAX_OPEN_IN_MEMORY} reservations open"));
                }
                open.insert(id.to_owned(), (record, now.saturating_add(ttl)));
                Ok(())
            }
            AnyStore::Redis(redis) => redis
                .hold_record("reservation", id, &record, ttl)
                .await
                .map_err(|e| e.to_string()),
        }
    }

    async fn take(&self, id: &str) -> Result<Option<Vec<u8>>, String> {
        match self.stores.store() {
            AnyStore::Memory(_) => {
                let now = self.now();
                let taken = self.records.0.lock().remove(id);
                Ok(taken.filter(|(_, expires)| *expires > now).map(|(r, _)| r))
            }
            AnyStore::Redis(redis) => redis
                .take_record("reservation", id)
                .await
                .map_err(|e| e.to_string()),
        }
    }
}

/// Refuses what a reservation cannot be: the estimate is the request's hits, charged
/// on every descriptor, on the policy's rules.
fn reservable(req: &CheckRequest, ttl: Duration) -> Result<(), CheckError> {
    let invalid = |m: String| Err(CheckError::Invalid(m));
    if req.usage {
        return invalid("a reservation is an estimate checked before the work, not usage".into());
    }
    if req.hits == 0 {
        return invalid("a reservation's estimate (cost) must be at least 1".into());
    }
    if ttl.is_zero() || ttl > MAX_TTL {
        return invalid(format!(
            "ttl_ms must be between 1 and {} (a day)",
            MAX_TTL.as_millis()
        ));
    }
    for (i, d) in req.descriptors.iter().enumerate() {
        if d.hits.is_some() {
            return invalid(format!(
                "descriptor {i}: a reservation's estimate is the request's cost, for every \
                 descriptor"
            ));
        }
        if d.limit.is_some() {
            return invalid(format!(
                "descriptor {i}: a reservation is made on the policy's rules, not a limit \
                 override"
            ));
        }
    }
    Ok(())
}

/// 128 random bits, hex: an id no one guesses, so no one commits another's reservation.
fn new_id() -> String {
    format!("r{:032x}", rand::rng().random::<u128>())
}

fn valid_id(id: &str) -> bool {
    id.len() == 33 && id.starts_with('r') && id[1..].bytes().all(|b| b.is_ascii_hexdigit())
}
