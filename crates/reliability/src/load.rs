//! Steady open-loop load on a running service's `/v1/check`: one request every
//! `1 / rate` seconds whether or not earlier ones have answered (a stalled store must
//! show up as latency, not as fewer requests), each answer recorded.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior};

/// What one request got back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Status 200; `degraded`: decided without the store (fail-open or the local fallback);
    /// `shadow_denied`: a shadow rule would have denied it.
    Allowed { degraded: bool, shadow_denied: bool },
    /// Status 429.
    Denied { degraded: bool },
    /// Status 503: the store failed and the policy is closed.
    Unavailable,
    /// Any other status: a bug.
    Other(u16),
    /// No answer (connection refused, reset, or no reply within 5 s).
    Transport,
}

impl Answer {
    /// Decided by the store (not a fallback, not an error).
    pub fn store_backed(self) -> bool {
        matches!(
            self,
            Answer::Allowed {
                degraded: false,
                ..
            } | Answer::Denied { degraded: false }
        )
    }
}

/// One request: when it was sent (since the run began), how long it took, the answer.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub sent: Duration,
    pub latency: Duration,
    pub answer: Answer,
}

impl Sample {
    /// When the answer arrived (since the run began).
    pub fn done(&self) -> Duration {
        self.sent + self.latency
    }
}

/// Makes `rate` calls per second for `length`, each a new task; returns every
/// sample, ordered by sending time.
pub async fn drive<F, Fut>(rate: u32, length: Duration, start: Instant, call: F) -> Vec<Sample>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Answer> + Send + 'static,
{
    let (_end, until) = watch::channel(start + length);
    drive_until(rate, start, until, call).await
}

/// [`drive`] until the instant `until` holds, which may move while the load runs (a
/// fault whose length is only known when it ends).
pub async fn drive_until<F, Fut>(
    rate: u32,
    start: Instant,
    until: watch::Receiver<Instant>,
    call: F,
) -> Vec<Sample>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Answer> + Send + 'static,
{
    let (tx, mut rx) = mpsc::unbounded_channel();
    send_until(rate, start, until, call, tx).await;
    let mut samples = Vec::new();
    while let Some(s) = rx.recv().await {
        samples.push(s);
    }
    samples.sort_by_key(|s| s.sent);
    samples
}

/// The load of [`drive_until`], each sample sent to `samples` as its answer comes (for
/// a run too long to keep them all); returns when the last call has been sent.
pub async fn send_until<F, Fut>(
    rate: u32,
    start: Instant,
    until: watch::Receiver<Instant>,
    call: F,
    samples: mpsc::UnboundedSender<Sample>,
) where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Answer> + Send + 'static,
{
    let call = Arc::new(call);
    let mut ticks = tokio::time::interval(Duration::from_secs(1) / rate.max(1));
    ticks.set_missed_tick_behavior(MissedTickBehavior::Burst);
    loop {
        let due = ticks.tick().await;
        if due >= *until.borrow() {
            break;
        }
        let (call, tx) = (Arc::clone(&call), samples.clone());
        tokio::spawn(async move {
            let sent = Instant::now();
            let answer = call().await;
            let _ = tx.send(Sample {
                sent: sent - start,
                latency: sent.elapsed(),
                answer,
            });
        });
    }
}

/// A service's `/v1/check`, asked about domain `reliability`, descriptor
/// `user=<value>` (the rule of [`Policy::yaml`](crate::Policy::yaml)).
#[derive(Clone, Debug)]
pub struct HttpCheck {
    client: reqwest::Client,
    url: Arc<str>,
    body: Arc<[u8]>,
}

impl HttpCheck {
    pub fn new(addr: std::net::SocketAddr, value: &str) -> anyhow::Result<HttpCheck> {
        let body = serde_json::json!({
            "domain": "reliability",
            "descriptors": [{ "entries": [{ "key": "user", "value": value }] }],
        });
        Ok(HttpCheck {
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()?,
            url: format!("http://{addr}/v1/check").into(),
            body: body.to_string().into_bytes().into(),
        })
    }

    /// One call, for [`drive`].
    pub fn call(&self) -> impl Future<Output = Answer> + Send + use<> {
        let this = self.clone();
        async move { ask(&this.client, &this.url, this.body.to_vec()).await }
    }
}

/// The admitted samples (status 200), in sending order.
pub fn admitted(samples: &[Sample]) -> Vec<Sample> {
    samples
        .iter()
        .filter(|s| matches!(s.answer, Answer::Allowed { .. }))
        .copied()
        .collect()
}

/// The most samples in one window of length `window`, certainly: a decision happened
/// between sending and answering, so samples are certainly within one window when the
/// last answer came less than a window after the first was sent.
pub fn certain_most(samples: &[Sample], window: Duration) -> usize {
    let mut most = 0;
    let mut lo = 0;
    for (j, s) in samples.iter().enumerate() {
        while lo <= j && samples[lo].sent + window <= s.done() {
            lo += 1;
        }
        most = most.max((j + 1).saturating_sub(lo));
    }
    most
}

/// The most samples sent in any window `[t, t + window)`: what a client saw.
pub fn most_sent(samples: &[Sample], window: Duration) -> usize {
    let mut most = 0;
    let mut lo = 0;
    for (j, s) in samples.iter().enumerate() {
        while samples[lo].sent + window <= s.sent {
            lo += 1;
        }
        most = most.max(j + 1 - lo);
    }
    most
}

/// One `/v1/check` with `body`, its answer classified.
pub(crate) async fn ask(client: &reqwest::Client, url: &str, body: Vec<u8>) -> Answer {
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await;
    let Ok(response) = response else {
        return Answer::Transport;
    };
    let status = response.status().as_u16();
    let Ok(json) = response.json::<serde_json::Value>().await else {
        return if status == 503 {
            Answer::Unavailable
        } else {
            Answer::Other(status)
        };
    };
    let flag = |name: &str| {
        json["descriptors"]
            .as_array()
            .is_some_and(|d| d.iter().any(|s| s[name] == true))
    };
    match status {
        200 => Answer::Allowed {
            degraded: flag("degraded"),
            shadow_denied: flag("shadow_denied"),
        },
        429 => Answer::Denied {
            degraded: flag("degraded"),
        },
        503 => Answer::Unavailable,
        other => Answer::Other(other),
    }
}
