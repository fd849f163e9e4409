//! Shares of an Envoy Rate Limit Quota Service bucket kept in Redis, so that Envoys
//! streaming to different Spillway replicas share one rate (`scripts/fair_share.lua` is
//! the code, core's `fair_share` its readable spec and in-process twin, the server's
//! `rlqs` module the caller).
//!
//! A bucket is one hash; each *holder* (a replica's stream) is a field with its demand,
//! its share and when the share lapses. A [grant](RedisStore::grant_shares) records the
//! holder's demand and gives it the least of its fair share and what the other live
//! shares leave of the limit, in one script call: the live shares never add up to more
//! than the limit, however many replicas grant at once. A holder's share lapses at its
//! TTL unless granted again, and the key when its last share does.

use std::collections::BTreeMap;

use futures_util::StreamExt;
use redis::{Cmd, ErrorKind, ServerErrorKind, Value};
use spillway_core::Error as CoreError;
use spillway_core::Timestamp;
use spillway_core::fair_share::{Ask, Granted, Holding};

use super::RedisStore;
use crate::coalesce::Failure;

const SOURCE: &str = include_str!("../../scripts/fair_share.lua");

static SHA: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| redis::Script::new(SOURCE).get_hash().to_owned());

/// The most buckets granted in one script call: a report of a thousand buckets is
/// several short calls, not one that holds Redis for milliseconds while decisions wait.
pub const BUCKETS_A_CALL: usize = 64;

/// The most grant calls of one report on their way at once.
pub const CALLS_AT_ONCE: usize = 2;

impl RedisStore {
    /// The Redis key of the RLQS bucket of `domain` and `pairs` (sorted).
    pub fn quota_key(&self, domain: &str, pairs: &[(String, String)]) -> String {
        crate::key::quota_key(&self.inner.layout.prefix, domain, pairs)
    }

