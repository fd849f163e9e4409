//! `GET /ui`: the console page and its two files, served from the binary with a content
//! security policy that lets nothing else load; nothing on the page is fetched from
//! elsewhere; off with `ui: false` (`--no-ui`). `/v1/config` lists every rule the page
//! shows. (The page in a real browser: the CLI's `tests/it/ui.rs`.)

use crate::support;

use serde_json::Value;
use support::{Backing, Server};

const POLICY: &str = "
domain: shop
descriptors:
  - key: user
    limits:
      - { name: burst, algorithm: gcra, limit: 5, window: 1s, burst: 10 }
      - { limit: 1000, window: 1d }
  - key: ip
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 60 }
";

#[tokio::test]
async fn the_page_and_its_files_are_served_from_the_binary() {
    let s = Server::start("ui", &[("shop.yaml", POLICY)], Backing::Memory).await;
    let http = reqwest::Client::new();
    let mut files = Vec::new();
    for (path, kind) in [
        ("/ui", "text/html"),
        ("/ui/", "text/html"),
        ("/ui/console.js", "text/javascript"),
        ("/ui/console.css", "text/css"),
    ] {
        let r = http.get(s.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let header = |name: &str| r.headers()[name].to_str().unwrap().to_owned();
        assert!(header("content-type").starts_with(kind), "{path}");
        assert_eq!(header("x-content-type-options"), "nosniff");
        let csp = header("content-security-policy");
        assert!(
            csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
            "{csp}"
        );
        files.push(r.text().await.unwrap());
    }
    let page = &files[0];
    assert!(page.contains("<script src=\"/ui/console.js\""), "{page}");
    assert!(page.contains("href=\"/ui/console.css\""), "{page}");
    for (text, name) in files.iter().zip(["page", "page", "script", "stylesheet"]) {
        // The charts' SVG namespace is a name, not a location: nothing is fetched from it.
        let text = text.replace("http://www.w3.org/2000/svg", "");
        assert!(
            !text.contains("http://") && !text.contains("https://"),
            "the {name} loads from elsewhere"
        );
        assert!(
            !text.contains("<script>"),
            "the {name} has an inline script"
        );
    }
}

#[tokio::test]
async fn no_ui_turns_the_page_off() {
    let s = Server::start_with(
        "ui-off",
        &[("shop.yaml", POLICY)],
        Backing::Memory,
        |settings| {
            settings.admin.ui = false;
        },
    )
    .await;
    let r = reqwest::get(s.url("/ui")).await.unwrap();
    assert_eq!(r.status(), 404);
    let r = reqwest::get(s.url("/ui/console.js")).await.unwrap();
    assert_eq!(r.status(), 404);
    // Everything else still answers.
    assert_eq!(
        reqwest::get(s.url("/v1/config")).await.unwrap().status(),
        200
    );
}

#[tokio::test]
async fn the_config_lists_every_rule_as_the_page_shows_it() {
    let s = Server::start("ui-config", &[("shop.yaml", POLICY)], Backing::Memory).await;
    let config: Value = serde_json::from_str(&s.get_text("/v1/config").await).unwrap();
    let rules = config["domains"][0]["rules"].as_array().unwrap();
    let shown: Vec<(String, String, String)> = rules
        .iter()
        .map(|r| {
            let text = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
            (text("path"), text("slot"), text("mode"))
        })
        .collect();
    let expected = [
        ("ip", "", "shadow"),
        ("user", "#burst", "enforce"),
        ("user", "#1", "enforce"),
    ]
    .map(|(p, s, m)| (p.to_owned(), s.to_owned(), m.to_owned()));
    for rule in &expected {
        assert!(shown.contains(rule), "{rule:?} in {shown:?}");
    }
    assert_eq!(shown.len(), expected.len());
    let burst = rules.iter().find(|r| r["slot"] == "#burst").unwrap();
    assert_eq!(burst["algorithm"], "gcra");
    assert_eq!(burst["limit"], 5);
    assert_eq!(burst["burst"], 10);
    assert_eq!(burst["description"], "burst: 5 per 1s (gcra) burst 10");
}
