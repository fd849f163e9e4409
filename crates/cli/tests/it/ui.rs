//! The console page (`/ui`) in a real browser: Debian's Chromium, headless, driven over
//! WebDriver (`chromedriver`, installed by scripts/test) with fantoccini, in front of
//! `spillway serve` with the example policies and a candidate set. The page loads
//! without a console error, lists every example rule, its counters move with traffic
//! (to the exact count of decisions and denials sent), the top denied key and the
//! candidate's disagreements appear, the charts of the last 15 minutes have points for
//! both, a `shares` rule's charts show its parent and each child it served and what an
//! unlisted team borrowed (and a team within its guarantee did not), and the explain
//! form answers.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use support::{Procs, free_port, spawn_serve, tempdir};

mod browser;

use browser::{browser, chromedriver, console_errors, example_rules, submit, traffic, wait_for};

/// How long the page may take to show what the test waits for: it refreshes every 2 s.
const PATIENCE: Duration = Duration::from_secs(20);

/// `spillway serve` with `config` (its three listeners on ports of its own, no watch),
/// chromedriver, and a browser on a fresh profile under `dir`; the processes are killed
/// when it is dropped.
struct Console {
    http: u16,
    grpc: u16,
    admin: u16,
    driver_port: u16,
    client: Client,
    _procs: Procs,
}

