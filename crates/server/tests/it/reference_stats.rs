//! The reference's stats (issue #48), counted in hits as the reference counts them: as
//! Prometheus series named by the reference's default mapping or a mapping file of the
//! operator's, and as statsd lines (plain over UDP and TCP, DogStatsD with tags and a
//! mogrifier), received here on real sockets.
//!
//! Every test plays one sequence on a rule of 10 an hour (near the limit from 8):
//! 7 hits admitted (0 -> 7), 2 admitted (7 -> 9: 1 past 8, near), 5 refused across the
//! limit (9 -> 14: 4 over it, 1 between 9 and 10 near), then a stream-done charge of 600
//! refused (all over). The reference counts total_hits 614, within_limit 9, near_limit
//! 2, over_limit 604.

use crate::support;

use spillway_testkit::prometheus_series as series;

use std::collections::BTreeSet;
use std::time::Duration;

use spillway_server::config::Mogrifier;
use support::{Backing, Server};
use tokio::io::AsyncBufReadExt;

const POLICY: &str = "\
domain: stats
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 10 }
  - key: route
    value: api
    descriptors:
      - key: masked_remote_address
        value: 0.0.0.0/0
        descriptors:
          - key: remote_address
            rate_limit: { unit: hour, requests_per_unit: 10 }
  - key: shadowed
    shadow_mode: true
    rate_limit: { unit: hour, requests_per_unit: 1 }
";

/// The sequence, on `entries`: each call's hits and whether it is admitted.
async fn play(s: &Server, entries: &[(&str, &str)]) {
    for (hits, admitted) in [(7, true), (2, true), (5, false), (600, false)] {
        let mut req = support::request("stats", &[entries]);
        req.hits_addend = hits;
        let answer = s.ask(req).await;
        assert_eq!(answer.overall_code == 1, admitted, "{hits} hits");
    }
}

