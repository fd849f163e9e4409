//! Tracing as the reference offers it (issue #48): `spillway serve` with the reference's
//! `TRACING_*` variables and OpenTelemetry's endpoint exports one span per decision
//! (the domain, the outcome) with its store call as a child, over OTLP to a collector
//! run here (HTTP/protobuf, the reference's default, and gRPC), each span a child of
//! the caller's `traceparent` when it sends one, the resource named as Envoy Gateway
//! names it. The spans still buffered are sent when the service stops (SIGTERM).

use crate::support;

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::trace::v1::Span;
use support::{FakeClock, free_port, tempdir};

/// What the collector received: each span with its resource's attributes.
type Received = Arc<Mutex<Vec<(Vec<(String, String)>, Span)>>>;

fn keep(received: &Received, request: ExportTraceServiceRequest) {
    let mut all = received.lock().unwrap();
    for resource_spans in request.resource_spans {
        let resource = resource_spans
            .resource
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                all.push((resource.clone(), span));
            }
        }
    }
}

fn attributes(kv: &[opentelemetry_proto::tonic::common::v1::KeyValue]) -> Vec<(String, String)> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    kv.iter()
        .map(|a| {
            let v = match a.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Value::StringValue(s)) => s.clone(),
                Some(Value::IntValue(i)) => i.to_string(),
                Some(Value::BoolValue(b)) => b.to_string(),
                Some(Value::DoubleValue(d)) => d.to_string(),
                other => format!("{other:?}"),
            };
            (a.key.clone(), v)
        })
        .collect()
}

/// An OTLP/gRPC collector.
struct Grpc(Received);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        keep(&self.0, request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// A collector on a free port, speaking `protocol`: its port and what it received.
fn collector(runtime: &tokio::runtime::Runtime, protocol: &str) -> (u16, Received) {
    let received = Received::default();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let kept = Arc::clone(&received);
    if protocol == "grpc" {
        runtime.spawn(
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(Grpc(kept)))
                .serve_with_incoming(tokio_stream(listener)),
        );
    } else {
        runtime.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let kept = Arc::clone(&kept);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let kept = Arc::clone(&kept);
                            async move {
                                use http_body_util::BodyExt;
                                assert_eq!(req.uri().path(), "/v1/traces");
                                let body = req.into_body().collect().await.unwrap().to_bytes();
                                let request =
                                    <ExportTraceServiceRequest as prost::Message>::decode(body)
                                        .unwrap();
                                keep(&kept, request);
                                Ok::<_, std::convert::Infallible>(hyper::Response::new(
                                    http_body_util::Full::new(hyper::body::Bytes::new()),
                                ))
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
    }
    (port, received)
}

/// A listener's connections, as tonic's server takes them.
fn tokio_stream(
    listener: tokio::net::TcpListener,
) -> impl futures_util::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures_util::stream::unfold(listener, |l| async move {
        let accepted = l.accept().await.map(|(s, _)| s);
        Some((accepted, l))
    })
}

fn attribute<'a>(span: &'a Span, key: &str) -> Option<&'a str> {
    span.attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref()?.value.as_ref())
        .and_then(|v| match v {
            opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(s) => {
                Some(s.as_str())
            }
            _ => None,
        })
}

