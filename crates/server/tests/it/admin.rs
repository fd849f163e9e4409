//! The admin listener: the pages that show who is limited and how (`/ui`, `/v1/top`, `/v1/history`,
//! `/v1/config`, `/v1/explain`, the reference's `/rlconfig`) are served there and
//! answer 404 on the check port; with a token, 401 without it (health needs none);
//! off, nothing listens.

use crate::support;

use support::{Backing, Server};

const POLICY: &str = "
domain: shop
descriptors:
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 10 }
    descriptors:
      - key: plan
        value: free
        shadow_mode: true
        rate_limit: { unit: hour, requests_per_unit: 100 }
  - key: ip
    limits:
      - { name: burst, algorithm: gcra, limit: 5, window: 10s, burst: 10 }
      - { limit: 1000, window: 1d }
  - key: internal
    rate_limit: { unlimited: true }
";

const ADMIN_PAGES: [&str; 6] = [
    "/ui",
    "/v1/top?domain=shop",
    "/v1/history",
    "/v1/config",
    "/v1/explain",
    "/rlconfig",
];

/// A request for the page at `url`: a POST of a check's body to `/v1/explain`, a GET
/// to the others.
fn page_request(http: &reqwest::Client, url: String) -> reqwest::RequestBuilder {
    if url.ends_with("/v1/explain") {
        http.post(url).json(&serde_json::json!({
            "domain": "shop",
            "descriptors": [{ "entries": [{ "key": "user", "value": "u1" }] }]
        }))
    } else {
        http.get(url)
    }
}

async fn get_or_post(http: &reqwest::Client, url: String) -> reqwest::Response {
    page_request(http, url).send().await.unwrap()
}