#[tokio::test]
async fn the_reference_series_count_hits_as_the_reference_does() {
    let s = Server::start_with("ref-stats", &[("s.yaml", POLICY)], Backing::Memory, |c| {
        c.stats.reference_metrics = true;
    })
    .await;
    play(&s, &[("user", "u1")]).await;
    // Envoy Gateway's chain: route, masked address, address.
    play(
        &s,
        &[
            ("route", "api"),
            ("masked_remote_address", "0.0.0.0/0"),
            ("remote_address", "10.1.2.3"),
        ],
    )
    .await;
    // A shadow rule over its limit: admitted, counted over the limit and in shadow_mode.
    for _ in 0..2 {
        assert_eq!(
            s.should("stats", &[("shadowed", "x")]).await.overall_code,
            1
        );
    }
    let metrics = s.get_text("/metrics").await;
    let one = r#"{domain="stats",key1="user"}"#;
    for (stat, want) in [
        ("total_hits", 614),
        ("within_limit", 9),
        ("near_limit", 2),
        ("over_limit", 604),
    ] {
        let name = format!("ratelimit_service_rate_limit_{stat}{one}");
        assert_eq!(series(&metrics, &name), Some(want), "{name}\n{metrics}");
    }
    let chain = r#"{domain="stats",key1="route_api",key2="masked_remote_address_0_0_0_0/0"}"#;
    for (stat, want) in [("total_hits", 614), ("over_limit", 604), ("near_limit", 2)] {
        let name = format!("ratelimit_service_rate_limit_{stat}{chain}");
        assert_eq!(series(&metrics, &name), Some(want), "{name}\n{metrics}");
    }
    let shadow = r#"{domain="stats",key1="shadowed"}"#;
    assert_eq!(
        series(
            &metrics,
            &format!("ratelimit_service_rate_limit_shadow_mode{shadow}")
        ),
        Some(1)
    );
    assert_eq!(
        series(
            &metrics,
            &format!("ratelimit_service_rate_limit_over_limit{shadow}")
        ),
        Some(1)
    );
    // The service-wide series are the process's (the recorder is global, and other
    // tests of this file count in it too): at least this test's.
    let calls = series(
        &metrics,
        r#"ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}"#,
    );
    assert!(calls.is_some_and(|n| n >= 10), "{calls:?}");
    assert!(
        metrics.contains(r#"ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="0.005"}"#),
        "{metrics}"
    );
    let loads = series(&metrics, "ratelimit_service_config_load_success");
    assert!(loads.is_some_and(|n| n >= 1), "{loads:?}");
    // Spillway's own stay beside them, counting decisions.
    assert!(metrics.contains("spillway_decisions_total{domain=\"stats\""));
}

#[tokio::test]
async fn a_mapping_file_of_ones_own_renames_and_drops() {
    let dir = support::tempdir("ref-stats-mapper");
    let mapper = dir.join("mapper.yaml");
    std::fs::write(
        &mapper,
        r#"
mappings:
  - match: "ratelimit.service.rate_limit.*.*.total_hits"
    name: "edge_hits"
    labels: { tenant: "$1", rule: "$2" }
  - match: "ratelimit.service.rate_limit.*.*.near_limit"
    action: drop
"#,
    )
    .unwrap();
    let s = Server::start_with(
        "ref-stats-own",
        &[("s.yaml", POLICY)],
        Backing::Memory,
        |c| {
            c.stats.reference_metrics = true;
            c.stats.mapper = Some(mapper);
        },
    )
    .await;
    play(&s, &[("user", "u1")]).await;
    let metrics = s.get_text("/metrics").await;
    assert_eq!(
        series(&metrics, r#"edge_hits{tenant="stats",rule="user"}"#),
        Some(614),
        "{metrics}"
    );
    assert!(!metrics.contains("near_limit{"), "dropped: {metrics}");
    // Unmapped by this file: a series of its own, named from the statsd name.
    assert_eq!(
        series(
            &metrics,
            "ratelimit_service_rate_limit_stats_user_within_limit"
        ),
        Some(9),
        "{metrics}"
    );
}

/// A mapping file that cannot be used stops the start, saying why.
#[tokio::test]
async fn an_invalid_mapping_file_stops_the_start() {
    let dir = support::tempdir("ref-stats-bad");
    std::fs::write(dir.join("s.yaml"), POLICY).unwrap();
    let mapper = support::tempdir("ref-stats-bad-mapper").join("mapper.yaml");
    std::fs::write(
        &mapper,
        "mappings: [{ match: '(', match_type: regex, name: x }]",
    )
    .unwrap();
    let mut config = spillway_server::Config::ephemeral(&dir);
    config.stats.reference_metrics = true;
    config.stats.mapper = Some(mapper);
    let e = spillway_server::App::builder(config)
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("stats: ") && e.contains("mapper.yaml") && e.contains("regex"),
        "{e}"
    );
}

/// What statsd receives: each counter's deltas summed (a flush may fall between two
/// requests of the sequence, sending a counter in two parts), each line's tags kept.
#[derive(Debug, Default)]
struct Received {
    /// (name, tags after `|c`) -> the sum of its deltas.
    counters: std::collections::BTreeMap<(String, String), u64>,
    /// Every other line.
    others: BTreeSet<String>,
}

impl Received {
    fn add(&mut self, line: &str) {
        let parsed = line.split_once(':').and_then(|(name, rest)| {
            let (value, kind_and_tags) = rest.split_once('|')?;
            let tags = kind_and_tags.strip_prefix('c')?;
            Some((name, value.parse::<u64>().ok()?, tags))
        });
        match parsed {
            Some((name, value, tags)) => {
                *self.counters.entry((name.into(), tags.into())).or_default() += value;
            }
            None => {
                self.others.insert(line.to_owned());
            }
        }
    }

    /// Whether every counter in `want` (name, tags, sum) has reached its sum.
    fn has(&self, want: &[(String, String, u64)]) -> bool {
        want.iter()
            .all(|(n, t, v)| self.counters.get(&(n.clone(), t.clone())) == Some(v))
    }
}

/// The lines statsd receives on `socket` until `done` says so (10 s at most).
async fn received(socket: &tokio::net::UdpSocket, done: impl Fn(&Received) -> bool) -> Received {
    let mut got = Received::default();
    let mut buf = vec![0u8; 65_536];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !done(&got) {
        let n = tokio::time::timeout_at(deadline, socket.recv(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("statsd: got {got:#?}"))
            .unwrap();
        for line in String::from_utf8_lossy(&buf[..n]).lines() {
            got.add(line);
        }
    }
    got
}

fn counters(names: &[(&str, u64)], tags: &str) -> Vec<(String, String, u64)> {
    names
        .iter()
        .map(|(n, v)| ((*n).to_owned(), tags.to_owned(), *v))
        .collect()
}

#[tokio::test]
async fn statsd_receives_the_reference_lines_with_extra_tags_in_the_name() {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let s = Server::start_with("ref-statsd", &[("s.yaml", POLICY)], Backing::Memory, |c| {
        c.stats.statsd = Some(addr.to_string());
        c.stats.statsd_tcp = false;
        c.stats.flush_interval = Duration::from_secs(1);
        c.stats.tags = vec![
            ("cluster".into(), "eu.1".into()),
            ("app".into(), "edge".into()),
        ];
    })
    .await;
    play(&s, &[("user", "u1")]).await;
    let tags = ".__app=edge.__cluster=eu_1";
    let names = [
        ("ratelimit.service.rate_limit.stats.user.total_hits", 614),
        ("ratelimit.service.rate_limit.stats.user.within_limit", 9),
        ("ratelimit.service.rate_limit.stats.user.near_limit", 2),
        ("ratelimit.service.rate_limit.stats.user.over_limit", 604),
        ("ratelimit_server.ShouldRateLimit.total_requests", 4),
        ("ratelimit.service.config_load_success", 1),
    ];
    let want: Vec<_> = names
        .iter()
        .map(|(n, v)| (format!("{n}{tags}"), String::new(), *v))
        .collect();
    // Every counter's sum, and a timer (sent each second, counters each flush).
    let got = received(&socket, |got| got.has(&want) && !got.others.is_empty()).await;
    // Nothing else counted, and the response times as timers in ms.
    assert_eq!(got.counters.len(), want.len(), "{got:#?}");
    let timer = format!("ratelimit_server.ShouldRateLimit.response_time{tags}:");
    assert!(
        !got.others.is_empty()
            && got
                .others
                .iter()
                .all(|l| l.starts_with(&timer) && l.ends_with("|ms")),
        "{got:#?}"
    );
}

#[tokio::test]
async fn dogstatsd_carries_tags_and_a_mogrifier_renames() {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let s = Server::start_with(
        "ref-dogstatsd",
        &[("s.yaml", POLICY)],
        Backing::Memory,
        |c| {
            c.stats.statsd = Some(addr.to_string());
            c.stats.dogstatsd = true;
            c.stats.flush_interval = Duration::from_secs(1);
            c.stats.tags = vec![("cluster".into(), "eu.1".into())];
            c.stats.mogrifiers = vec![Mogrifier {
                pattern: r"^ratelimit\.service\.rate_limit\.([^.]+)\.(.+)\.([a-z_]+)$".into(),
                name: "ratelimit.service.rate_limit.$3".into(),
                tags: vec![
                    ("domain".into(), "$1".into()),
                    ("descriptor".into(), "$2".into()),
                ],
            }];
        },
    )
    .await;
    play(&s, &[("user", "u1")]).await;
    let rule = "|#cluster:eu_1,domain:stats,descriptor:user";
    let mut want = counters(
        &[
            ("ratelimit.service.rate_limit.total_hits", 614),
            ("ratelimit.service.rate_limit.over_limit", 604),
        ],
        rule,
    );
    want.extend(counters(
        &[("ratelimit_server.ShouldRateLimit.total_requests", 4)],
        "|#cluster:eu_1",
    ));
    received(&socket, |got| got.has(&want)).await;
}

/// Over TCP, as the reference (gostats) sends by default.
#[tokio::test]
async fn statsd_over_tcp() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let s = Server::start_with(
        "ref-statsd-tcp",
        &[("s.yaml", POLICY)],
        Backing::Memory,
        |c| {
            c.stats.statsd = Some(addr.to_string());
            c.stats.statsd_tcp = true;
            c.stats.flush_interval = Duration::from_secs(1);
        },
    )
    .await;
    play(&s, &[("user", "u1")]).await;
    let (conn, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept())
        .await
        .expect("statsd connects")
        .unwrap();
    let mut reader = tokio::io::BufReader::new(conn).lines();
    let want = counters(
        &[("ratelimit.service.rate_limit.stats.user.total_hits", 614)],
        "",
    );
    let mut got = Received::default();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !got.has(&want) {
        let line = tokio::time::timeout_at(deadline, reader.next_line())
            .await
            .unwrap_or_else(|_| panic!("statsd over TCP: {got:#?}"))
            .unwrap()
            .expect("the connection stays open");
        got.add(&line);
    }
}
