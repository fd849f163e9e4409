//! Where the shares are booked: in this process ([`MemoryLedger`]), or in Redis with
//! every other replica's ([`RedisLedger`], on a connection, timeout and breaker of its
//! own, so that a report of a thousand buckets never counts against the decisions').
//! Both follow one rule set, `spillway_core::fair_share` (the Lua twin runs it in Redis).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use futures_util::future::BoxFuture;
use parking_lot::Mutex;
use spillway_core::fair_share::{Ask, Granted, Holding, Shares};
use spillway_core::{Breaker, BreakerState, DEFAULT_FAILURES_TO_OPEN, Error, Timestamp, Trip};
use spillway_redis::RedisStore;

use super::buckets::BucketKey;
use crate::metrics;

/// The shares of every bucket.
pub trait Ledger: Send + Sync {
    /// Grants each `(bucket, ask)` of one report at `now` (one holder's): the grant of
    /// each, in order; `None` where none was made (each counted in
    /// `spillway_rlqs_refused_buckets_total`), so nothing is sent and Envoy runs what it
    /// has until its TTL.
    fn grant<'a>(
        &'a self,
        now: Timestamp,
        asks: &'a [(&'a BucketKey, Ask<'a>)],
    ) -> BoxFuture<'a, Vec<Option<Granted>>>;

    /// `holder`'s Envoy took answers at `now` and runs, for each `(bucket, runs)`,
    /// `runs` from now on: the bookings come down to it (never below what was last
    /// granted), so that a decrease frees its room as soon as its Envoy has it. A
    /// failure leaves the larger booking, which the holder's next grant settles.
    fn settle<'a>(
        &'a self,
        now: Timestamp,
        holder: &'a str,
        settles: &'a [(BucketKey, f64)],
    ) -> BoxFuture<'a, ()>;

    /// The live holders of `bucket` at `now`, in name order.
    fn held<'a>(
        &'a self,
        bucket: &'a BucketKey,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Vec<Holding>, Error>>;

    /// Forgets what lapsed by `now` (Redis forgets on its own).
    fn expire(&self, now: Timestamp);
}

/// The shares in this process.
#[derive(Debug, Default)]
pub struct MemoryLedger {
    buckets: Mutex<HashMap<BucketKey, Shares>>,
}

impl Ledger for MemoryLedger {
    fn grant<'a>(
        &'a self,
        now: Timestamp,
        asks: &'a [(&'a BucketKey, Ask<'a>)],
    ) -> BoxFuture<'a, Vec<Option<Granted>>> {
        let mut buckets = self.buckets.lock();
        let granted = (asks.iter())
            .map(|(key, ask)| {
                ask.check().ok()?;
                let grant = match buckets.get_mut(*key) {
                    Some(shares) => shares.grant(ask, now),
                    None => {
                        let mut shares = Shares::default();
                        let grant = shares.grant(ask, now);
                        buckets.insert(BucketKey::clone(key), shares);
                        grant
                    }
                };
                Some(grant)
            })
            .collect();
        Box::pin(std::future::ready(granted))
    }

    fn settle<'a>(
        &'a self,
        now: Timestamp,
        holder: &'a str,
        settles: &'a [(BucketKey, f64)],
    ) -> BoxFuture<'a, ()> {
        let mut buckets = self.buckets.lock();
        for (key, runs) in settles {
            if let Some(shares) = buckets.get_mut(key) {
                shares.settle(holder, *runs, now);
            }
        }
        Box::pin(std::future::ready(()))
    }

    fn held<'a>(
        &'a self,
        bucket: &'a BucketKey,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Vec<Holding>, Error>> {
        let held = (self.buckets.lock().get(bucket)).map_or_else(Vec::new, |s| s.live(now));
        Box::pin(std::future::ready(Ok(held)))
    }

    fn expire(&self, now: Timestamp) {
        self.buckets.lock().retain(|_, s| !s.forget(now));
    }
}

/// The shares in Redis, shared by every replica using it.
#[derive(Debug)]
pub struct RedisLedger {
    /// RLQS's own store: rebuilt (a new connection) each time the breaker opens.
    redis: Arc<ArcSwap<RedisStore>>,
    breaker: Breaker,
    timeout: Duration,
    rebuilding: Arc<AtomicBool>,
    /// The service's `key_prefix`, before each bucket's domain: services with
    /// different prefixes share no bucket in one Redis, as they share no counter.
    key_prefix: String,
}

