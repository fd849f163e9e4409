//! Reservations: reserve an estimate on the request path (`/v1/reserve`), then commit
//! what the work really cost (`/v1/commit`): the excess charged as usage, into debt
//! past the limit, the unused estimate given back; `used: 0` releases it all.
//!
//! A reservation is a record in the store, under an id the caller keeps: the request
//! (domain, descriptors), its estimate and when it was charged. On Redis it is a key
//! with the reservation's TTL (`<prefix>reservation:<id>`), so it survives a restart of
//! Spillway and any replica can commit it; on the memory store it lives in this process.
//! The record is kept in the same store call as the estimate's charge (on Redis, one
//! script call: `scripts/record.lua`), so neither lands without the other. A commit
//! takes the record (`GETDEL`: one commit wins; refused while the breaker is open) and
//! settles against the rules in force then; a settle the store did not decide puts
//! the record back and answers 503. A reservation not committed within its TTL expires and its estimate
//! stays charged: a caller that never reports has most likely used what it reserved,
//! and giving it back would let a client that never commits spend for free.

use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};
use spillway_core::{Keep, Records, Reservation, Timestamp};
use spillway_policy::RuleLimit;

use super::request::{CheckError, CheckRequest, CheckResponse, Code, Descriptor, Valid};
use super::{Carried, Service};
use crate::store::Stores;

/// How long a reservation waits for its commit unless the caller says.
pub const DEFAULT_TTL: Duration = Duration::from_secs(300);

/// The longest a reservation may wait for its commit.
pub const MAX_TTL: Duration = Duration::from_secs(86_400);

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

/// After the handle of a reservation kept on the per-second store.
const PER_SECOND: &str = "~s";

impl Service {
    /// Reserves `req.hits` (the estimate) on every limit `req` matches, all or nothing,
    /// for `ttl`: admitted only if it fits, and then charged like any request, the
    /// record kept in the same store call as the charge. Refused (400) for usage,
    /// per-descriptor costs or limit overrides, a request no limit applies to, and
    /// rules whose limit cannot give units back (a sliding log or window, `distinct`).
    /// Admitted with no reservation when the store failed and the rules' failure
    /// policies admitted: nothing was charged on the store, nothing is to commit.
    pub async fn reserve(
        &self,
        req: &Valid,
        ttl: Duration,
    ) -> Result<(CheckResponse, Option<Reserved>), CheckError> {
        reservable(req, ttl)?;
        self.refundable(req)?;
        let at = self.now();
        let req = req.reserving();
        let record = Record {
            domain: req.domain.clone(),
            descriptors: req.descriptors.iter().map(|d| d.entries.clone()).collect(),
            estimate: req.hits,
            at: at.as_micros(),
            expires: at.saturating_add(ttl).as_micros(),
        };
        let id = new_id();
        let bytes = serde_json::to_vec(&record).expect("a record serializes");
        let carried = Carried::new(Keep {
            id: &id,
            record: &bytes,
            ttl,
        });
        let (answer, checked) = self.checked(&req, Some(&carried)).await?;
        if answer.overall != Code::Ok {
            return Ok((answer, None));
        }
        // A commit must find the record on the store that kept it.
        let id = checked.kept.map(|(store, handle)| match store {
            "per_second" => handle + PER_SECOND,
            _ => handle,
        });
        Ok((answer, id.map(|id| Reserved { id, ttl })))
    }

