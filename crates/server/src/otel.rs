//! Tracing over OpenTelemetry, as the reference offers it (`TRACING_ENABLED` with the
//! OpenTelemetry SDK's own variables): a span per decision (`ratelimit.decision`:
//! the API, the domain, the outcome), a child span per store call (`ratelimit.store`:
//! which store, how many rules), exported over OTLP (HTTP or gRPC) in batches from a
//! thread of their own. A caller's `traceparent` (W3C trace context, what Envoy's
//! tracers send) makes the decision a child of the caller's span, and its sampled flag
//! wins over `tracing_sampling_rate`.
//!
//! Off by default. Off, a decision pays for one disabled span (its callsite is
//! checked once: the spans are at TRACE level under a target of their own, which no
//! log filter enables unless asked to); on, spans reach only the exporter's layer.

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;

use crate::config;

/// The target of the spans exported (and of no log line).
pub const TARGET: &str = "spillway_otel";

/// The exporter, while tracing is on: its layer goes into the subscriber, and
/// [`shutdown`](Otel::shutdown) sends what is still buffered.
#[derive(Debug)]
pub struct Otel {
    provider: SdkTracerProvider,
}

impl Otel {
    /// The exporter `settings` describe, or `None` when tracing is off. Call it within
    /// a tokio runtime when the protocol is gRPC (its client lives there).
    pub fn new(settings: &config::Tracing) -> Result<Option<Otel>, String> {
        let Some(endpoint) = &settings.endpoint else {
            return Ok(None);
        };
        let exporter = match settings.protocol {
            config::OtlpProtocol::Http => opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(endpoint.clone())
                .build(),
            config::OtlpProtocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint.clone())
                .build(),
        }
        .map_err(|e| format!("the OTLP exporter to {endpoint}: {e}"))?;
        let mut resource = Resource::builder().with_service_name(settings.service_name.clone());
        for (key, value) in [
            ("service.namespace", &settings.service_namespace),
            ("service.instance.id", &settings.service_instance_id),
        ] {
            if let Some(v) = value {
                resource = resource.with_attribute(opentelemetry::KeyValue::new(key, v.clone()));
            }
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                settings.sampling_rate,
            ))))
            .with_resource(resource.build())
            .build();
        Ok(Some(Otel { provider }))
    }

    /// The layer that exports the decisions' spans (and nothing else).
    pub fn layer<S>(&self) -> impl Layer<S> + Send + Sync + 'static
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a> + Send + Sync,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("spillway"))
            .with_filter(Targets::new().with_target(TARGET, tracing::Level::TRACE))
    }

    /// Sends the spans still buffered, and stops the exporter.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "tracing: the last spans were not all sent");
        }
    }
}

/// A decision's span on `api` (`ShouldRateLimit`, `/v1/check`, `/json`), a child of the
/// caller's trace when `headers` (read only when the span is exported) carry one.
pub(crate) fn decision_span(
    api: &'static str,
    headers: impl FnOnce() -> axum::http::HeaderMap,
) -> tracing::Span {
    let span = tracing::trace_span!(
        target: "spillway_otel",
        "ratelimit.decision",
        otel.name = api,
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        ratelimit.api = api,
        ratelimit.domain = tracing::field::Empty,
        ratelimit.outcome = tracing::field::Empty,
    );
    if !span.is_disabled() {
        let headers = headers();
        let parent = TraceContextPropagator::new().extract(&Headers(&headers));
        let _ = span.set_parent(parent);
    }
    span
}

/// A store call's span, within its decision's.
pub(crate) fn store_span(store: &'static str, kind: &'static str, rules: usize) -> tracing::Span {
    tracing::trace_span!(
        target: "spillway_otel",
        "ratelimit.store",
        ratelimit.store = store,
        db.system = kind,
        ratelimit.rules = rules,
    )
}

/// Records the domain a decision is about.
pub(crate) fn domain(span: &tracing::Span, domain: &str) {
    if !span.is_disabled() {
        span.record("ratelimit.domain", domain);
    }
}

/// Records a decision's outcome: `OK`, `OVER_LIMIT`, or (an error) its kind.
pub(crate) fn outcome(span: &tracing::Span, outcome: Result<bool, &str>) {
    if span.is_disabled() {
        return;
    }
    match outcome {
        Ok(true) => span.record("ratelimit.outcome", "OK"),
        Ok(false) => span.record("ratelimit.outcome", "OVER_LIMIT"),
        Err(kind) => {
            span.record("otel.status_code", "ERROR");
            span.record("ratelimit.outcome", kind)
        }
    };
}

/// The caller's trace context (`traceparent`, `tracestate`) of an HTTP request, copied
/// only while decisions' spans are exported: otherwise nothing is read.
#[derive(Debug, Default)]
pub(crate) struct Parent(axum::http::HeaderMap);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Parent {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Parent, Self::Rejection> {
        let mut context = axum::http::HeaderMap::new();
        if tracing::enabled!(target: "spillway_otel", tracing::Level::TRACE) {
            for name in ["traceparent", "tracestate"] {
                if let Some(value) = parts.headers.get(name) {
                    context.insert(name, value.clone());
                }
            }
        }
        Ok(Parent(context))
    }
}

impl Parent {
    /// The context, for [`decision_span`].
    pub(crate) fn headers(self) -> axum::http::HeaderMap {
        self.0
    }
}

/// A request's headers, as the propagator reads them.
struct Headers<'a>(&'a axum::http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(axum::http::HeaderName::as_str).collect()
    }
}
