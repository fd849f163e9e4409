//! The client's IP address: the connection's peer, or — only when the peer is a proxy
//! you trust — the address your proxies say they forwarded for.
//!
//! Forwarding headers are written by whoever sends the request, so they are believed
//! only as far as a chain of trusted proxies vouches for them: walking the hops of the
//! one header your proxies append ([`Forwarding`]: `X-Forwarded-For` by default, or
//! RFC 7239's `Forwarded`) from the right (the hop nearest to us) leftwards, the first
//! address that is not a trusted proxy is the client. A client that writes its own
//! `X-Forwarded-For: 1.2.3.4` only adds a hop to the left of the one its proxy
//! appended, and a header its proxies do not append (`Forwarded: for=6.6.6.6` behind
//! nginx) is never read, so it cannot pick its key. A hop that is not an address
//! (`unknown`, an obfuscated `_node`) ends the walk without a key.
//!
//! This is nginx's `set_real_ip_from` + `real_ip_header X-Forwarded-For` +
//! `real_ip_recursive on`. Envoy's `xff_num_trusted_hops: N` trusts the last N hops by
//! their count instead of their address; listing the N proxies' addresses here gives
//! the same client, and a client that adds hops of its own cannot shift it.
//!
//! IPv6 clients usually own a whole /64 (or more), so by default they are grouped by
//! their /64: one subscriber rotating addresses inside it still has one limit.

use std::net::{IpAddr, SocketAddr};

use http::header::{FORWARDED, HeaderMap};
use http::{Extensions, HeaderName};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The header your trusted proxies append the address they received from; the other
/// one is never read, whoever wrote it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Forwarding {
    /// `X-Forwarded-For: client, proxy1` (nginx's `$proxy_add_x_forwarded_for`, Envoy,
    /// HAProxy's `option forwardfor`, AWS and Google load balancers).
    #[default]
    XForwardedFor,
    /// RFC 7239's `Forwarded: for=client, for=proxy1`.
    Forwarded,
}

/// How to find the client's address. The default trusts no proxy (the peer address
/// is the client) and groups IPv6 clients by /64.
///
/// The peer address is read from the request's extensions: axum's
/// `ConnectInfo<SocketAddr>` (serve with `into_make_service_with_connect_info`),
/// tonic's `TcpConnectInfo`, or a plain `SocketAddr` or `IpAddr` that your own
/// connection code inserts.
#[derive(Clone, Debug)]
pub struct ClientIp {
    trusted: Vec<IpNet>,
    forwarding: Forwarding,
    ipv4_prefix: u8,
    ipv6_prefix: u8,
    /// Settings that did not parse, reported when the layer is built.
    pub(crate) errors: Vec<String>,
}

impl Default for ClientIp {
    fn default() -> ClientIp {
        ClientIp {
            trusted: Vec::new(),
            forwarding: Forwarding::XForwardedFor,
            ipv4_prefix: 32,
            ipv6_prefix: 64,
            errors: Vec::new(),
        }
    }
}

impl ClientIp {
    /// The peer address, no proxies trusted, IPv6 grouped by /64.
    pub fn new() -> ClientIp {
        ClientIp::default()
    }

    /// Trusts a proxy address or range (`10.0.0.0/8`, `192.0.2.7`, `fd00::/8`): when
    /// the request comes from it, its forwarding headers are believed.
    pub fn trust(mut self, proxy: &str) -> ClientIp {
        let range = proxy
            .parse::<IpNet>()
            .or_else(|_| proxy.parse::<IpAddr>().map(IpNet::from));
        match range {
            Ok(range) => self.trusted.push(range.trunc()),
            Err(_) => self
                .errors
                .push(format!("`{proxy}` is not an IP address or CIDR range")),
        }
        self
    }

    /// Which header the trusted proxies append to (default `X-Forwarded-For`).
    pub fn forwarding(mut self, header: Forwarding) -> ClientIp {
        self.forwarding = header;
        self
    }

    /// Groups IPv6 clients by their first `bits` bits (default 64; 128 = one address).
    pub fn ipv6_prefix(mut self, bits: u8) -> ClientIp {
        if bits == 0 || bits > 128 {
            self.errors
                .push(format!("IPv6 prefix /{bits} is not between /1 and /128"));
        }
        self.ipv6_prefix = bits;
        self
    }

    /// Groups IPv4 clients by their first `bits` bits (default 32 = one address).
    pub fn ipv4_prefix(mut self, bits: u8) -> ClientIp {
        if bits == 0 || bits > 32 {
            self.errors
                .push(format!("IPv4 prefix /{bits} is not between /1 and /32"));
        }
        self.ipv4_prefix = bits;
        self
    }