#[test]
fn a_span_per_decision_over_otlp_as_the_reference_exports_them() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for protocol in ["http", "grpc"] {
        let (collector_port, received) = collector(&runtime, protocol);
        let dir = tempdir(&format!("tracing-{protocol}"));
        let config = dir.join("ratelimit/config");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(
            config.join("t.yaml"),
            "domain: traced\ndescriptors:\n  - key: user\n    rate_limit: { unit: hour, requests_per_unit: 1 }\n",
        )
        .unwrap();
        let (http, grpc, admin) = (free_port(), free_port(), free_port());
        // Its clock at the next hour: the second request must find the first's hour
        // window, however long a busy machine takes between them.
        let clock = FakeClock::next_hour();
        let mut child = Command::new(env!("CARGO_BIN_EXE_spillway"))
            .arg("serve")
            .env_clear()
            .envs(clock.env())
            .env("RUNTIME_ROOT", &dir)
            .env("RUNTIME_SUBDIRECTORY", "ratelimit")
            .env("HOST", "127.0.0.1")
            .env("PORT", http.to_string())
            .env("GRPC_HOST", "127.0.0.1")
            .env("GRPC_PORT", grpc.to_string())
            .env("DEBUG_HOST", "127.0.0.1")
            .env("DEBUG_PORT", admin.to_string())
            .env("USE_STATSD", "false")
            // Envoy Gateway's tracing variables.
            .env("TRACING_ENABLED", "true")
            .env("TRACING_SERVICE_NAME", "envoy-ratelimit")
            .env("TRACING_SERVICE_NAMESPACE", "envoy-gateway-system")
            .env("TRACING_SERVICE_INSTANCE_ID", "envoy-ratelimit-7d9f")
            .env("TRACING_SAMPLING_RATE", "1.0")
            .env("TRACING_EXPORTER_PROTOCOL", protocol)
            .env(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{collector_port}"),
            )
            .stderr(Stdio::piped())
            .spawn()
            .expect("spillway starts");
        let _kill = support::KillOnDrop(child.id());
        let started = support::until_listening(&mut child);
        assert!(
            !started.iter().any(|l| l.contains("not honoured")),
            "{started:#?}"
        );

        // Admitted, refused, and one with the caller's trace context.
        let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
        let parent_id = "00f067aa0ba902b7";
        runtime.block_on(async {
            let mut client = RateLimitServiceClient::connect(format!("http://127.0.0.1:{grpc}"))
                .await
                .unwrap();
            let ask = |user: &str| {
                let mut request = tonic::Request::new(
                    envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest {
                        domain: "traced".into(),
                        descriptors: vec![
                            envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor {
                                entries: vec![envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry {
                                    key: "user".into(),
                                    value: user.into(),
                                }],
                                ..Default::default()
                            },
                        ],
                        hits_addend: 0,
                    },
                );
                request
                    .metadata_mut()
                    .insert("traceparent", format!("00-{trace_id}-{parent_id}-01").parse().unwrap());
                request
            };
            let mut untraced = ask("a");
            untraced.metadata_mut().remove("traceparent");
            assert_eq!(client.should_rate_limit(untraced).await.unwrap().into_inner().overall_code, 1);
            let mut untraced = ask("a");
            untraced.metadata_mut().remove("traceparent");
            assert_eq!(client.should_rate_limit(untraced).await.unwrap().into_inner().overall_code, 2);
            assert_eq!(client.should_rate_limit(ask("b")).await.unwrap().into_inner().overall_code, 1);
        });
        // SIGTERM: the spans still buffered are sent before the process ends.
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(child.wait().unwrap().success());

        let spans = received.lock().unwrap().clone();
        let decisions: Vec<_> = spans
            .iter()
            .filter(|(_, s)| s.name == "ShouldRateLimit")
            .collect();
        assert_eq!(decisions.len(), 3, "{protocol}: {spans:#?}");
        let outcomes: Vec<_> = decisions
            .iter()
            .map(|(_, s)| attribute(s, "ratelimit.outcome").unwrap_or_default())
            .collect();
        assert_eq!(outcomes, ["OK", "OVER_LIMIT", "OK"], "{protocol}");
        for (resource, span) in &decisions {
            assert_eq!(attribute(span, "ratelimit.domain"), Some("traced"));
            assert!(
                resource.contains(&("service.name".into(), "envoy-ratelimit".into())),
                "{resource:?}"
            );
            assert!(
                resource.contains(&("service.namespace".into(), "envoy-gateway-system".into()))
            );
            assert!(
                resource.contains(&("service.instance.id".into(), "envoy-ratelimit-7d9f".into()))
            );
            // Its store call, a child.
            let stores: Vec<_> = spans
                .iter()
                .filter(|(_, s)| s.name == "ratelimit.store" && s.parent_span_id == span.span_id)
                .collect();
            assert_eq!(stores.len(), 1, "{protocol}: {spans:#?}");
            assert_eq!(attribute(&stores[0].1, "ratelimit.store"), Some("main"));
            assert_eq!(stores[0].1.trace_id, span.trace_id);
        }
        // The caller's trace: the decision is its child.
        let traced = &decisions[2].1;
        assert_eq!(hex(&traced.trace_id), trace_id, "{protocol}");
        assert_eq!(hex(&traced.parent_span_id), parent_id, "{protocol}");
        assert!(
            decisions[0].1.parent_span_id.is_empty(),
            "a root without traceparent"
        );
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
