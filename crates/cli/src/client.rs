//! How `check`, `bench` and `explain` reach a running service: `grpc://` and `grpcs://`
//! (Envoy's `ShouldRateLimit`), `http://` and `https://` (`/v1/check`, `/v1/explain`),
//! over TLS with the CAs and client certificate of [`ClientTls`].

use std::time::Duration;

use anyhow::{Context, bail};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tonic::transport::Channel;

use crate::args::ClientTls;

/// The HTTP client the CLI uses: plaintext or TLS by the URL's scheme.
pub type HttpClient = Client<HttpsConnector<HttpConnector>, Full<hyper::body::Bytes>>;

/// A `--server` URL.
#[derive(Debug, PartialEq, Eq)]
pub enum Server {
    /// `grpc://host:port` or `grpcs://host:port`.
    Grpc { authority: String, tls: bool },
    /// `http://host:port` or `https://host:port` (a path prefix is kept).
    Http { base: String, tls: bool },
}

impl Server {
    pub fn parse(url: &str) -> anyhow::Result<Server> {
        let url = url.trim_end_matches('/');
        if let Some(a) = url.strip_prefix("grpc://") {
            Ok(Server::Grpc {
                authority: a.to_owned(),
                tls: false,
            })
        } else if let Some(a) = url.strip_prefix("grpcs://") {
            Ok(Server::Grpc {
                authority: a.to_owned(),
                tls: true,
            })
        } else if url.starts_with("http://") || url.starts_with("https://") {
            Ok(Server::Http {
                base: url.to_owned(),
                tls: url.starts_with("https://"),
            })
        } else {
            bail!(
                "--server `{url}` is not grpc://, grpcs://, http:// or https:// followed by \
                 host:port"
            )
        }
    }
}

impl ClientTls {
    /// The TLS configuration: these CAs (or the system's roots) and this certificate.
    fn config(&self) -> anyhow::Result<rustls::ClientConfig> {
        let identity = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => Some((cert.as_path(), key.as_path())),
            (None, None) => None,
            _ => bail!("--client-cert and --client-key go together"),
        };
        Ok(spillway_redis::pem::client_config(
            self.ca_file.as_deref(),
            identity,
        )?)
    }

    /// Whether a TLS flag was given (for a plaintext URL, that is a mistake).
    fn any(&self) -> bool {
        self.ca_file.is_some() || self.client_cert.is_some() || self.client_key.is_some()
    }

    fn refuse_on_plaintext(&self, tls: bool, url: &str) -> anyhow::Result<()> {
        if !tls && self.any() {
            bail!(
                "--ca-file, --client-cert and --client-key need grpcs:// or https://, not `{url}`"
            );
        }
        Ok(())
    }

    /// One gRPC channel to `authority`.
    pub async fn grpc_channel(&self, authority: &str, tls: bool) -> anyhow::Result<Channel> {
        let scheme = if tls { "grpcs" } else { "grpc" };
        self.refuse_on_plaintext(tls, &format!("{scheme}://{authority}"))?;
        let channel = if tls {
            spillway_server::tls::grpc_channel(authority, self.config()?).await
        } else {
            Channel::from_shared(format!("http://{authority}"))?
                .connect()
                .await
        };
        channel.map_err(|e| cannot_reach(&format!("{scheme}://{authority}"), &e))
    }

    /// An HTTP client for `base` (keeps connections; HTTP/1.1).
    pub fn http_client(&self, base: &str, tls: bool) -> anyhow::Result<HttpClient> {
        self.refuse_on_plaintext(tls, base)?;
        let config = if tls {
            self.config()?
        } else {
            // Never used: a plaintext URL makes no handshake.
            rustls::ClientConfig::builder_with_provider(spillway_redis::pem::provider())
                .with_safe_default_protocol_versions()?
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth()
        };
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.enforce_http(false);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(config)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(usize::MAX)
            .build(connector))
    }
}

/// `POST url` with a JSON body (and `token` as `Authorization: Bearer`), within
/// `timeout`: the status and the JSON answer.
pub async fn post_json(
    client: &HttpClient,
    url: &str,
    body: &serde_json::Value,
    token: Option<&spillway_redis::Password>,
    timeout: Duration,
) -> anyhow::Result<(hyper::StatusCode, serde_json::Value)> {
    send_json(client, hyper::Method::POST, url, Some(body), token, timeout).await
}