    /// The client's address as a key: an IPv4 address, or a network (`2001:db8::/64`)
    /// when grouped. `None` when there is no peer address or a trusted hop's header
    /// does not name an address.
    pub fn key(&self, headers: &HeaderMap, extensions: &Extensions) -> Option<String> {
        self.client(headers, extensions).map(|ip| self.group(ip))
    }

    /// The client's address (before grouping).
    pub fn client(&self, headers: &HeaderMap, extensions: &Extensions) -> Option<IpAddr> {
        let mut client = canonical(peer(extensions)?);
        if !self.is_trusted(client) {
            return Some(client);
        }
        let hops = forwarded_hops(headers, self.forwarding)?;
        for hop in hops.iter().rev() {
            client = canonical(hop_address(hop)?);
            if !self.is_trusted(client) {
                return Some(client);
            }
        }
        // Every hop is one of ours: the leftmost is as close to the client as we get.
        Some(client)
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|net| net.contains(&ip))
    }

    fn group(&self, ip: IpAddr) -> String {
        match ip {
            IpAddr::V4(v4) if self.ipv4_prefix >= 32 => v4.to_string(),
            IpAddr::V6(v6) if self.ipv6_prefix >= 128 => v6.to_string(),
            IpAddr::V4(v4) => Ipv4Net::new(v4, self.ipv4_prefix)
                .map_or_else(|_| v4.to_string(), |n| n.trunc().to_string()),
            IpAddr::V6(v6) => Ipv6Net::new(v6, self.ipv6_prefix)
                .map_or_else(|_| v6.to_string(), |n| n.trunc().to_string()),
        }
    }
}

/// The connection's peer address, from whichever framework recorded it.
fn peer(extensions: &Extensions) -> Option<IpAddr> {
    #[cfg(feature = "axum")]
    if let Some(info) = extensions.get::<axum::extract::ConnectInfo<SocketAddr>>() {
        return Some(info.0.ip());
    }
    #[cfg(feature = "tonic")]
    if let Some(addr) = extensions
        .get::<tonic::transport::server::TcpConnectInfo>()
        .and_then(|info| info.remote_addr())
    {
        return Some(addr.ip());
    }
    extensions
        .get::<SocketAddr>()
        .map(SocketAddr::ip)
        .or_else(|| extensions.get::<IpAddr>().copied())
}

/// A dual-stack listener reports IPv4 clients as `::ffff:a.b.c.d`: one client, one key.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Every forwarded-for hop of `header`, left (client side) to right (nearest); header
/// lines concatenate in order. `None` when a header line is not text (a hop we cannot
/// read).
fn forwarded_hops(headers: &HeaderMap, header: Forwarding) -> Option<Vec<&str>> {
    let mut hops = Vec::new();
    match header {
        Forwarding::Forwarded => {
            for line in headers.get_all(FORWARDED) {
                for element in line.to_str().ok()?.split(',') {
                    // An element without `for=` still is a hop: one we cannot place.
                    hops.push(forwarded_for(element).unwrap_or(""));
                }
            }
        }
        Forwarding::XForwardedFor => {
            for line in headers.get_all(&X_FORWARDED_FOR) {
                hops.extend(line.to_str().ok()?.split(','));
            }
        }
    }
    Some(hops)
}

/// The `for=` parameter of one `Forwarded` element.
fn forwarded_for(element: &str) -> Option<&str> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        name.eq_ignore_ascii_case("for").then_some(value)
    })
}