    /// Grants each `(key, ask)` of one report at `now` (the caller's time, used on a
    /// store whose time source is the caller's; otherwise Redis's `TIME` decides which
    /// shares live, so replicas whose clocks differ agree): the buckets of a Cluster
    /// slot together, [`BUCKETS_A_CALL`] a script call, [`CALLS_AT_ONCE`] calls at once.
    /// Every ask has the first one's holder, TTL, floor and headroom (one report's).
    /// The grant of each, in order (`None`: not granted), and the first error met.
    pub async fn grant_shares(
        &self,
        now: Timestamp,
        asks: &[(String, Ask<'_>)],
    ) -> (Vec<Option<Granted>>, Option<CoreError>) {
        let mut out: Vec<Option<Granted>> = vec![None; asks.len()];
        let mut error = None;
        let Some((_, first)) = asks.first() else {
            return (out, error);
        };
        // The asks that can go.
        let mut going = Vec::with_capacity(asks.len());
        for (i, (key, ask)) in asks.iter().enumerate() {
            let same = ask.holder == first.holder
                && ask.ttl == first.ttl
                && ask.floor == first.floor
                && ask.headroom == first.headroom;
            let checked = ask.check().and_then(|()| {
                (same.then_some(()))
                    .ok_or_else(|| "one call's grants are of one holder and TTL".to_string())
            });
            match checked {
                Ok(()) => going.push((i, key.as_str())),
                Err(e) => {
                    error.get_or_insert(CoreError::InvalidRequest(e));
                }
            }
        }
        let chunks = self.calls_of(going);
        let calls = chunks
            .into_iter()
            .map(|chunk| self.grant_chunk(now, asks, chunk));
        let mut replies = futures_util::stream::iter(calls).buffer_unordered(CALLS_AT_ONCE);
        while let Some((chunk, reply)) = replies.next().await {
            match reply {
                Ok(granted) => {
                    for (i, g) in chunk.into_iter().zip(granted) {
                        out[i] = Some(g);
                    }
                }
                Err(e) => {
                    error.get_or_insert(e);
                }
            }
        }
        (out, error)
    }

    /// `holder`'s Envoy took answers at `now`: for each `(key, runs)`, it runs `runs`
    /// from now on, and its booking there comes down to the larger of that and what it
    /// was last granted (core's `Shares::settle`). The calls as [`grant_shares`]'s, one
    /// at a time.
    ///
    /// [`grant_shares`]: RedisStore::grant_shares
    pub async fn settle_shares(
        &self,
        now: Timestamp,
        holder: &str,
        settles: &[(String, f64)],
    ) -> Result<(), CoreError> {
        if let Some((_, runs)) = settles.iter().find(|(_, r)| !r.is_finite() || *r < 0.0) {
            return Err(CoreError::InvalidRequest(format!(
                "a settled share must be finite and at least 0: {runs}"
            )));
        }
        let keys = settles
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (i, k.as_str()));
        for chunk in self.calls_of(keys.collect()) {
            let keys: Vec<&str> = chunk.iter().map(|&i| settles[i].0.as_str()).collect();
            self.quota(&keys, |c| {
                c.arg("settle");
                self.now_arg(c, now);
                c.arg(holder);
                for &i in &chunk {
                    c.arg(settles[i].1);
                }
            })
            .await?;
        }
        Ok(())
    }

    /// The calls that `keys` (each with its index) go in: those of a Cluster slot
    /// together (one slot off Cluster), [`BUCKETS_A_CALL`] a call; the indices of each.
    fn calls_of(&self, keys: Vec<(usize, &str)>) -> Vec<Vec<usize>> {
        let mut slots: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, key) in keys {
            let slot = if self.is_cluster() {
                crate::key::slot_of(hash_tag(key))
            } else {
                0
            };
            slots.entry(slot).or_default().push(i);
        }
        (slots.into_values())
            .flat_map(|slot| {
                slot.chunks(BUCKETS_A_CALL)
                    .map(<[usize]>::to_vec)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// One script call granting `asks[i]` for each `i` of `chunk` (keys of one slot);
    /// the chunk back, with the grants.
    async fn grant_chunk(
        &self,
        now: Timestamp,
        asks: &[(String, Ask<'_>)],
        chunk: Vec<usize>,
    ) -> (Vec<usize>, Result<Vec<Granted>, CoreError>) {
        let granted = self.grant_call(now, asks, &chunk).await;
        (chunk, granted)
    }

    async fn grant_call(
        &self,
        now: Timestamp,
        asks: &[(String, Ask<'_>)],
        chunk: &[usize],
    ) -> Result<Vec<Granted>, CoreError> {
        let first = &asks[chunk[0]].1;
        let keys: Vec<&str> = chunk.iter().map(|&i| asks[i].0.as_str()).collect();
        let reply = self
            .quota(&keys, |c| {
                c.arg("grant");
                self.now_arg(c, now);
                c.arg(u64::try_from(first.ttl.as_micros()).unwrap_or(u64::MAX))
                    .arg(first.floor)
                    .arg(first.headroom)
                    .arg(first.holder);
                for &i in chunk {
                    let ask = &asks[i].1;
                    c.arg(ask.demand)
                        .arg(ask.rate)
                        .arg(ask.replaces.unwrap_or(""))
                        .arg(ask.running);
                }
            })
            .await?;
        let texts = texts(&reply).ok_or_else(|| unexpected(&reply))?;
        if texts.len() != 4 * chunk.len() {
            return Err(unexpected(&reply));
        }
        texts
            .chunks_exact(4)
            .map(|g| {
                Ok(Granted {
                    share: number(&g[0])?,
                    assigned: number(&g[1])?,
                    holders: number(&g[2])? as u64,
                    withheld: g[3] == "1",
                })
            })
            .collect()
    }

    /// The live holders of the bucket at `key` at `now` (Redis's `TIME` unless the
    /// store's time source is the caller's), in name order.
    pub async fn shares_held(&self, key: &str, now: Timestamp) -> Result<Vec<Holding>, CoreError> {
        let reply = self
            .quota(&[key], |c| {
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
                    until: Timestamp::from_micros(number(&h[3])? as u64),
                })
            })
            .collect()
    }

    /// The script's fair shares of `rate` among `demands` (no key read): what core's
    /// `fair_share::fair` is tested against.
    pub async fn fair_shares(
        &self,
        rate: f64,
        floor: f64,
        demands: &[f64],
    ) -> Result<Vec<f64>, CoreError> {
        let reply = self
            .quota(&["spillway-fair-shares"], |c| {
                c.arg("fair").arg(rate).arg(floor).arg(demands);
            })
            .await?;
        let texts = texts(&reply).ok_or_else(|| unexpected(&reply))?;
        texts.iter().map(|t| number(t)).collect()
    }

    /// `now` as the script reads it: `server` (Redis's `TIME`) unless the store's time
    /// source is the caller's.
    fn now_arg(&self, c: &mut Cmd, now: Timestamp) {
        match self.inner.time {
            crate::TimeSource::Server => c.arg("server"),
            crate::TimeSource::Caller => c.arg(now.as_micros()),
        };
    }

    /// One call of the script on `keys` (of one slot) with the arguments `args` adds:
    /// EVALSHA, and on NOSCRIPT one EVAL of the source (which caches it again).
    async fn quota(&self, keys: &[&str], args: impl Fn(&mut Cmd)) -> Result<Value, CoreError> {
        let call = |verb: &str, script: &str| {
            let mut c = redis::cmd(verb);
            c.arg(script).arg(keys.len()).arg(keys);
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

/// A bucket key's hash tag (between its first `{` and the next `}`).
fn hash_tag(key: &str) -> &str {
    key.split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map_or(key, |(tag, _)| tag)
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