#[tokio::test]
async fn operator_pages_are_on_the_admin_listener_only() {
    let s = Server::start("admin", &[("shop.yaml", POLICY)], Backing::Memory).await;
    let admin = s.running.admin_addr.expect("on by default");
    for page in ADMIN_PAGES {
        let r = get_or_post(&s.http, s.check_url(page)).await;
        assert_eq!(r.status(), 404, "{page} on the check port");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"]["kind"], "not_found");
        let r = get_or_post(&s.http, format!("http://{admin}{page}")).await;
        assert_eq!(r.status(), 200, "{page} on the admin listener");
    }
    // Both serve health and metrics; the check APIs stay on the check port.
    for path in ["/healthz", "/readyz", "/healthcheck", "/metrics"] {
        let on_check = s.http.get(s.check_url(path)).send().await.unwrap();
        let on_admin = s
            .http
            .get(format!("http://{admin}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(
            (on_check.status().as_u16(), on_admin.status().as_u16()),
            (200, 200),
            "{path}"
        );
    }
    let r = s
        .http
        .post(format!("http://{admin}/v1/check"))
        .json(&serde_json::json!({ "domain": "shop", "descriptors": [] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "no decisions on the admin listener");
}

#[tokio::test]
async fn rlconfig_lists_every_limit_in_the_reference_format() {
    let s = Server::start("admin-rlconfig", &[("shop.yaml", POLICY)], Backing::Memory).await;
    let r = s.http.get(s.url("/rlconfig")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = r.text().await.unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "shop.internal: unit=UNKNOWN requests_per_unit=0, shadow_mode: false",
            "shop.ip#1: unit=DAY requests_per_unit=1000, shadow_mode: false",
            "shop.ip#burst: unit=10s requests_per_unit=5, shadow_mode: false",
            "shop.user: unit=MINUTE requests_per_unit=10, shadow_mode: false",
            "shop.user.plan_free: unit=HOUR requests_per_unit=100, shadow_mode: true",
        ],
        "{text}"
    );
}

#[tokio::test]
async fn a_token_guards_the_admin_listener_but_not_its_health() {
    let s = Server::start_with(
        "admin-token",
        &[("shop.yaml", POLICY)],
        Backing::Memory,
        |settings| settings.admin.token = Some(spillway_redis::Password::new("s3cret")),
    )
    .await;
    for page in ADMIN_PAGES {
        let r = get_or_post(&s.http, s.url(page)).await;
        assert_eq!(r.status(), 401, "{page} without the token");
        let challenges: Vec<_> = r
            .headers()
            .get_all("www-authenticate")
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            challenges,
            [
                "Bearer realm=\"spillway admin\"",
                "Basic realm=\"spillway admin\""
            ]
        );
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"]["kind"], "unauthorized");
    }
    let with = |auth: &'static str| {
        let (http, url) = (s.http.clone(), s.url("/v1/config"));
        async move {
            http.get(url)
                .header("authorization", auth)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(with("Bearer s3cret").await, 200);
    // A browser's prompt: any user, the token as password ("ops:s3cret").
    assert_eq!(with("Basic b3BzOnMzY3JldA==").await, 200);
    assert_eq!(with("Bearer s3cre").await, 401);
    assert_eq!(with("Bearer s3cret2").await, 401);
    let admin = s.running.admin_addr.unwrap();
    for path in ["/healthz", "/readyz", "/healthcheck"] {
        let r = s
            .http
            .get(format!("http://{admin}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path} needs no token");
    }
}

#[tokio::test]
async fn off_means_nothing_listens() {
    let s = Server::start_with(
        "admin-off",
        &[("shop.yaml", POLICY)],
        Backing::Memory,
        |settings| settings.admin.addr = None,
    )
    .await;
    assert_eq!(s.running.admin_addr, None);
    let r = s.http.get(s.url("/v1/config")).send().await.unwrap();
    assert_eq!(
        r.status(),
        404,
        "and the check port does not take its pages over"
    );
}

/// Issue #37 (6): a page on another site that points its own name at 127.0.0.1 (DNS
/// rebinding) reached the admin listener with that name as `Host`, and read
/// `/v1/config`; a page posting from another site is refused by its `Origin`. Health
/// answers under any name (probes); `admin_hosts` names more.
#[tokio::test]
async fn the_admin_listener_answers_only_under_its_own_names() {
    let s = Server::start_with(
        "admin-hosts",
        &[("shop.yaml", POLICY)],
        Backing::Memory,
        |settings| settings.admin.hosts = vec!["spillway.internal".into()],
    )
    .await;
    let admin = s.running.admin_addr.unwrap();
    let port = admin.port();
    let send = |path: &'static str, header: &'static str, value: String| {
        let request = page_request(&s.http, format!("http://{admin}{path}"));
        async move { request.header(header, value).send().await.unwrap() }
    };
    for page in ADMIN_PAGES {
        let r = send(page, "host", format!("rebind.attacker.example:{port}")).await;
        assert_eq!(r.status(), 403, "{page} under a rebound name");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"]["kind"], "host_not_allowed", "{page}");
        for host in [
            format!("localhost:{port}"),
            format!("127.0.0.1:{port}"),
            format!("spillway.internal:{port}"),
        ] {
            let r = send(page, "host", host.clone()).await;
            assert_eq!(r.status(), 200, "{page} under {host}");
        }
    }
    let r = send("/v1/explain", "origin", "https://attacker.example".into()).await;
    assert_eq!(r.status(), 403, "a cross-site post");
    let r = send("/v1/explain", "origin", format!("http://127.0.0.1:{port}")).await;
    assert_eq!(r.status(), 200, "the console's own post");
    for path in ["/healthz", "/readyz", "/healthcheck"] {
        let r = send(path, "host", "anything.example".into()).await;
        assert_eq!(r.status(), 200, "{path} answers probes under any name");
    }
}

/// `/openapi.json` is the document kept in the repository, and every operation it
/// names is served on the listener its tags say (schemathesis, in the test command,
/// checks the answers against it).
#[tokio::test]
async fn the_openapi_document_is_served_and_every_operation_in_it_is_routed() {
    let s = Server::start("openapi", &[("shop.yaml", POLICY)], Backing::Memory).await;
    let admin = s.running.admin_addr.expect("on by default");
    let served = s
        .http
        .get(format!("http://{admin}/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(served.status(), 200);
    assert_eq!(
        served.text().await.unwrap(),
        spillway_server::openapi::DOCUMENT
    );

    let doc: serde_json::Value = serde_json::from_str(spillway_server::openapi::DOCUMENT).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let mut seen = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        let path = path.replace("{domain}", "shop");
        for (method, op) in item.as_object().unwrap() {
            let query = match path.as_str() {
                "/v1/top" => "?domain=shop",
                p if p.starts_with("/v1/limits/") => "?entry=user=u1",
                _ => "",
            };
            for tag in op["tags"].as_array().unwrap() {
                let url = match tag.as_str().unwrap() {
                    "check" => s.check_url(&format!("{path}{query}")),
                    "admin" => format!("http://{admin}{path}{query}"),
                    other => panic!("{method} {path}: unknown tag {other}"),
                };
                let r = match method.as_str() {
                    "get" => s.http.get(url),
                    "delete" => s.http.delete(url),
                    "post" => s.http.post(url).json(&serde_json::json!({
                        "domain": "shop",
                        "descriptors": [{ "entries": [{ "key": "user", "value": "u1" }] }]
                    })),
                    "put" => s.http.put(url).json(&serde_json::json!({
                        "entries": [{ "key": "user", "value": "u1" }],
                        "limits": [{ "algorithm": "gcra", "limit": 10, "window": "1s" }]
                    })),
                    other => panic!("{other} {path}: a method no route takes"),
                };
                let r = r.send().await.unwrap();
                let status = r.status();
                // A route's own 404 (no such override) names its kind; no route is
                // `not_found`.
                let body: serde_json::Value = r.json().await.unwrap_or_default();
                assert!(
                    status != 405 && !(status == 404 && body["error"]["kind"] == "not_found"),
                    "{method} {path} on the {tag} listener: {status} {body}"
                );
                seen += 1;
            }
        }
    }
    assert!(seen >= 21, "{seen} operations asked");
}
