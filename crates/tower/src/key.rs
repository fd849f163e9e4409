//! Where a limit's key comes from: the client's IP, a header, a value an earlier
//! layer put in the request's extensions, the method and route, or your own closure.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use http::HeaderName;
use http::request::Parts;

use crate::ClientIp;

type KeyFn = dyn Fn(&Parts) -> Option<String> + Send + Sync;

/// Takes a limit's key from a request. `None` from any of them means "no key": the
/// layer then rejects with 400 or uses the fallback key (see
/// [`on_missing_key`](crate::RateLimitLayerBuilder::on_missing_key)). So does a value
/// longer than [`MAX_KEY_LEN`](spillway_core::MAX_KEY_LEN) bytes.
///
/// The layer stores each limit's state under `name:value`: two limits never share a
/// key, whatever their values.
#[derive(Clone)]
pub struct KeyExtractor(Source);

#[derive(Clone)]
enum Source {
    ClientIp(ClientIp),
    Header(HeaderName),
    Extension(&'static str, fn(&http::Extensions) -> Option<String>),
    MethodAndRoute,
    Fn(Arc<KeyFn>),
    /// A setting that did not parse, reported by the layer's builder.
    Invalid(String),
}

impl KeyExtractor {
    /// The client's IP address (see [`ClientIp`] for proxies and IPv6 grouping).
    pub fn client_ip(ip: ClientIp) -> KeyExtractor {
        KeyExtractor(Source::ClientIp(ip))
    }

    /// A header's value, e.g. an API key (`x-api-key`). Missing, empty or non-text
    /// values give no key. A name that is not a valid header name is reported when
    /// the layer is built.
    pub fn header(name: &str) -> KeyExtractor {
        match HeaderName::from_bytes(name.as_bytes()) {
            Ok(name) => KeyExtractor(Source::Header(name)),
            Err(_) => KeyExtractor(Source::Invalid(format!(
                "`{name}` is not a valid header name"
            ))),
        }
    }

    /// A value an earlier layer inserted into the request's extensions (an
    /// authenticated user or tenant), formatted with `Display`.
    pub fn extension<T: fmt::Display + Send + Sync + 'static>() -> KeyExtractor {
        fn get<T: fmt::Display + Send + Sync + 'static>(e: &http::Extensions) -> Option<String> {
            e.get::<T>().map(T::to_string)
        }
        KeyExtractor(Source::Extension(std::any::type_name::<T>(), get::<T>))
    }

    /// The method and route, `GET /users/{id}`: axum's matched route when the layer
    /// runs inside a router (`Router::route_layer`), otherwise the request's path —
    /// which the client chooses, so prefer a route or bound the keys.
    pub fn method_and_route() -> KeyExtractor {
        KeyExtractor(Source::MethodAndRoute)
    }

    /// Your own function of the request's head.
    pub fn from_fn(f: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static) -> KeyExtractor {
        KeyExtractor(Source::Fn(Arc::new(f)))
    }

    /// The key for this request, if it has one.
    pub fn extract(&self, parts: &Parts) -> Option<String> {
        self.extract_borrowed(parts).map(Cow::into_owned)
    }

    /// The same, borrowing the request's text where it can (a header's value): the
    /// layer copies it once, into the key.
    pub(crate) fn extract_borrowed<'a>(&self, parts: &'a Parts) -> Option<Cow<'a, str>> {
        match &self.0 {
            Source::ClientIp(ip) => ip.key(&parts.headers, &parts.extensions).map(Cow::Owned),
            Source::Header(name) => parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .filter(|v| !v.is_empty())
                .map(Cow::Borrowed),
            Source::Extension(_, get) => get(&parts.extensions).map(Cow::Owned),
            Source::MethodAndRoute => {
                Some(Cow::Owned(format!("{} {}", parts.method, route(parts))))
            }
            Source::Fn(f) => f(parts).map(Cow::Owned),
            Source::Invalid(_) => None,
        }
    }

    /// What a missing key was, for the 400 answer: `x-api-key header`, `client IP`…
    pub(crate) fn describe(&self) -> String {
        match &self.0 {
            Source::ClientIp(_) => "client IP address".into(),
            Source::Header(name) => format!("`{name}` header"),
            Source::Extension(ty, _) => format!("`{ty}` request extension"),
            Source::MethodAndRoute => "route".into(),
            Source::Fn(_) | Source::Invalid(_) => "key".into(),
        }
    }

    /// Settings that did not parse.
    pub(crate) fn errors(&self) -> &[String] {
        match &self.0 {
            Source::ClientIp(ip) => &ip.errors,
            Source::Invalid(e) => std::slice::from_ref(e),
            _ => &[],
        }
    }
}

fn route(parts: &Parts) -> &str {
    #[cfg(feature = "axum")]
    if let Some(matched) = parts.extensions.get::<axum::extract::MatchedPath>() {
        return matched.as_str();
    }
    parts.uri.path()
}

impl fmt::Debug for KeyExtractor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Source::ClientIp(ip) => f.debug_tuple("ClientIp").field(ip).finish(),
            Source::Header(name) => f.debug_tuple("Header").field(name).finish(),
            Source::Extension(ty, _) => f.debug_tuple("Extension").field(ty).finish(),
            Source::MethodAndRoute => f.write_str("MethodAndRoute"),
            Source::Fn(_) => f.write_str("Fn"),
            Source::Invalid(e) => f.debug_tuple("Invalid").field(e).finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(req: http::Request<()>) -> Parts {
        req.into_parts().0
    }

    #[test]
    fn each_source_reads_its_part_of_the_request() {
        #[derive(Clone)]
        struct User(u32);
        impl fmt::Display for User {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "user-{}", self.0)
            }
        }
        let mut req = http::Request::builder()
            .method("POST")
            .uri("/items/7?x=1")
            .header("x-api-key", "k-123")
            .header("x-empty", "")
            .body(())
            .unwrap();
        req.extensions_mut().insert(User(42));
        let p = parts(req);

        assert_eq!(
            KeyExtractor::header("x-api-key").extract(&p).unwrap(),
            "k-123"
        );
        assert_eq!(KeyExtractor::header("x-empty").extract(&p), None);
        assert_eq!(KeyExtractor::header("x-other").extract(&p), None);
        assert_eq!(
            KeyExtractor::extension::<User>().extract(&p).unwrap(),
            "user-42"
        );
        assert_eq!(KeyExtractor::extension::<String>().extract(&p), None);
        assert_eq!(
            KeyExtractor::method_and_route().extract(&p).unwrap(),
            "POST /items/7"
        );
        let query = KeyExtractor::from_fn(|p| p.uri.query().map(str::to_owned));
        assert_eq!(query.extract(&p).unwrap(), "x=1");
        assert_eq!(KeyExtractor::client_ip(ClientIp::new()).extract(&p), None);
    }
}