impl Console {
    async fn start(dir: &Path, config: impl IntoIterator<Item = std::ffi::OsString>) -> Console {
        let (http, grpc, admin, driver_port) = (free_port(), free_port(), free_port(), free_port());
        let listeners = [
            ("--http-addr", http),
            ("--grpc-addr", grpc),
            ("--admin-addr", admin),
        ]
        .into_iter()
        .flat_map(|(flag, port)| [flag.into(), format!("127.0.0.1:{port}").into()]);
        let serve = spawn_serve(
            config
                .into_iter()
                .chain(listeners)
                .chain(["--no-watch".into()]),
        );
        // Held at once: a missing chromedriver must not leave the service running.
        let mut procs = Procs(vec![serve]);
        let driver = Command::new(chromedriver())
            .arg(format!("--port={driver_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        procs.0.push(driver);
        let profile = dir.join("profile");
        let _ = std::fs::remove_dir_all(&profile);
        let client = browser(driver_port, &profile).await;
        Console {
            http,
            grpc,
            admin,
            driver_port,
            client,
            _procs: procs,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_rules_counters_top_keys_disagreements_and_explains() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/policies");
    let dir = tempdir("ui");
    let candidate = dir.join("candidate");
    std::fs::create_dir_all(&candidate).unwrap();
    // Stricter than the live burst (10/s, burst 20): part of what live admits, the
    // candidate would deny.
    std::fs::write(
        candidate.join("api.yaml"),
        "domain: api\ndescriptors:\n  - key: api_key\n    limits:\n      - { name: burst, \
         algorithm: gcra, limit: 2, window: 1s, burst: 2 }\n",
    )
    .unwrap();
    let console = Console::start(
        &dir,
        [
            "--config".into(),
            examples.clone().into_os_string(),
            "--candidate-config".into(),
            candidate.into_os_string(),
        ],
    )
    .await;
    let (http, admin, driver_port, client) = (
        console.http,
        console.admin,
        console.driver_port,
        console.client.clone(),
    );
    // The console is on the admin listener; traffic goes to the check port.
    let base = format!("http://127.0.0.1:{admin}");
    let check_base = format!("http://127.0.0.1:{http}");

    // Every example rule has its row.
    client.goto(&format!("{base}/ui")).await.unwrap();
    assert_eq!(client.title().await.unwrap(), "Spillway console");
    let rules = example_rules(&examples);
    assert_eq!(rules.len(), 7, "{rules:?}");
    for rule in &rules {
        wait_for(
            &client,
            &format!("#rules tr[data-rule=\"{rule}\"][data-total=\"0\"]"),
        )
        .await;
    }
    let shown = client
        .find_all(Locator::Css("#rules tbody tr[data-rule]"))
        .await
        .unwrap();
    assert_eq!(shown.len(), rules.len());

    // Traffic: one API key, as fast as it goes, until the burst denies some of it (40
    // at once against a burst of 20 does; a busy machine that sends slower than the
    // refill sends more, up to 1,000, well under the daily quota).
    let http_client = reqwest::Client::new();
    let mut sent = 0;
    let mut denied = 0;
    while sent < 40 || (denied == 0 && sent < 1_000) {
        sent += 1;
        let status = http_client
            .post(format!("{check_base}/v1/check"))
            .json(&json!({ "domain": "api", "descriptors": [
                { "entries": [{ "key": "api_key", "value": "k1" }] }] }))
            .send()
            .await
            .unwrap()
            .status();
        match status.as_u16() {
            200 => {}
            429 => denied += 1,
            other => panic!("/v1/check answered {other}"),
        }
    }
    assert!(
        denied > 0,
        "{sent} sent as fast as they go, burst 20: some must be denied"
    );
    // The counters moved to exactly what was sent and denied.
    let burst = wait_for(
        &client,
        &format!("#rules tr[data-rule=\"api/api_key#burst\"][data-total=\"{sent}\"][data-over=\"{denied}\"]"),
    )
    .await;
    let cells = burst.find_all(Locator::Css("td")).await.unwrap();
    let share = cells[6].text().await.unwrap();
    let expected = format!("{:.1}%", 100.0 * f64::from(denied) / f64::from(sent));
    assert_eq!(share, expected, "the over-limit share of the burst rule");
    wait_for(
        &client,
        &format!("#rules tr[data-rule=\"api/api_key#daily\"][data-total=\"{sent}\"]"),
    )
    .await;

    // The denied key tops the burst rule's list; the candidate would have denied more.
    let top = wait_for(&client, "#top .top-rule").await;
    let first_key = top
        .find(Locator::Css("td.key"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(first_key, "api|api_key=k1#burst");
    wait_for(
        &client,
        "#disagreements tr[data-domain=\"api\"] td[data-kind=\"would_deny\"].over",
    )
    .await;
    wait_for(
        &client,
        "#candidate-rules tr[data-rule=\"api/api_key#burst\"]",
    )
    .await;

    // The charts: every rule has one, and the burst rule's has points, its decisions
    // and its denials above 0; so do the candidate's disagreements.
    for rule in &rules {
        wait_for(&client, &format!("#charts svg[data-rule=\"{rule}\"]")).await;
    }
    let burst_chart = "#charts svg[data-rule=\"api/api_key#burst\"]:not([data-points=\"0\"])";
    wait_for(
        &client,
        &format!("{burst_chart} polyline.decisions:not([data-max=\"0\"])"),
    )
    .await;
    wait_for(
        &client,
        &format!("{burst_chart} polyline.over:not([data-max=\"0\"])"),
    )
    .await;
    wait_for(
        &client,
        "#candidate-charts svg[data-domain=\"api\"] polyline.would_deny:not([data-max=\"0\"])",
    )
    .await;
    // A shares rule's parent and children: requests of two teams, at two tiers; the
    // parent's line and each team's rise above 0.
    let shares_rule = rules
        .iter()
        .find(|r| r.starts_with("org/"))
        .expect("the example set's shares rule");
    for (team, tier) in [("search", "interactive"), ("ingest", "batch")] {
        for _ in 0..10 {
            let status = http_client
                .post(format!("{check_base}/v1/check"))
                .json(&json!({ "domain": "org", "descriptors": [{ "entries": [
                    { "key": "org", "value": "acme" },
                    { "key": "team", "value": team },
                    { "key": "tier", "value": tier }] }] }))
                .send()
                .await
                .unwrap()
                .status();
            assert_eq!(status, 200, "{team} at {tier}: 10 of its 300 a second");
        }
    }
    // A team the tree does not list is `*`: it guarantees nothing, so what it gets it
    // borrows (search's ten were all within its guarantee).
    for _ in 0..3 {
        let status = http_client
            .post(format!("{check_base}/v1/check"))
            .json(&json!({ "domain": "org", "descriptors": [{ "entries": [
                { "key": "org", "value": "acme" },
                { "key": "team", "value": "reports" }] }] }))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(
            status, 200,
            "an unlisted team borrows (or waits for) its turn"
        );
    }
    wait_for(
        &client,
        &format!(
            "#share-charts svg[data-rule=\"{shares_rule}\"][data-kind=\"borrowed\"] \
             polyline[data-child=\"*\"]:not([data-max=\"0\"])"
        ),
    )
    .await;
    let served = format!("#share-charts svg[data-rule=\"{shares_rule}\"][data-kind=\"served\"]");
    for line in [
        "polyline.parent",
        "polyline[data-child=\"search\"]",
        "polyline[data-child=\"ingest\"]",
    ] {
        wait_for(&client, &format!("{served} {line}:not([data-max=\"0\"])")).await;
    }
    wait_for(
        &client,
        &format!("#share-charts svg[data-rule=\"{shares_rule}\"][data-kind=\"refused\"]"),
    )
    .await;

    // The same over the admin listener's JSON: the points add up to what was sent.
    let history: Value = http_client
        .get(format!("{base}/v1/history"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(history["minutes"], 15);
    let burst = history["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"] == "api_key" && r["limit"] == "#burst")
        .expect("the burst rule has a series");
    let points = burst["decisions_per_s"].as_array().unwrap();
    assert_eq!(points.len(), history["at_ms"].as_array().unwrap().len());
    assert!(points.iter().any(|p| p.as_f64().unwrap() > 0.0), "{burst}");
    let children = history["shares"][0]["children"].as_array().unwrap();
    let child = |name: &str| {
        let found = children.iter().find(|c| c["child"] == name);
        found.unwrap_or_else(|| panic!("{name} has a series: {children:?}"))
    };
    let search = child("search");
    let admitted = search["admitted_per_s"].as_array().unwrap();
    assert!(
        admitted.iter().any(|p| p.as_f64().unwrap() > 0.0),
        "{search}"
    );
    let borrowed = |c: &Value| -> f64 {
        let points = c["borrowed_per_s"].as_array().unwrap();
        points.iter().map(|p| p.as_f64().unwrap()).sum()
    };
    assert_eq!(borrowed(search), 0.0, "within its guarantee: {search}");
    let unlisted = child("*");
    assert!(borrowed(unlisted) > 0.0, "{unlisted}");

    // The explain form: a cost beyond the burst is denied by it; a small one of an
    // unseen key is admitted.
    let entries = client.find(Locator::Id("explain-entries")).await.unwrap();
    entries.send_keys("api_key=unseen").await.unwrap();
    let cost = client.find(Locator::Id("explain-cost")).await.unwrap();
    cost.clear().await.unwrap();
    cost.send_keys("1000").await.unwrap();
    submit(&client, "explain-form").await;
    let result = wait_for(&client, "#explain-result[data-allowed=\"false\"]").await;
    let text = result.text().await.unwrap();
    assert!(text.contains("would be denied by burst"), "{text}");
    assert!(text.contains("api|api_key=unseen#burst"), "{text}");
    cost.clear().await.unwrap();
    cost.send_keys("1").await.unwrap();
    submit(&client, "explain-form").await;
    wait_for(&client, "#explain-result[data-allowed=\"true\"]").await;

    // A line that is not key=value is refused by the page, not sent.
    entries.clear().await.unwrap();
    entries.send_keys("api_key").await.unwrap();
    submit(&client, "explain-form").await;
    let refused = wait_for(&client, "#explain-result[data-allowed=\"\"] .error").await;
    assert!(refused.text().await.unwrap().contains("is not key=value"));

    // A picture of the page under traffic (for docs/console.png: SPILLWAY_UI_SCREENSHOT=path):
    // traffic keeps coming, several keys and rules, until the rates show it.
    let traffic = tokio::spawn(traffic(http_client.clone(), check_base.clone()));
    let mut moving = false;
    for _ in 0..100 {
        let rate = client
            .find(Locator::Css(
                "#rules tr[data-rule=\"api/remote_address\"] td.rate",
            ))
            .await;
        // The page replaces its rows at every refresh: a row found just before one is
        // gone when read (a stale element), and is read again at the next turn.
        let rate = match rate {
            Ok(cell) => cell.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if rate.parse::<f64>().is_ok_and(|r| r > 0.0) {
            moving = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(moving, "the rate of remote_address never rose above 0");
    // Retaking the picture (not in the suite): a minute more of traffic, with a second
    // burst on k1 halfway, so that the charts have a history to show.
    if std::env::var_os("SPILLWAY_UI_SCREENSHOT").is_some() {
        tokio::time::sleep(Duration::from_secs(30)).await;
        for _ in 0..60 {
            let _ = http_client
                .post(format!("{check_base}/v1/check"))
                .json(&json!({ "domain": "api", "descriptors": [
                    { "entries": [{ "key": "api_key", "value": "k1" }] }] }))
                .send()
                .await;
        }
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    entries.clear().await.unwrap();
    entries.send_keys("api_key=k1").await.unwrap();
    submit(&client, "explain-form").await;
    wait_for(
        &client,
        "#explain-result[data-allowed]:not([data-allowed=\"\"])",
    )
    .await;
    client
        .execute("window.scrollTo(0, 0)", Vec::new())
        .await
        .unwrap();
    let png = client.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"));
    // A relative path is the repository's (tests run in crates/cli).
    let path = std::env::var_os("SPILLWAY_UI_SCREENSHOT").map_or_else(
        || dir.join("console.png"),
        |p| Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(p),
    );
    std::fs::write(&path, png).unwrap();
    traffic.abort();

    let errors = console_errors(&client, driver_port).await;
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    client.close().await.unwrap();
}

/// The console's RLQS section, in front of `spillway serve` on the RLQS example: the
/// note counts the buckets reported (`spillway bench --rlqs 1` is the Envoy), and the
/// form shows a bucket's rule and its one holder's booked share, or DENY_ALL for a blocked
/// tenant; a malformed bucket is refused by the page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_an_rlqs_bucket_and_its_holders() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/rlqs/policies");
    let dir = tempdir("ui-rlqs");
    let console = Console::start(&dir, ["--config".into(), examples.into_os_string()]).await;
    let (grpc, admin, driver_port, client) = (
        console.grpc,
        console.admin,
        console.driver_port,
        console.client.clone(),
    );
    // One Envoy-like stream reporting {tenant: k0} for a second; its share lives 15 s.
    let bench = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["bench", "--server", &format!("grpc://127.0.0.1:{grpc}")])
        .args([
            "--domain",
            "api",
            "--key-name",
            "tenant",
            "--keys",
            "1",
            "--rlqs",
            "1",
        ])
        .args(["--report-every", "500ms", "--duration", "1s"])
        .output()
        .unwrap();
    assert!(bench.status.success(), "{bench:?}");

    client
        .goto(&format!("http://127.0.0.1:{admin}/ui"))
        .await
        .unwrap();
    wait_for(&client, "#rlqs-note[data-buckets=\"1\"]").await;
    wait_for(&client, "#rlqs-domain option[value=\"api\"]").await;

    let bucket = client.find(Locator::Id("rlqs-bucket")).await.unwrap();
    bucket.send_keys("tenant=k0").await.unwrap();
    submit(&client, "rlqs-form").await;
    // Alone, all of the 10 a second but the floor kept for a newcomer.
    let result = wait_for(
        &client,
        "#rlqs-result[data-strategy=\"token_bucket\"] tr[data-share=\"9.5\"]",
    )
    .await;
    let row = result.text().await.unwrap();
    assert!(row.contains("9.50"), "{row}");

    bucket.clear().await.unwrap();
    bucket.send_keys("tenant=blocked").await.unwrap();
    submit(&client, "rlqs-form").await;
    let result = wait_for(&client, "#rlqs-result[data-strategy=\"deny_all\"]").await;
    assert!(result.text().await.unwrap().contains("DENY_ALL"));

    bucket.clear().await.unwrap();
    bucket.send_keys("tenant").await.unwrap();
    submit(&client, "rlqs-form").await;
    let refused = wait_for(&client, "#rlqs-result[data-strategy=\"\"] .error").await;
    assert!(refused.text().await.unwrap().contains("is not key=value"));

    let errors = console_errors(&client, driver_port).await;
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    client.close().await.unwrap();
}