/// [`post_json`] with any method, and a body or none.
pub async fn send_json(
    client: &HttpClient,
    method: hyper::Method,
    url: &str,
    body: Option<&serde_json::Value>,
    token: Option<&spillway_redis::Password>,
    timeout: Duration,
) -> anyhow::Result<(hyper::StatusCode, serde_json::Value)> {
    let bytes = body
        .map(serde_json::to_vec)
        .transpose()?
        .unwrap_or_default();
    send(
        client,
        method,
        url,
        Some(("application/json", bytes)),
        token,
        timeout,
    )
    .await
}

/// [`send_json`] with a body of any type (`(content type, bytes)`): the status and
/// the JSON answer.
pub async fn send(
    client: &HttpClient,
    method: hyper::Method,
    url: &str,
    body: Option<(&str, Vec<u8>)>,
    token: Option<&spillway_redis::Password>,
    timeout: Duration,
) -> anyhow::Result<(hyper::StatusCode, serde_json::Value)> {
    let (content_type, bytes) = body.unwrap_or(("application/json", Vec::new()));
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", content_type);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {}", token.expose()));
    }
    let request = request.body(Full::from(bytes))?;
    let exchange = async {
        let response = client
            .request(request)
            .await
            .map_err(|e| cannot_reach(url, &e))?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .with_context(|| format!("{url}: the answer broke off"))?
            .to_bytes();
        let value = serde_json::from_slice(&bytes).with_context(|| {
            format!(
                "{url} answered {status} without JSON: not Spillway's HTTP API (the HTTP port \
                 is 8080 by default, gRPC's 8081)"
            )
        })?;
        Ok::<_, anyhow::Error>((status, value))
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| anyhow::anyhow!("{url} did not answer within {timeout:?}"))?
}

/// `what` could not be reached, and why ([`one_line`](crate::one_line)), with what a
/// TLS failure most likely means: a server that answered a TLS handshake with plaintext
/// does not speak TLS on that port.
fn cannot_reach(what: &str, e: &(dyn std::error::Error + 'static)) -> anyhow::Error {
    let why = crate::one_line(e);
    let hint = if why.contains("InvalidContentType") {
        " (that port does not speak TLS: use grpc:// or http://)"
    } else if why.contains("UnknownIssuer") {
        " (the server's certificate is not signed by a CA given with --ca-file)"
    } else {
        ""
    };
    anyhow::anyhow!("cannot reach {what}: {why}{hint}")
}

/// Why a gRPC call failed, said for a person: a server that answered as plain HTTP (a
/// 404, a body that is not gRPC) is named as what it most likely is, the HTTP port; a
/// connection the server closed is named with its likely cause (TLS spoken to it in
/// plaintext, or a client certificate it requires and was not given).
pub fn grpc_failure(url: &str, status: &tonic::Status, tls: &ClientTls) -> anyhow::Error {
    let message = status.message();
    let not_grpc = matches!(
        status.code(),
        tonic::Code::Internal | tonic::Code::Unknown | tonic::Code::Unimplemented
    ) && (message.contains("404") || message.contains("compression flag"));
    if not_grpc {
        return anyhow::anyhow!(
            "{url} does not speak gRPC (it answered as an HTTP server: {message}); \
             Spillway's gRPC port is 8081 by default, its HTTP port 8080"
        );
    }
    let causes = std::error::Error::source(status)
        .map(crate::one_line)
        .unwrap_or_default();
    let closed = [
        "connection closed",
        "broken pipe",
        "reset by peer",
        "operation was canceled",
        "CertificateRequired",
    ]
    .iter()
    .any(|c| causes.contains(c) || message.contains(c));
    if closed && (message.contains("transport error") || causes.contains("transport error")) {
        let likely = if !url.starts_with("grpcs://") {
            "if that port is TLS, ask it with grpcs://"
        } else if tls.client_cert.is_none() {
            "over TLS it may require a client certificate: --client-cert and --client-key"
        } else {
            "its log says why (a client certificate its CA did not sign?)"
        };
        return anyhow::anyhow!("{url} closed the connection ({causes}): {likely}");
    }
    let mut said = format!("{}: {message}", status.code());
    if !causes.is_empty() && !said.contains(&causes) {
        said.push_str(&format!(": {causes}"));
    }
    anyhow::anyhow!("{url}: {said}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_urls_say_api_and_tls() {
        assert_eq!(
            Server::parse("grpcs://h:1").unwrap(),
            Server::Grpc {
                authority: "h:1".into(),
                tls: true
            }
        );
        assert_eq!(
            Server::parse("http://h:1/").unwrap(),
            Server::Http {
                base: "http://h:1".into(),
                tls: false
            }
        );
        assert!(Server::parse("h:1").is_err());
    }
}