impl RedisLedger {
    /// Over `redis`: a store of RLQS's own (its connection, and `timeout` a call). Its
    /// breaker opens after the house's run of failures and lets a probe through every
    /// `timeout`: a dead Redis costs the reports at most one timed-out call at a time.
    /// Each time it opens, the connection is built anew (a connection that lost bytes
    /// answers each call with another's reply, and a probe at a time would not find
    /// out for long: the reliability suite's `proxy-drop`). Bucket keys start with
    /// `key_prefix` (the service's).
    pub fn new(redis: RedisStore, timeout: Duration, key_prefix: &str) -> RedisLedger {
        RedisLedger {
            redis: Arc::new(ArcSwap::from_pointee(redis)),
            breaker: Breaker::tripping(Trip::InARow(DEFAULT_FAILURES_TO_OPEN), timeout),
            timeout,
            rebuilding: Arc::default(),
            key_prefix: key_prefix.to_owned(),
        }
    }

    /// The Redis key of `bucket`'s shares.
    fn key(&self, redis: &RedisStore, bucket: &BucketKey) -> String {
        if self.key_prefix.is_empty() {
            return redis.quota_key(&bucket.domain, &bucket.pairs);
        }
        let scoped = format!("{}{}", self.key_prefix, bucket.domain);
        redis.quota_key(&scoped, &bucket.pairs)
    }

    /// A failure at `now`: counted, and the connection rebuilt if the breaker opens.
    fn failed(&self, now: Timestamp) {
        self.breaker.failure(now);
        if self.breaker.state() != BreakerState::Open
            || self.rebuilding.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let (redis, rebuilding, timeout) = (
            Arc::clone(&self.redis),
            Arc::clone(&self.rebuilding),
            self.timeout,
        );
        tokio::spawn(async move {
            match redis.load().another(timeout).await {
                Ok(fresh) => redis.store(Arc::new(fresh)),
                Err(e) => {
                    tracing::warn!(error = %e, "RLQS's Redis connection could not be rebuilt")
                }
            }
            rebuilding.store(false, Ordering::Release);
        });
    }
}

impl Ledger for RedisLedger {
    fn grant<'a>(
        &'a self,
        now: Timestamp,
        asks: &'a [(&'a BucketKey, Ask<'a>)],
    ) -> BoxFuture<'a, Vec<Option<Granted>>> {
        Box::pin(async move {
            if asks.is_empty() {
                return Vec::new();
            }
            if !self.breaker.admit(now) {
                for _ in asks {
                    metrics::rlqs_refused("breaker_open");
                }
                return vec![None; asks.len()];
            }
            let redis = self.redis.load_full();
            let keyed: Vec<(String, Ask<'_>)> = (asks.iter())
                .map(|(b, ask)| (self.key(&redis, b), *ask))
                .collect();
            let (granted, error) = redis.grant_shares(now, &keyed).await;
            match error {
                Some(e) => {
                    let refused = granted.iter().filter(|g| g.is_none()).count();
                    for _ in 0..refused {
                        metrics::rlqs_refused("store_failed");
                    }
                    tracing::warn!(error = %e, refused, "RLQS shares could not be granted through Redis");
                    if e.is_invalid_input() {
                        self.breaker.success(now);
                    } else {
                        self.failed(now);
                    }
                }
                None => self.breaker.success(now),
            }
            granted
        })
    }

    fn settle<'a>(
        &'a self,
        now: Timestamp,
        holder: &'a str,
        settles: &'a [(BucketKey, f64)],
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if settles.is_empty() || !self.breaker.admit(now) {
                return;
            }
            let redis = self.redis.load_full();
            let keyed: Vec<(String, f64)> = (settles.iter())
                .map(|(b, runs)| (self.key(&redis, b), *runs))
                .collect();
            match redis.settle_shares(now, holder, &keyed).await {
                Ok(()) => self.breaker.success(now),
                Err(e) => {
                    tracing::warn!(error = %e, "RLQS shares taken by their Envoys could not be settled in Redis");
                    if !e.is_invalid_input() {
                        self.failed(now);
                    }
                }
            }
        })
    }

    fn held<'a>(
        &'a self,
        bucket: &'a BucketKey,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Vec<Holding>, Error>> {
        Box::pin(async move {
            let redis = self.redis.load_full();
            let key = self.key(&redis, bucket);
            redis.shares_held(&key, now).await
        })
    }

    fn expire(&self, _now: Timestamp) {}
}
