//! Shares of an Envoy Rate Limit Quota Service bucket kept in Redis, so that Envoys
//! streaming to different Spillway replicas share one limit (`scripts/quota.lua` is the
//! code, the server's `rlqs` module the caller).
//!
//! A bucket is one hash; each *holder* (a replica's stream) is a field with its demand,
//! its share and when the share lapses. A [grant](RedisStore::grant_share) records the
//! holder's demand and gives it the least of its fair share and what the other live
//! shares leave of the limit, in one script call: the live shares never add up to more
//! than the limit, however many replicas grant at once. A holder's share lapses at its
//! TTL unless granted again, and the key when its last share does.

use redis::{Cmd, ErrorKind, ServerErrorKind, Value};
use spillway_core::Error as CoreError;

use super::RedisStore;
use crate::coalesce::Failure;

const SOURCE: &str = include_str!("../../scripts/quota.lua");

static SHA: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| redis::Script::new(SOURCE).get_hash().to_owned());

/// What a holder asks of a bucket at a report.
#[derive(Clone, Copy, Debug)]
pub struct Ask<'a> {
    /// The holder's name: unique among every replica's streams.
    pub holder: &'a str,
    /// Requests a second it reported, allowed and denied.
    pub demand: f64,
    /// The bucket's limit, requests a second.
    pub rate: f64,
    /// The caller's time, µs: used on a store whose time source is the caller's
    /// ([`TimeSource::Caller`](crate::TimeSource::Caller)); otherwise Redis's `TIME`
    /// decides which shares live, so replicas whose clocks differ agree.
    pub now: u64,
    /// How long the share lives unless granted again, µs.
    pub ttl: u64,
    /// The part of the limit split evenly among the holders.
    pub floor: f64,
    /// Holders of no demand counted in the fair shares as if they were there: room
    /// kept for an Envoy that comes to another replica (its share is granted at once,
    /// not when the others next report).
    pub headroom: u32,
    /// The holder whose Envoy this holder's is (its stream broke, and the Envoy came
    /// back on this one): its live share becomes this holder's.
    pub replaces: Option<&'a str>,
}

/// A grant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Granted {
    /// The holder's share, requests a second.
    pub share: f64,
    /// The bucket's live shares added up, the holder's with them.
    pub assigned: f64,
    /// How many hold the bucket, the holder with them.
    pub holders: u64,
    /// The holder had no live share and the others' live shares leave nothing of its
    /// fair one: it is booked with none (`share` 0) and must be sent nothing, so that its Envoy
    /// keeps what it runs (the assignment of a stream that broke, or its own
    /// `no_assignment_behavior`) rather than a denial. The others make room at their
    /// next grants.
    pub withheld: bool,
}

/// One live holder of a bucket, as Redis keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct Holding {
    /// Its name, as its grants gave it.
    pub holder: String,
    /// Requests a second it last reported.
    pub demand: f64,
    /// Its share, requests a second.
    pub share: f64,
    /// When its share lapses, µs.
    pub until: u64,
}

impl RedisStore {
    /// The Redis key of the RLQS bucket of `domain` and `pairs` (sorted).
    pub fn quota_key(&self, domain: &str, pairs: &[(String, String)]) -> String {
        crate::key::quota_key(&self.inner.layout.prefix, domain, pairs)
    }

    /// Grants `ask.holder` its share of the bucket at `key` (see the module's text).
    pub async fn grant_share(&self, key: &str, ask: Ask<'_>) -> Result<Granted, CoreError> {
        let numbers = [ask.demand, ask.rate, ask.floor];
        if numbers.iter().any(|n| !n.is_finite() || *n < 0.0) {
            return Err(CoreError::InvalidRequest(format!(
                "a quota grant's demand, rate and floor must be finite and at least 0: {numbers:?}"
            )));
        }
        let reply = self
            .quota(key, |c| {
                c.arg("grant").arg(ask.holder).arg(ask.demand).arg(ask.rate);
                self.now_arg(c, ask.now);
                c.arg(ask.ttl)
                    .arg(ask.floor)
                    .arg(ask.headroom)
                    .arg(ask.replaces.unwrap_or(""));
            })
            .await?;
        match texts(&reply).as_deref() {
            Some([share, assigned, holders, withheld]) => Ok(Granted {
                share: number(share)?,
                assigned: number(assigned)?,
                holders: number(holders)? as u64,
                withheld: withheld == "1",
            }),
            _ => Err(unexpected(&reply)),
        }
    }

    /// The live holders of the bucket at `key` at `now` (µs; Redis's `TIME` unless the
    /// store's time source is the caller's), in no order.
    pub async fn shares_held(&self, key: &str, now: u64) -> Result<Vec<Holding>, CoreError> {
        let reply = self
            .quota(key, |c| {
                c.arg("view");
                self.now_arg(c, now);
            })
            .await?;
        let texts = texts(&reply).ok_or_else(|| unexpected(&reply))?;
        texts
            .chunks_exact(4)
            .map(|h| {
                Ok(Holding {
                    holder: h[0].clone(),
                    demand: number(&h[1])?,
                    share: number(&h[2])?,
                    until: number(&h[3])? as u64,
                })
            })
            .collect()
    }

    /// The script's fair shares of `rate` among `demands` (no key read): what the
    /// server's Rust `shares` is tested against.
    pub async fn fair_shares(
        &self,
        rate: f64,
        floor: f64,
        demands: &[f64],
    ) -> Result<Vec<f64>, CoreError> {
        let reply = self
            .quota("spillway-fair-shares", |c| {
                c.arg("fair").arg(rate).arg(floor).arg(demands);
            })
            .await?;
        let texts = texts(&reply).ok_or_else(|| unexpected(&reply))?;
        texts.iter().map(|t| number(t)).collect()
    }

    /// `now` as the script reads it: `server` (Redis's `TIME`) unless the store's time
    /// source is the caller's.
    fn now_arg(&self, c: &mut Cmd, now: u64) {
        match self.inner.time {
            crate::TimeSource::Server => c.arg("server"),
            crate::TimeSource::Caller => c.arg(now),
        };
    }

    /// One call of the quota script on `key` with the arguments `args` adds: EVALSHA,
    /// and on NOSCRIPT one EVAL of the source (which caches it again).
    async fn quota(&self, key: &str, args: impl Fn(&mut Cmd)) -> Result<Value, CoreError> {
        let call = |verb: &str, script: &str| {
            let mut c = redis::cmd(verb);
            c.arg(script).arg(1).arg(key);
            args(&mut c);
            c
        };
        let inner = &self.inner;
        let sent = inner
            .bounded(inner.connection.query(&call("EVALSHA", &SHA)))
            .await;
        match sent {
            Err(Failure::Redis(e)) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                inner
                    .bounded(inner.connection.query(&call("EVAL", SOURCE)))
                    .await
            }
            other => other,
        }
        .map_err(Failure::error)
    }
}

/// A reply of bulk strings (and integers), as text.
fn texts(reply: &Value) -> Option<Vec<String>> {
    let Value::Array(items) = reply else {
        return None;
    };
    items
        .iter()
        .map(|v| match v {
            Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
            Value::Int(n) => Some(n.to_string()),
            _ => None,
        })
        .collect()
}

fn number(text: &str) -> Result<f64, CoreError> {
    text.parse()
        .map_err(|_| broken(format!("the quota script answered `{text}`, not a number")))
}

fn unexpected(reply: &Value) -> CoreError {
    broken(format!("the quota script answered {reply:?}"))
}

/// A reply no retry will mend.
fn broken(message: String) -> CoreError {
    CoreError::Store {
        source: message.into(),
        transient: false,
    }
}
