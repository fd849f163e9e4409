//! A store that lies (`spillway_testkit::liar`): each reply no Redis sends, to the
//! service (`/v1/check` and gRPC) and to the tower layer, each with the `closed`
//! policy. A malformed reply must be a store error the policy answers (503 /
//! `UNAVAILABLE`), a well-formed lie (a reset of 292,000 years) an answer; never a
//! panic, and never the store's words (a key with another client's value) to a caller.

use std::convert::Infallible;
use std::fmt;
use std::time::Duration;

use spillway_core::{Algorithm, Limit, OnStoreError};
use spillway_testkit::liar::{Liar, Lie};
use spillway_tower::{KeyExtractor, RateLimitLayer, Rule};
use tower::{Layer, Service, ServiceExt};

use crate::Policy;
use crate::trial::service_settings;

/// What one lie got from each of its callers.
#[derive(Clone, Debug)]
pub struct LieOutcome {
    pub lie: Lie,
    /// `/v1/check`'s status, twice (the second after the first's failure was counted).
    pub http: [u16; 2],
    /// gRPC's code, twice.
    pub grpc: [i32; 2],
    /// The tower layer's status, twice.
    pub tower: [u16; 2],
    /// An answer carried the lie's key name (with another client's value).
    pub leaked: bool,
}

impl LieOutcome {
    /// Whether every caller got what it must.
    pub fn ok(&self) -> bool {
        let (http, grpc, tower) = if self.lie.malformed() {
            (
                self.http == [503, 503],
                self.grpc == [14, 14],
                self.tower == [503, 503],
            )
        } else {
            let answer = |s: u16| s == 200 || s == 429;
            (
                self.http.iter().all(|&s| answer(s)),
                self.grpc == [0, 0],
                self.tower.iter().all(|&s| answer(s)),
            )
        };
        http && grpc && tower && !self.leaked
    }
}

/// Every lie, to the service and to the tower layer.
pub async fn lies() -> anyhow::Result<Vec<LieOutcome>> {
    super::count_panics();
    let mut outcomes = Vec::new();
    for lie in Lie::ALL {
        let liar = Liar::start(lie).await;
        let mut settings = service_settings("lies", Policy::Closed, liar.url())?;
        settings.store.timeout = Duration::from_millis(200);
        settings.store.breaker_failures = 1_000;
        let running = crate::trial::start(settings.clone()).await?;
        let http = reqwest::Client::new();
        let body = r#"{"domain":"reliability","descriptors":[{"entries":[{"key":"user","value":"victim"}]}]}"#;
        let mut outcome = LieOutcome {
            lie,
            http: [0; 2],
            grpc: [0; 2],
            tower: [0; 2],
            leaked: false,
        };
        let sender = super::Sender::new(&running)?;
        let victim = super::cases::grpc_request("victim");
        for i in 0..2 {
            let r = http
                .post(format!("http://{}/v1/check", running.http_addr))
                .body(body)
                .send()
                .await?;
            outcome.http[i] = r.status().as_u16();
            outcome.leaked |= r.text().await?.contains("user_victim");
            let (code, message, _) = sender.grpc(&victim).await;
            outcome.grpc[i] = code
                .split(' ')
                .next()
                .and_then(|c| c.parse().ok())
                .unwrap_or(-1);
            outcome.leaked |= message.contains("user_victim");
        }
        running.stop().await;
        let _ = std::fs::remove_dir_all(&settings.rules.path);
        // A liar of its own: each tells the truth to its first call only (the store's
        // startup probe).
        outcome.tower = tower_layer(&Liar::start(lie).await.url()).await?;
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

/// Two requests through the tower layer on the liar: their statuses.
async fn tower_layer(url: &str) -> anyhow::Result<[u16; 2]> {
    let store = spillway_redis::RedisStore::builder(url)
        .timeout(Duration::from_millis(200))
        .build()
        .await?;
    let limit = Limit::new(Algorithm::TokenBucket, 10, Duration::from_secs(60))?;
    let layer = RateLimitLayer::builder(store)
        .limit(Rule::new(
            "per-key",
            limit,
            KeyExtractor::header("x-api-key"),
        ))
        .on_store_error(OnStoreError::Closed)
        .deny_cache(0)
        .build()?;
    let mut service = layer.layer(tower::service_fn(|_req: http::Request<String>| async {
        Ok::<_, Infallible>(http::Response::new(String::new()))
    }));
    let mut statuses = [0; 2];
    for status in &mut statuses {
        let request = http::Request::builder()
            .header("x-api-key", "victim")
            .body(String::new())?;
        let response = service.ready().await?.call(request).await?;
        *status = response.status().as_u16();
    }
    Ok(statuses)
}

impl fmt::Display for LieOutcome {
    /// One Markdown table row.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pair = |p: [u16; 2]| format!("{}, {}", p[0], p[1]);
        write!(
            f,
            "| {} | {} | {}, {} | {} | {} |",
            self.lie.describe(),
            pair(self.http),
            self.grpc[0],
            self.grpc[1],
            pair(self.tower),
            if self.ok() { "yes" } else { "**no**" }
        )
    }
}

/// The table's header, for [`LieOutcome`]'s rows.
pub const LIES_HEADER: &str = "| the store's reply | `/v1/check` | gRPC code | tower layer | as it must |\n|---|---|---|---|---|";