/// One hop's address: `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`,
/// `"[2001:db8::1]:4711"`; `None` for `unknown`, obfuscated names and junk.
fn hop_address(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim().trim_matches('"');
    if let Some(rest) = hop.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok();
    }
    hop.parse::<IpAddr>()
        .ok()
        .or_else(|| hop.parse::<SocketAddr>().ok().map(|a| a.ip()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(ip: &ClientIp, peer: &str, headers: &[(&str, &str)]) -> Option<String> {
        let mut ext = Extensions::new();
        ext.insert(peer.parse::<SocketAddr>().unwrap());
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        ip.key(&map, &ext)
    }

    #[test]
    fn forwarding_headers_from_an_untrusted_peer_are_ignored() {
        let ip = ClientIp::new();
        let spoof = [("x-forwarded-for", "1.2.3.4")];
        assert_eq!(
            ask(&ip, "198.51.100.7:5000", &spoof).unwrap(),
            "198.51.100.7"
        );
    }

    #[test]
    fn the_rightmost_untrusted_hop_is_the_client() {
        let ip = ClientIp::new().trust("10.0.0.0/8").trust("192.0.2.1");
        // The client wrote 6.6.6.6 itself; the edge proxy appended the real peer.
        let xff = [("x-forwarded-for", "6.6.6.6, 203.0.113.9, 192.0.2.1")];
        assert_eq!(ask(&ip, "10.1.2.3:80", &xff).unwrap(), "203.0.113.9");
        // Two header lines are one list.
        let two = [
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-for", "203.0.113.10"),
        ];
        assert_eq!(ask(&ip, "10.1.2.3:80", &two).unwrap(), "203.0.113.10");
        // Every hop trusted: the leftmost.
        let internal = [("x-forwarded-for", "10.9.9.9, 192.0.2.1")];
        assert_eq!(ask(&ip, "10.1.2.3:80", &internal).unwrap(), "10.9.9.9");
        // No header: the proxy itself.
        assert_eq!(ask(&ip, "10.1.2.3:80", &[]).unwrap(), "10.1.2.3");
    }

    #[test]
    fn only_the_header_the_proxies_append_is_read() {
        // Behind nginx (X-Forwarded-For only), a client's own `Forwarded` picks nothing.
        let nginx = ClientIp::new().trust("10.0.0.0/8");
        let spoof = [
            ("forwarded", "for=6.6.6.6"),
            ("x-forwarded-for", "203.0.113.9"),
        ];
        assert_eq!(ask(&nginx, "10.0.0.1:80", &spoof).unwrap(), "203.0.113.9");
        // And behind a proxy that appends `Forwarded`, a client's XFF picks nothing.
        let rfc = ClientIp::new()
            .trust("10.0.0.0/8")
            .forwarding(Forwarding::Forwarded);
        let spoof = [
            ("forwarded", "for=203.0.113.9"),
            ("x-forwarded-for", "6.6.6.6"),
        ];
        assert_eq!(ask(&rfc, "10.0.0.1:80", &spoof).unwrap(), "203.0.113.9");
    }

    #[test]
    fn forwarded_forms_parse() {
        let ip = ClientIp::new()
            .trust("10.0.0.0/8")
            .forwarding(Forwarding::Forwarded)
            .ipv6_prefix(128);
        let h = [(
            "forwarded",
            r#"for=6.6.6.6, for="[2001:db8::17]:4711";proto=https"#,
        )];
        assert_eq!(ask(&ip, "10.0.0.1:80", &h).unwrap(), "2001:db8::17");
        let port = [("forwarded", "For=203.0.113.5:8080;by=10.0.0.1")];
        assert_eq!(ask(&ip, "10.0.0.1:80", &port).unwrap(), "203.0.113.5");
    }

    #[test]
    fn an_unreadable_trusted_hop_gives_no_key() {
        let xff = ClientIp::new().trust("10.0.0.0/8");
        let rfc = xff.clone().forwarding(Forwarding::Forwarded);
        for (ip, h) in [
            (&rfc, ("forwarded", "for=unknown")),
            (&rfc, ("forwarded", "for=_hidden")),
            (&rfc, ("forwarded", "proto=https")),
            (&xff, ("x-forwarded-for", "not-an-ip")),
            (&xff, ("x-forwarded-for", "1.2.3.4,")),
        ] {
            assert_eq!(ask(ip, "10.0.0.1:80", &[h]), None, "{h:?}");
        }
        let ip = xff;
        let no_peer = ip.key(&HeaderMap::new(), &Extensions::new());
        assert_eq!(no_peer, None);
    }

    #[test]
    fn ipv6_is_grouped_by_prefix_and_mapped_ipv4_is_ipv4() {
        let ip = ClientIp::new();
        let a = ask(&ip, "[2001:db8:1:2:aaaa::1]:80", &[]).unwrap();
        let b = ask(&ip, "[2001:db8:1:2:bbbb::9]:80", &[]).unwrap();
        let c = ask(&ip, "[2001:db8:1:3::1]:80", &[]).unwrap();
        assert_eq!(a, "2001:db8:1:2::/64");
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(
            ask(
                &ClientIp::new().ipv6_prefix(48),
                "[2001:db8:1:3::1]:80",
                &[]
            )
            .unwrap(),
            "2001:db8:1::/48"
        );
        assert_eq!(ask(&ip, "[::ffff:192.0.2.9]:80", &[]).unwrap(), "192.0.2.9");
        assert_eq!(
            ask(&ClientIp::new().ipv4_prefix(24), "192.0.2.9:80", &[]).unwrap(),
            "192.0.2.0/24"
        );
    }

    #[test]
    fn bad_settings_are_recorded_for_the_builder() {
        let ip = ClientIp::new()
            .trust("10.0.0.0/33")
            .trust("nope")
            .ipv6_prefix(0);
        assert_eq!(ip.errors.len(), 3, "{:?}", ip.errors);
    }
}
