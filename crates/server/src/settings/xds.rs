//! Where the rules come from: policy files (the default), or an xDS server, from the
//! settings file, the reference's `CONFIG_TYPE`, `CONFIG_GRPC_XDS_*` and `XDS_CLIENT_*`
//! variables, and the command line.

use std::path::PathBuf;

use super::value::{boolean, duration};
use super::{Settings, SettingsError};
use crate::xds::{XdsSettings, XdsTls};

/// The source of the live rules.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Rules {
    /// The policy file or directory (`config`), watched.
    #[default]
    Files,
    /// An ADS server (`CONFIG_TYPE=GRPC_XDS_SOTW`).
    Xds(Box<XdsSettings>),
}

/// The settings file's keys for this part.
#[derive(Debug, Default)]
pub(super) struct XdsFile {
    pub xds_server: Option<String>,
    pub xds_node_id: Option<String>,
    pub xds_tls_ca: Option<PathBuf>,
    pub xds_tls_cert: Option<PathBuf>,
    pub xds_tls_key: Option<PathBuf>,
    pub xds_tls_san: Option<String>,
}

/// `k=v,k=v` (node metadata) or `k:v,k:v` (headers) as pairs; `name` says where
/// they came from in an error.
pub fn pairs(
    list: &str,
    separator: char,
    name: &str,
) -> Result<Vec<(String, String)>, SettingsError> {
    list.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.split_once(separator)
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                .ok_or_else(|| SettingsError(format!("{name}: `{p}` is not key{separator}value")))
        })
        .collect()
}

impl Settings {
    /// The xDS settings, made on first use.
    pub fn xds_mut(&mut self) -> &mut XdsSettings {
        if !matches!(self.rules, Rules::Xds(_)) {
            self.rules = Rules::Xds(Box::default());
        }
        match &mut self.rules {
            Rules::Xds(x) => x,
            Rules::Files => unreachable!("set just above"),
        }
    }

    pub(super) fn apply_xds_file(
        &mut self,
        f: XdsFile,
        near: impl Fn(PathBuf) -> PathBuf,
    ) -> Result<(), SettingsError> {
        if let Some(v) = f.xds_server {
            self.xds_mut().server = v;
        }
        if let Some(v) = f.xds_node_id {
            self.xds_mut().node_id = v;
        }
        let tls = [
            f.xds_tls_ca.is_some(),
            f.xds_tls_cert.is_some(),
            f.xds_tls_key.is_some(),
            f.xds_tls_san.is_some(),
        ];
        if tls.iter().any(|t| *t) {
            let t = self.xds_mut().tls.get_or_insert_with(XdsTls::default);
            t.server_ca = f.xds_tls_ca.map(&near).or(t.server_ca.take());
            t.client_cert = f.xds_tls_cert.map(&near).or(t.client_cert.take());
            t.client_key = f.xds_tls_key.map(&near).or(t.client_key.take());
            t.server_san = f.xds_tls_san.or(t.server_san.take());
        }
        Ok(())
    }