    /// Settles reservation `id` with what the work `used`: the excess over its estimate
    /// charged as usage, the rest of the estimate given back. The answer is the check
    /// after it: over the limit while a limit is in debt. When the store cannot settle
    /// it (down, the breaker open), the reservation is kept to commit again.
    pub async fn commit(&self, id: &str, used: u64) -> Result<Committed, CommitError> {
        if used > spillway_core::MAX_EXACT {
            return Err(CheckError::Invalid(format!("used {used} is larger than 2^53")).into());
        }
        let unknown = || CommitError::Unknown(id.to_owned());
        let Some((stores, handle)) = self.record_store(id) else {
            return Err(unknown());
        };
        let (name, stores) = stores;
        let bytes = stores
            .take(handle, self.now())
            .await
            .map_err(|failure| {
                super::decide::failed((name, stores), &failure, true);
                CheckError::Unavailable(format!(
                    "{}: the reservation is kept, commit it again",
                    super::decide::unavailable(&failure)
                ))
            })?
            .ok_or_else(unknown)?;
        let record: Record = serde_json::from_slice(&bytes).map_err(|_| unknown())?;
        let settlement = Reservation {
            estimate: record.estimate,
            at: Timestamp::from_micros(record.at),
        }
        .settlement(used);
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
            hits: settlement.units,
            usage: true,
            reserve: false,
            refund: settlement.refund,
            settle: true,
            release: false,
            renew: false,
            ticket: spillway_core::Ticket::default(),
        }
        .validate()?;
        let failed = match self.checked(&req, None).await {
            Ok((answer, checked)) if !checked.degraded => {
                return Ok(Committed {
                    estimate: record.estimate,
                    used,
                    answer,
                });
            }
            // A failure policy answered: nothing reached the store.
            Ok(_) => CheckError::Unavailable(
                "rate limit store unavailable: the commit did not reach it; the \
                 reservation is kept, commit it again"
                    .into(),
            ),
            Err(e) => e,
        };
        // Not settled: the record goes back for the caller to commit again. Straight
        // to the store, past the breaker: the record was taken a moment ago, and
        // trying costs one call.
        let left = record.expires.saturating_sub(self.now().as_micros());
        if left > 0 {
            let left = Duration::from_micros(left);
            if let Err(e) = stores.store().put(handle, &bytes, left, self.now()).await {
                tracing::warn!(error = %e, "a reservation taken for a commit that failed could not be kept again: its estimate stays charged");
            }
        }
        Err(failed.into())
    }

    /// The store keeping the record of reservation `id`, and its handle there: a
    /// reservation kept on the per-second store says so (`~s` after the handle).
    fn record_store<'a>(&self, id: &'a str) -> Option<((&'static str, &Stores), &'a str)> {
        if !valid_id(id) {
            return None;
        }
        match id.strip_suffix(PER_SECOND) {
            Some(handle) => Some((("per_second", self.per_second()?), handle)),
            None => Some((("main", &self.stores), id)),
        }
    }

    /// Every rule `req` matches can give back what a commit does not use, and some
    /// rule limits it.
    fn refundable(&self, req: &Valid) -> Result<(), CheckError> {
        let policies = self.policies();
        let Some(domain) = policies.domain(&req.domain) else {
            return Err(CheckError::Invalid(format!(
                "domain {:?} has no rules: no limit to reserve on",
                req.domain
            )));
        };
        let mut limited = false;
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
                if let RuleLimit::Limited(limit) = &rule.limit {
                    limited = true;
                    if req.hits > limit.max_usage() {
                        return Err(CheckError::Invalid(format!(
                            "descriptor {i}: an estimate of {} is more than rule {name} can \
                             give back at once ({})",
                            req.hits,
                            limit.max_usage()
                        )));
                    }
                }
            }
        }
        if !limited {
            return Err(CheckError::Invalid(format!(
                "no rule of domain {:?} limits these descriptors: no limit to reserve on",
                req.domain
            )));
        }
        Ok(())
    }
}

/// Refuses what a reservation cannot be: the estimate is the request's hits, charged
/// on every descriptor, on the policy's rules.
fn reservable(req: &Valid, ttl: Duration) -> Result<(), CheckError> {
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

/// `r` and 32 hex digits, then on Redis Cluster `-` and the hex of the slot's hash tag,
/// then `~s` when it was kept on the per-second store.
fn valid_id(id: &str) -> bool {
    let id = id.strip_suffix(PER_SECOND).unwrap_or(id);
    let (id, tag) = id.split_once('-').unwrap_or((id, ""));
    let hex = |s: &str| s.bytes().all(|b| b.is_ascii_hexdigit());
    id.len() == 33 && id.starts_with('r') && hex(&id[1..]) && tag.len() <= 1024 && hex(tag)
}
