//! Budget alerts delivered: a limit's `alert_at` thresholds, reached by a key's use in
//! a window, each sent once as a webhook. Which thresholds a charge reached is the
//! store's word, decided in the charge's own call (`spillway_core::Crossing`): once per
//! key, threshold and window across every replica, and never again after a refund.
//! This module only delivers, off the decision's path: a bounded queue (full, an event
//! is dropped and counted), one worker that POSTs each event as JSON in order, and a
//! failed delivery (no answer within [`REQUEST_TIMEOUT`], or a status other than 2xx)
//! tried again after [`FIRST_BACKOFF`], doubling up to [`MAX_BACKOFF`], [`ATTEMPTS`]
//! times in all (about four minutes) before it is given up and counted.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::Uri;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use tokio::sync::mpsc;

use crate::metrics;

/// The longest one delivery waits for its answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The wait before a failed delivery is tried again; it doubles each time.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// The longest wait between tries.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Tries of one event before it is given up.
pub const ATTEMPTS: u32 = 12;

/// One threshold reached: the webhook's JSON body.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Event {
    pub domain: String,
    /// The descriptor's entries, as the overrides API writes a path (`tenant=acme`).
    pub path: String,
    /// The rule: its name, or its config path.
    pub limit: String,
    /// The part of the limit reached (`0.8`).
    pub threshold: f64,
    /// Units used in the window when it was reached.
    pub used: u64,
    /// The limit: units per window.
    pub budget: u64,
    /// When the window ends (its use starts again at 0): ms since the Unix epoch.
    pub period_end_ms: u64,
}

/// Where budget alerts go: a webhook and the queue in front of it, or nowhere.
#[derive(Clone, Debug, Default)]
pub struct Alerts {
    queue: Option<mpsc::Sender<Event>>,
}

impl Alerts {
    /// Alerts POSTed to `url` (`http://` or `https://`, trusting the system's roots),
    /// at most `queue` waiting. Starts the worker: call it on a Tokio runtime.
    pub fn webhook(url: &str, queue: usize) -> Result<Alerts, String> {
        let uri: Uri = match crate::config::value::webhook(url)? {
            Some(url) => url.parse().expect("checked"),
            None => return Err("alert_webhook is empty".into()),
        };
        let client = client().map_err(|e| format!("alert_webhook: {e}"))?;
        let (tx, rx) = mpsc::channel(queue.max(1));
        tokio::spawn(deliver(client, Arc::new(uri), rx));
        Ok(Alerts { queue: Some(tx) })
    }

    /// Whether alerts go anywhere.
    pub fn on(&self) -> bool {
        self.queue.is_some()
    }

    /// Counts `event` reached and queues it for delivery (when there is a webhook),
    /// or counts it dropped when the queue is full.
    pub(crate) fn send(&self, event: Event) {
        metrics::alert(&event.domain, "reached");
        let Some(queue) = &self.queue else { return };
        if let Err(mpsc::error::TrySendError::Full(event)) = queue.try_send(event) {
            tracing::warn!(domain = %event.domain, path = %event.path, limit = %event.limit, threshold = event.threshold, "budget alert dropped: the queue is full (the webhook is slow or down)");
            metrics::alert(&event.domain, "dropped");
        }
    }
}

type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

fn client() -> Result<HttpClient, rustls::Error> {
    let mut roots = rustls::RootCertStore::empty();
    // Certificates the system has that rustls cannot read are skipped.
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    let config = rustls::ClientConfig::builder_with_provider(spillway_redis::pem::provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(REQUEST_TIMEOUT));
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

/// The worker: each event in turn, tried until it is delivered or given up.
async fn deliver(client: HttpClient, url: Arc<Uri>, mut queue: mpsc::Receiver<Event>) {
    while let Some(event) = queue.recv().await {
        let body = Bytes::from(serde_json::to_vec(&event).expect("an event is JSON"));
        let mut wait = FIRST_BACKOFF;
        for attempt in 1..=ATTEMPTS {
            let request = hyper::Request::post(url.as_ref().clone())
                .header(hyper::header::CONTENT_TYPE, "application/json")
                .header(hyper::header::USER_AGENT, "spillway")
                .body(Full::new(body.clone()))
                .expect("a POST of JSON");
            let failure = match tokio::time::timeout(REQUEST_TIMEOUT, client.request(request)).await
            {
                Ok(Ok(answer)) if answer.status().is_success() => None,
                Ok(Ok(answer)) => Some(format!("answered {}", answer.status())),
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some(format!("no answer within {REQUEST_TIMEOUT:?}")),
            };
            let Some(why) = failure else {
                metrics::alert(&event.domain, "sent");
                break;
            };
            if attempt == ATTEMPTS {
                tracing::warn!(domain = %event.domain, path = %event.path, limit = %event.limit, threshold = event.threshold, error = %why, "budget alert given up after {ATTEMPTS} tries");
                metrics::alert(&event.domain, "failed");
                break;
            }
            tracing::debug!(error = %why, attempt, "budget alert not delivered; trying again in {wait:?}");
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(MAX_BACKOFF);
        }
    }
}
