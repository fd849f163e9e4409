//! The xDS settings: rules from a control plane (an ADS server) instead of files.

use std::path::PathBuf;
use std::time::Duration;

/// Rules over xDS: where from, and how to reach it. (`Debug` masks the values of the
/// stream's headers: they often carry a credential.)
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Xds {
    /// `host:port` of the ADS server; `None`: rules come from `path`'s files.
    pub server: Option<String>,
    /// The node id the server knows this service by.
    pub node_id: String,
    /// The node's metadata (string values).
    pub node_metadata: Vec<(String, String)>,
    /// gRPC metadata sent with the stream.
    pub headers: Vec<(String, String)>,
    /// TLS to the server; `None`: plaintext.
    pub tls: Option<XdsTls>,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// The largest response accepted.
    pub max_message_bytes: usize,
    /// Ready before the first set arrives, serving none until it does.
    pub ready_without_rules: bool,
}

impl std::fmt::Debug for Xds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(name, _)| (name.as_str(), "***"))
            .collect();
        f.debug_struct("Xds")
            .field("server", &self.server)
            .field("node_id", &self.node_id)
            .field("node_metadata", &self.node_metadata)
            .field("headers", &headers)
            .field("tls", &self.tls)
            .field("backoff_initial", &self.backoff_initial)
            .field("backoff_max", &self.backoff_max)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("ready_without_rules", &self.ready_without_rules)
            .finish()
    }
}

/// TLS to the ADS server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct XdsTls {
    /// CAs to trust (default: the system's roots).
    pub server_ca: Option<PathBuf>,
    /// The name the server's certificate must carry (default: the URL's host).
    pub server_san: Option<String>,
    /// A client certificate and key to present.
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
}
