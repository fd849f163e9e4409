//! From `bench`'s flags to what a run loads: the limit, the keys, and the target — a
//! running service, or a store (with leases, sync or policies) in this process — with
//! the Redis whose INFO the run reports.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use rand_distr::Zipf;
use spillway_core::{Algorithm, Guard, Key, Limit, Mode, OnStoreError, Sharing};
use spillway_redis::RedisStore;
use spillway_server::{AnyStore, Breaker, Options, Service, Stores};

use super::BenchArgs;
use super::load::Keys;
use super::target::{self, Target};
use crate::args;

/// A connection to `--redis-stats`, the Redis behind a `--server`, to read its INFO.
pub(super) async fn stats_store(args: &BenchArgs, url: &str) -> anyhow::Result<RedisStore> {
    RedisStore::builder(url)
        .access(args.redis.access()?)
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .with_context(|| format!("connecting to {url} for its INFO"))
}

pub(super) fn flag_limit(args: &BenchArgs) -> anyhow::Result<Option<Limit>> {
    let Some(name) = &args.algorithm else {
        return Ok(None);
    };
    let algorithm: Algorithm = name.parse()?;
    if args.members.is_some() && !algorithm.counts_members() {
        bail!("--members applies to --algorithm distinct");
    }
    let (Some(n), Some(window)) = (args.limit, args.window) else {
        bail!("--algorithm needs --limit and --window");
    };
    let shape = crate::limit::Shape {
        precision: args.precision,
        burst: args.burst,
        max_wait: args.max_wait,
        ..Default::default()
    };
    Ok(Some(crate::limit::build(algorithm, n, window, shape)?))
}

pub(super) fn keys(args: &BenchArgs) -> anyhow::Result<Keys> {
    if let Some(value) = &args.hot_key {
        return Ok(Keys::Hot(Key::new(value.as_str())?));
    }
    if args.hot {
        // A key no earlier run has used, so that --check starts from no state.
        return Ok(Keys::Hot(Key::new(format!(
            "hot-{}-{}",
            std::process::id(),
            nonce()
        ))?));
    }
    let population: Vec<Key> = (0..args.keys)
        .map(|i| Key::new(format!("k{i}")))
        .collect::<Result<_, _>>()?;
    let population = Arc::new(population);
    Ok(match args.zipf {
        Some(s) => {
            let zipf =
                Zipf::new(args.keys as f64, s).map_err(|e| anyhow::anyhow!("--zipf {s}: {e}"))?;
            Keys::Zipf(population, zipf)
        }
        None => Keys::Uniform(population),
    })
}

#[allow(clippy::disallowed_methods)] // a unique name, not a decision
fn nonce() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// The target, a line describing it, and the Redis it decides on (for its INFO): the
/// store's own connection, not a second one.
pub(super) async fn target(
    args: &BenchArgs,
    flag_limit: Option<Limit>,
    policies: Option<spillway_policy::PolicySet>,
) -> anyhow::Result<(Target, String, Option<RedisStore>)> {
    let key_name = args.key_name.clone();
    if let Some(url) = &args.server {
        let domain = args.domain.clone().context("--server needs --domain")?;
        let described = format!("{url} (domain {domain}, descriptor key {key_name})");
        let target = match crate::client::Server::parse(url)? {
            crate::client::Server::Grpc { authority, tls } => {
                Target::grpc(&args.tls, &authority, tls, domain, key_name).await?
            }
            crate::client::Server::Http { base, tls } => {
                Target::http(&args.tls, &base, tls, domain, key_name)?
            }
        };
        return Ok((target, described, None));
    }
    let url = args
        .store
        .as_deref()
        .context("--store or --server is required")?;
    let mut settings = args.redis.store()?;
    args::warn_if_insecure(&settings.redis);
    settings.url = url.to_owned();
    settings.timeout = args.timeout;
    settings.memory_bytes = spillway_core::DEFAULT_MEMORY_STORE_BYTES;
    let store = AnyStore::open(&settings).await.context("store")?;
    let redis = match &store {
        AnyStore::Redis(r) => Some(r.clone()),
        AnyStore::Memory(_) => None,
    };
    let (target, described) = store_target(args, url, store, flag_limit, policies)?;
    Ok((target, described, redis))
}

/// The target of a `--store` run on `store`, and a line describing it.
fn store_target(
    args: &BenchArgs,
    url: &str,
    store: AnyStore,
    flag_limit: Option<Limit>,
    policies: Option<spillway_policy::PolicySet>,
) -> anyhow::Result<(Target, String)> {
    let key_name = args.key_name.clone();
    let sharing = match (args.lease, args.sync) {
        (Some(units), _) => Sharing::Lease { units },
        (None, Some(every)) => Sharing::Sync { every },
        (None, None) => Sharing::Exact,
    };
    match (flag_limit, policies) {
        (Some(limit), _) if sharing.is_shared() => {
            sharing.check(&limit).map_err(anyhow::Error::msg)?;
            let stores = Arc::new(Stores::new(
                store,
                Breaker::new(5, Duration::from_millis(500)),
            ));
            if let Sharing::Sync { .. } = sharing {
                tokio::spawn(target::sync(Arc::downgrade(&stores)));
            }
            let described = format!("{url} store, {limit}, {}", sharing.bound());
            let guard = Guard::new(Mode::Enforce, OnStoreError::Closed).sharing(sharing);
            Ok((
                Target::Shared {
                    stores,
                    limit,
                    guard,
                },
                described,
            ))
        }
        (Some(limit), _) if limit.algorithm().counts_members() => {
            // Twice the limit by default: half of them are denied once it is reached.
            let members = target::Members::new(args.members.unwrap_or(2 * limit.limit()));
            let described = format!("{url} store, {limit}, {} members", members.count);
            Ok((
                Target::Store {
                    store,
                    limit,
                    members,
                },
                described,
            ))
        }
        (Some(limit), _) => Ok((
            Target::Store {
                store,
                limit: limit.clone(),
                members: target::Members::new(1),
            },
            format!("{url} store, {limit}"),
        )),
        (None, Some(set)) => {
            let domain = args.domain.clone().context("--config needs --domain")?;
            let stores = Stores::new(store, Breaker::new(5, Duration::from_millis(500)));
            let service = Service::new(
                set,
                stores,
                Arc::new(spillway_core::SystemClock),
                Options::default(),
            );
            let described =
                format!("{url} store, policies of domain {domain}, descriptor key {key_name}");
            Ok((
                Target::Service {
                    service: Box::new(service),
                    domain,
                    key_name,
                },
                described,
            ))
        }
        (None, None) => {
            bail!("give a limit (--algorithm, --limit, --window) or --config with --domain")
        }
    }
}