    /// The reference's `CONFIG_TYPE` (`FILE` or `GRPC_XDS_SOTW`; anything else is an
    /// error, as it is fatal in the reference) and the xDS client's variables;
    /// `FORCE_START_WITHOUT_INITIAL_CONFIG` and `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`.
    pub(super) fn apply_xds_env(
        &mut self,
        var: &impl Fn(&str) -> Option<String>,
    ) -> Result<(), SettingsError> {
        let err = |name: &str, e: String| SettingsError(format!("{name}: {e}"));
        if let Some(v) = var("FORCE_START_WITHOUT_INITIAL_CONFIG") {
            self.force_start_without_rules =
                boolean(&v).map_err(|e| err("FORCE_START_WITHOUT_INITIAL_CONFIG", e))?;
        }
        if let Some(v) = var("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED") {
            self.ready_needs_a_domain =
                boolean(&v).map_err(|e| err("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", e))?;
        }
        match var("CONFIG_TYPE")
            .map(|v| v.to_ascii_uppercase())
            .as_deref()
        {
            None | Some("FILE") => return Ok(()),
            Some("GRPC_XDS_SOTW") => {}
            Some(other) => {
                return Err(err(
                    "CONFIG_TYPE",
                    format!("`{other}` is not FILE or GRPC_XDS_SOTW"),
                ));
            }
        }
        let xds = self.xds_mut();
        if let Some(v) = var("CONFIG_GRPC_XDS_SERVER_URL").filter(|v| !v.is_empty()) {
            xds.server = v;
        }
        if let Some(v) = var("CONFIG_GRPC_XDS_NODE_ID").filter(|v| !v.is_empty()) {
            xds.node_id = v;
        }
        if let Some(v) = var("CONFIG_GRPC_XDS_NODE_METADATA") {
            xds.node_metadata = pairs(&v, '=', "CONFIG_GRPC_XDS_NODE_METADATA")?;
        }
        if let Some(v) = var("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS") {
            xds.headers = pairs(&v, ':', "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS")?;
        }
        if let Some(v) = var("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL") {
            xds.backoff_initial =
                duration(&v).map_err(|e| err("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", e))?;
        }
        if let Some(v) = var("XDS_CLIENT_BACKOFF_MAX_INTERVAL") {
            xds.backoff_max =
                duration(&v).map_err(|e| err("XDS_CLIENT_BACKOFF_MAX_INTERVAL", e))?;
        }
        if let Some(v) = var("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES") {
            xds.max_message_bytes = v
                .parse()
                .map_err(|e| err("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", format!("{e}")))?;
        }
        let use_tls = var("CONFIG_GRPC_XDS_SERVER_USE_TLS")
            .map(|v| boolean(&v).map_err(|e| err("CONFIG_GRPC_XDS_SERVER_USE_TLS", e)))
            .transpose()?;
        match use_tls {
            Some(false) => xds.tls = None,
            Some(true) => {
                let path = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
                xds.tls = Some(XdsTls {
                    server_ca: path("CONFIG_GRPC_XDS_SERVER_TLS_CACERT"),
                    server_san: var("CONFIG_GRPC_XDS_SERVER_TLS_SAN").filter(|v| !v.is_empty()),
                    client_cert: path("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"),
                    client_key: path("CONFIG_GRPC_XDS_CLIENT_TLS_KEY"),
                });
            }
            None => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::tests::env;
    use std::time::Duration;

    #[test]
    fn envoy_gateways_variables_make_an_xds_source() {
        let mut s = Settings::default();
        s.apply_xds_env(&env(&[
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
            ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
            ("CONFIG_GRPC_XDS_NODE_METADATA", "zone=a, team = b"),
            ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "x-token:t1"),
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
            ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
            ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "2s"),
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
        ]))
        .unwrap();
        let Rules::Xds(x) = &s.rules else {
            panic!("{:?}", s.rules)
        };
        assert_eq!(x.server, "envoy-gateway:18001");
        assert_eq!(x.node_id, "envoy-ratelimit");
        assert_eq!(
            x.node_metadata,
            [("zone".into(), "a".into()), ("team".into(), "b".into())]
        );
        assert_eq!(x.headers, [("x-token".into(), "t1".into())]);
        assert_eq!(x.backoff_initial, Duration::from_secs(2));
        let tls = x.tls.as_ref().unwrap();
        assert_eq!(tls.server_ca.as_deref(), Some("/certs/ca.crt".as_ref()));
        assert!(s.force_start_without_rules);

        let mut s = Settings::default();
        s.apply_xds_env(&env(&[("CONFIG_TYPE", "FILE")])).unwrap();
        assert_eq!(s.rules, Rules::Files);
        let e = Settings::default()
            .apply_xds_env(&env(&[("CONFIG_TYPE", "CONSUL")]))
            .unwrap_err();
        assert!(e.to_string().contains("CONFIG_TYPE"), "{e}");
        let e = Settings::default()
            .apply_xds_env(&env(&[
                ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
                ("CONFIG_GRPC_XDS_NODE_METADATA", "zone"),
            ]))
            .unwrap_err();
        assert!(e.to_string().contains("not key=value"), "{e}");
    }
}
