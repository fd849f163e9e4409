//! The browser the console test drives: chromedriver, Chromium, and waits on the page.

use super::*;

pub(super) fn chromedriver() -> PathBuf {
    std::env::var_os("SPILLWAY_TEST_CHROMEDRIVER")
        .map(PathBuf::from)
        .expect(
            "SPILLWAY_TEST_CHROMEDRIVER is not set: run the suite with scripts/test, which \
             installs Debian's chromium and chromium-driver and exports their paths",
        )
}

fn chromium() -> PathBuf {
    std::env::var_os("SPILLWAY_TEST_CHROMIUM")
        .map_or_else(|| "/usr/bin/chromium".into(), PathBuf::from)
}

/// A WebDriver session with headless Chromium. The flags are the ones this kind of
/// machine needs: no sandbox as root, and no background traffic to Google's hosts (the
/// network is closed; those connections would fail at every start).
pub(super) async fn browser(driver_port: u16, profile: &Path) -> Client {
    let args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,1500",
    ]
    .map(String::from)
    .into_iter()
    .chain([format!("--user-data-dir={}", profile.display())])
    .collect::<Vec<_>>();
    let capabilities = json!({
        "browserName": "chrome",
        "goog:chromeOptions": { "binary": chromium(), "args": args },
        "goog:loggingPrefs": { "browser": "ALL" },
    });
    let Value::Object(capabilities) = capabilities else {
        unreachable!()
    };
    let url = format!("http://127.0.0.1:{driver_port}");
    // chromedriver listens a moment after it starts.
    let mut last = None;
    for _ in 0..100 {
        match ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities.clone())
            .connect(&url)
            .await
        {
            Ok(client) => return client,
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no WebDriver session: {last:?}");
}

/// The page's console messages at `SEVERE` (errors, failed loads, refused by the
/// content security policy) since the last call: chromedriver's log endpoint.
pub(super) async fn console_errors(client: &Client, driver_port: u16) -> Vec<String> {
    let session = client.session_id().await.unwrap().unwrap();
    let log: Value = reqwest::Client::new()
        .post(format!(
            "http://127.0.0.1:{driver_port}/session/{session}/se/log"
        ))
        .json(&json!({ "type": "browser" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let entries = log["value"].as_array().expect("a log").clone();
    entries
        .into_iter()
        .filter(|e| e["level"] == "SEVERE")
        .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The rules of the example policies as the page names them: `domain/path#slot`.
pub(super) fn example_rules(dir: &Path) -> Vec<String> {
    let set = spillway_policy::load(dir).unwrap();
    let mut rules = Vec::new();
    for d in set.domains() {
        for r in d.rules() {
            rules.push(format!("{}/{}{}", d.name(), r.metric, r.slot));
        }
    }
    rules
}

/// Steady traffic over a few keys of every example rule, one heavy key among them, and
/// three teams of the org's shares.
pub(super) async fn traffic(client: reqwest::Client, base: String) {
    for i in 0u64.. {
        let key = if i % 3 == 0 {
            "k1".into()
        } else {
            format!("k{}", i % 5)
        };
        let body = json!({ "domain": "api", "descriptors": [
            { "entries": [{ "key": "remote_address", "value": format!("10.0.0.{}", i % 7) }] },
            { "entries": [{ "key": "api_key", "value": key }] },
            { "entries": [{ "key": "tenant", "value": format!("t{}", i % 2) }] },
            { "entries": [{ "key": "path", "value": "/admin/users" }] },
        ]});
        let _ = client
            .post(format!("{base}/v1/check"))
            .json(&body)
            .send()
            .await;
        // The org's teams, for its shares chart: search half of them, ingest and an
        // unlisted team (the tree's `*`) a quarter each.
        let team = ["search", "search", "ingest", "design"][(i % 4) as usize];
        let body = json!({ "domain": "org", "descriptors": [{ "entries": [
            { "key": "org", "value": "acme" }, { "key": "team", "value": team }] }] });
        let _ = client
            .post(format!("{base}/v1/check"))
            .json(&body)
            .send()
            .await;
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
}

/// Submits the explain form as it stands.
pub(super) async fn submit(client: &Client, form: &str) {
    client
        .find(Locator::Css(&format!("#{form} button")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

pub(super) async fn wait_for(client: &Client, css: &str) -> fantoccini::elements::Element {
    match client
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css(css))
        .await
    {
        Ok(e) => e,
        Err(e) => {
            let text = match client.find(Locator::Css("main")).await {
                Ok(main) => main.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            panic!("`{css}` never appeared ({e}); the page shows:\n{text}");
        }
    }
}
