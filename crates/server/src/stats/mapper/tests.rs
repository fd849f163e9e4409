use super::*;

fn labels(m: &Mapped) -> Vec<(String, String)> {
    m.labels
        .iter()
        .map(|l| (l.key().to_owned(), l.value().to_owned()))
        .collect()
}

#[test]
fn the_reference_mapping_names_a_rules_stats_by_domain_and_two_levels() {
    let m = Mapper::reference();
    let one = m
        .map(
            "ratelimit.service.rate_limit.mongo_cps.database_users.total_hits",
            Kind::Counter,
        )
        .unwrap();
    assert_eq!(one.name, "ratelimit_service_rate_limit_total_hits");
    assert_eq!(
        labels(&one),
        [
            ("domain".into(), "mongo_cps".into()),
            ("key1".into(), "database_users".into())
        ]
    );
    // Envoy Gateway's chains: route, masked address, address.
    let three = m
        .map(
            "ratelimit.service.rate_limit.default/eg/http.httproute/default/r/rule/0_httproute/default/r/rule/0.masked_remote_address_0_0_0_0/0.remote_address.over_limit",
            Kind::Counter,
        )
        .unwrap();
    assert_eq!(three.name, "ratelimit_service_rate_limit_over_limit");
    assert_eq!(
        labels(&three)[2],
        ("key2".into(), "masked_remote_address_0_0_0_0/0".into())
    );
    // Two levels match neither shape: a series of its own, escaped, unlabelled.
    let two = m
        .map(
            "ratelimit.service.rate_limit.d.k_v.k2.near_limit",
            Kind::Counter,
        )
        .unwrap();
    assert_eq!(two.name, "ratelimit_service_rate_limit_d_k_v_k2_near_limit");
    assert!(two.labels.is_empty());
    let rt = m
        .map(
            "ratelimit_server.ShouldRateLimit.response_time",
            Kind::Timer,
        )
        .unwrap();
    assert_eq!(rt.name, "ratelimit_service_response_time_seconds");
    assert_eq!(
        labels(&rt),
        [("grpc_method".into(), "ShouldRateLimit".into())]
    );
}

#[test]
fn a_custom_file_renames_drops_and_filters_by_type() {
    let m = Mapper::parse(
        r#"
mappings:
  - match: "ratelimit.service.rate_limit.*.*.total_hits"
    name: "hits_$1"
    labels: { route: "$2" }
  - match: "ratelimit.service.rate_limit.*.*.near_limit"
    action: drop
  - match: 'ratelimit\.service\.call\.(.*)'
    match_type: regex
    match_metric_type: gauge
    name: "never"
"#,
    )
    .unwrap();
    let hits = m
        .map(
            "ratelimit.service.rate_limit.api.user.total_hits",
            Kind::Counter,
        )
        .unwrap();
    assert_eq!(hits.name, "hits_api");
    assert_eq!(labels(&hits), [("route".into(), "user".into())]);
    assert_eq!(
        m.map(
            "ratelimit.service.rate_limit.api.user.near_limit",
            Kind::Counter
        ),
        None
    );
    // A gauge-only mapping leaves a counter unmapped.
    let err = m
        .map(
            "ratelimit.service.call.should_rate_limit.redis_error",
            Kind::Counter,
        )
        .unwrap();
    assert_eq!(
        err.name,
        "ratelimit_service_call_should_rate_limit_redis_error"
    );
}

#[test]
fn an_invalid_file_is_refused_with_why() {
    for (yaml, says) in [
        ("mappings: [{ match: 'a.*', labels: {} }]", "no name"),
        (
            "mappings: [{ match: '(', match_type: regex, name: x }]",
            "regex",
        ),
        (
            "mappings: [{ match: 'a', name: x, action: keep }]",
            "not map or drop",
        ),
        (
            "mappings: [{ match: 'a', name: x, match_type: fuzzy }]",
            "not glob or regex",
        ),
        ("mappings: [{ match: 'a', name: x, colour: red }]", "colour"),
        ("mappings: [", ""),
    ] {
        let e = Mapper::parse(yaml).unwrap_err();
        assert!(e.contains(says), "{yaml}: {e}");
    }
}
