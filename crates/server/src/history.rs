//! The console's charts: the service's decision counters read every [`STEP`] and kept
//! for [`MINUTES`], so that a page opened in the middle of a spike shows how it began.
//!
//! A reading is the service's own Prometheus counters (`spillway_decisions_total` per
//! rule and outcome, `spillway_shares_decisions_total` per `shares` rule, child and
//! outcome, `spillway_candidate_disagreements_total` per domain and kind), read
//! from the recorder off the decision path: nothing is added to a decision. [`History::series`]
//! turns consecutive readings into rates, with a last point from a fresh reading, so the
//! chart moves at every refresh of the page and not only every step.

use std::collections::{BTreeMap, VecDeque};

use parking_lot::Mutex;
use serde::Serialize;
use spillway_core::Timestamp;

/// How far back the charts go.
pub const MINUTES: u64 = 15;

/// Between two kept readings (µs).
pub const STEP: u64 = 5_000_000;

/// Readings kept: one more than the points of [`MINUTES`].
const KEPT: usize = (MINUTES * 60_000_000 / STEP) as usize + 1;

/// A rule as the counters label it: domain, config path, and the limit's slot.
type RuleId = (String, String, String);

/// The counters at one moment.
#[derive(Debug, Default)]
struct Reading {
    /// When (µs since the epoch).
    at: u64,
    /// Per rule: decisions, and of them over the limit (enforced or in shadow).
    rules: BTreeMap<RuleId, (f64, f64)>,
    /// Per candidate domain: would deny, would admit.
    disagree: BTreeMap<String, (f64, f64)>,
    /// Per `shares` rule and child: admitted at once within the guarantee, at once by
    /// borrowing, after a wait, refused (every priority together).
    shares: BTreeMap<(RuleId, String), [f64; 4]>,
}

/// The kept readings.
#[derive(Debug, Default)]
pub struct History {
    readings: Mutex<VecDeque<Reading>>,
}

/// `GET /v1/history`: per rule and per candidate domain, one rate per point.
#[derive(Debug, Serialize)]
pub struct Series {
    pub minutes: u64,
    pub step_ms: u64,
    /// The first reading (ms since the epoch): the charts of a service younger than
    /// [`MINUTES`] start there.
    pub since_ms: u64,
    /// Each point's end, in ms since the epoch.
    pub at_ms: Vec<u64>,
    pub rules: Vec<RuleSeries>,
    pub candidate: Vec<DomainSeries>,
    /// Per `shares` rule, its children: a parent and who it served.
    pub shares: Vec<SharesSeries>,
}

#[derive(Debug, Serialize)]
pub struct RuleSeries {
    pub domain: String,
    pub rule: String,
    pub limit: String,
    pub decisions_per_s: Vec<f64>,
    pub over_limit_per_s: Vec<f64>,
}

#[derive(Debug, Serialize)]
pub struct DomainSeries {
    pub domain: String,
    pub would_deny_per_s: Vec<f64>,
    pub would_admit_per_s: Vec<f64>,
}

/// A `shares` rule's children over time (those it has decided for).
#[derive(Debug, Serialize)]
pub struct SharesSeries {
    pub domain: String,
    pub rule: String,
    pub limit: String,
    pub children: Vec<ChildSeries>,
}

/// One child of a `shares` rule (`*`: every value the tree does not list): what the
/// parent admitted of it at once and after a wait, how much of those it borrowed
/// (past its guarantee: a wait is always borrowed), and what it refused, per second.
#[derive(Debug, Serialize)]
pub struct ChildSeries {
    pub child: String,
    pub admitted_per_s: Vec<f64>,
    pub waited_per_s: Vec<f64>,
    pub borrowed_per_s: Vec<f64>,
    pub refused_per_s: Vec<f64>,
}

impl History {
    /// Keeps a reading of `metrics` (Prometheus text, rendered only then) at `now` if
    /// the last kept one is a step old, dropping what is older than [`MINUTES`].
    pub fn sample(&self, metrics: impl FnOnce() -> String, now: Timestamp) {
        let now = now.as_micros();
        let mut readings = self.readings.lock();
        if readings.back().is_some_and(|last| now < last.at + STEP) {
            return;
        }
        readings.push_back(read(&metrics(), now));
        while readings.len() > KEPT {
            readings.pop_front();
        }
    }

    /// The rates between the kept readings, and from the last one to `metrics` now.
    pub fn series(&self, metrics: &str, now: Timestamp) -> Series {
        let fresh = read(metrics, now.as_micros());
        let kept = self.readings.lock();
        let mut readings: Vec<&Reading> = kept.iter().collect();
        if readings.last().is_none_or(|last| fresh.at > last.at) {
            readings.push(&fresh);
        }
        let pairs: Vec<(&Reading, &Reading)> = readings.windows(2).map(|w| (w[0], w[1])).collect();
        let none = Reading::default();
        let last = readings.last().copied().unwrap_or(&none);
        let rules = last
            .rules
            .keys()
            .map(|id| {
                let count = |r: &Reading| r.rules.get(id).copied().unwrap_or_default();
                RuleSeries {
                    domain: id.0.clone(),
                    rule: id.1.clone(),
                    limit: id.2.clone(),
                    decisions_per_s: rates(&pairs, |r| count(r).0),
                    over_limit_per_s: rates(&pairs, |r| count(r).1),
                }
            })
            .collect();
        let candidate = last
            .disagree
            .keys()
            .map(|domain| {
                let count = |r: &Reading| r.disagree.get(domain).copied().unwrap_or_default();
                DomainSeries {
                    domain: domain.clone(),
                    would_deny_per_s: rates(&pairs, |r| count(r).0),
                    would_admit_per_s: rates(&pairs, |r| count(r).1),
                }
            })
            .collect();
        let mut shares: Vec<SharesSeries> = Vec::new();
        for (id, child) in last.shares.keys() {
            let count = |r: &Reading, k: usize| {
                r.shares
                    .get(&(id.clone(), child.clone()))
                    .map_or(0.0, |c| c[k])
            };
            let series = ChildSeries {
                child: child.clone(),
                admitted_per_s: rates(&pairs, |r| count(r, 0) + count(r, 1)),
                waited_per_s: rates(&pairs, |r| count(r, 2)),
                borrowed_per_s: rates(&pairs, |r| count(r, 1) + count(r, 2)),
                refused_per_s: rates(&pairs, |r| count(r, 3)),
            };
            // The keys come in order, a rule's children together.
            match shares.last_mut() {
                Some(s) if (&s.domain, &s.rule, &s.limit) == (&id.0, &id.1, &id.2) => {
                    s.children.push(series);
                }
                _ => shares.push(SharesSeries {
                    domain: id.0.clone(),
                    rule: id.1.clone(),
                    limit: id.2.clone(),
                    children: vec![series],
                }),
            }
        }
        Series {
            minutes: MINUTES,
            step_ms: STEP / 1000,
            since_ms: readings.first().map_or(0, |r| r.at / 1000),
            at_ms: pairs.iter().map(|(_, b)| b.at / 1000).collect(),
            rules,
            candidate,
            shares,
        }
    }
}

/// Per pair of readings, the rate of the counter `count` reads from each (one decimal).
fn rates(pairs: &[(&Reading, &Reading)], count: impl Fn(&Reading) -> f64) -> Vec<f64> {
    pairs
        .iter()
        .map(|(a, b)| {
            let seconds = (b.at - a.at) as f64 / 1e6;
            // A counter that went down was reset (a new recorder): 0 for that point.
            ((count(b) - count(a)).max(0.0) / seconds * 10.0).round() / 10.0
        })
        .collect()
}

/// The counters of one reading, from the recorder's Prometheus text.
fn read(metrics: &str, at: u64) -> Reading {
    let mut reading = Reading {
        at,
        ..Reading::default()
    };
    for line in metrics.lines() {
        let Some((name, rest)) = line.split_once('{') else {
            continue;
        };
        if !matches!(
            name,
            "spillway_decisions_total"
                | "spillway_shares_decisions_total"
                | "spillway_candidate_disagreements_total"
        ) {
            continue;
        }
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let labels = parse_labels(labels);
        let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
        let id = || (label("domain"), label("rule"), label("limit"));
        if name == "spillway_decisions_total" {
            let counts = reading.rules.entry(id()).or_default();
            counts.0 += value;
            if label("outcome") != "ok" {
                counts.1 += value;
            }
        } else if name == "spillway_shares_decisions_total" {
            let k = match label("outcome").as_str() {
                "guaranteed" => 0,
                "borrowed" => 1,
                "waited" => 2,
                _ => 3,
            };
            reading.shares.entry((id(), label("child"))).or_default()[k] += value;
        } else {
            let counts = reading.disagree.entry(label("domain")).or_default();
            match label("kind").as_str() {
                "would_deny" => counts.0 += value,
                _ => counts.1 += value,
            }
        }
    }
    reading
}

/// `k="v",k2="v2"` (Prometheus escapes `\\`, `\"` and `\n` in values).
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, other)) => value.push(other),
                    None => {}
                },
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        labels.insert(key.trim_start_matches(',').trim().to_owned(), value);
        rest = &after[end..];
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(ok: u64, over: u64, deny: u64) -> String {
        format!(
            "# TYPE spillway_decisions_total counter\n\
             spillway_decisions_total{{domain=\"api\",rule=\"api_key\",limit=\"#burst\",outcome=\"ok\"}} {ok}\n\
             spillway_decisions_total{{domain=\"api\",rule=\"api_key\",limit=\"#burst\",outcome=\"over_limit\"}} {over}\n\
             spillway_candidate_disagreements_total{{domain=\"a\\\"b\",kind=\"would_deny\"}} {deny}\n\
             spillway_requests_total{{api=\"v1\"}} 99\n"
        )
    }

    fn at(seconds: u64) -> Timestamp {
        Timestamp::from_micros(1_700_000_000_000_000 + seconds * 1_000_000)
    }

    #[test]
    fn rates_come_from_consecutive_readings_and_a_fresh_one() {
        let history = History::default();
        history.sample(|| text(0, 0, 0), at(0));
        history.sample(|| unreachable!("within a step: not read"), at(2));
        history.sample(|| text(100, 10, 5), at(5));
        let series = history.series(&text(120, 30, 5), at(7));
        assert_eq!(series.at_ms.len(), 2);
        assert_eq!(series.since_ms, 1_700_000_000_000);
        let rule = &series.rules[0];
        assert_eq!(
            (&*rule.domain, &*rule.rule, &*rule.limit),
            ("api", "api_key", "#burst")
        );
        // 110 decisions over 5 s, then 40 over 2 s; 10 then 20 over the limit.
        assert_eq!(rule.decisions_per_s, [22.0, 20.0]);
        assert_eq!(rule.over_limit_per_s, [2.0, 10.0]);
        let candidate = &series.candidate[0];
        assert_eq!(candidate.domain, "a\"b");
        assert_eq!(candidate.would_deny_per_s, [1.0, 0.0]);
        assert_eq!(candidate.would_admit_per_s, [0.0, 0.0]);
    }

    fn shares_text(a: u64, a_borrowed: u64, b_waited: u64, refused: u64) -> String {
        let line = |child: &str, priority: &str, outcome: &str, n: u64| {
            format!(
                "spillway_shares_decisions_total{{domain=\"org\",rule=\"org.team\",limit=\"#org\",\
                 child=\"{child}\",priority=\"{priority}\",outcome=\"{outcome}\"}} {n}\n"
            )
        };
        [
            line("a", "interactive", "guaranteed", a),
            line("a", "batch", "borrowed", a_borrowed),
            line("a", "batch", "refused", refused),
            line("b", "interactive", "waited", b_waited),
        ]
        .concat()
    }

    #[test]
    fn a_shares_rule_has_a_series_per_child_every_priority_together() {
        let history = History::default();
        history.sample(|| shares_text(0, 0, 0, 0), at(0));
        let series = history.series(&shares_text(40, 10, 10, 20), at(5));
        assert_eq!(series.shares.len(), 1);
        let rule = &series.shares[0];
        assert_eq!(
            (&*rule.domain, &*rule.rule, &*rule.limit),
            ("org", "org.team", "#org")
        );
        let children: Vec<_> = rule.children.iter().map(|c| &*c.child).collect();
        assert_eq!(children, ["a", "b"]);
        let (a, b) = (&rule.children[0], &rule.children[1]);
        // Admitted at once: guaranteed and borrowed together; borrowed: at once or
        // after a wait.
        assert_eq!(
            (&*a.admitted_per_s, &*a.waited_per_s, &*a.refused_per_s),
            (&[10.0][..], &[0.0][..], &[4.0][..])
        );
        assert_eq!(&*a.borrowed_per_s, &[2.0][..]);
        assert_eq!(
            (&*b.admitted_per_s, &*b.waited_per_s, &*b.refused_per_s),
            (&[0.0][..], &[2.0][..], &[0.0][..])
        );
        assert_eq!(&*b.borrowed_per_s, &[2.0][..]);
        // Not a rule's decisions: those are spillway_decisions_total's.
        assert!(series.rules.is_empty());
    }

    #[test]
    fn only_the_last_minutes_are_kept() {
        let history = History::default();
        for i in 0..(KEPT as u64 + 10) {
            history.sample(|| text(i, 0, 0), at(i * STEP / 1_000_000));
        }
        assert_eq!(history.readings.lock().len(), KEPT);
        let series = history.series(&text(0, 0, 0), at(0));
        // A fresh reading older than the last kept one adds no point.
        assert_eq!(series.at_ms.len(), KEPT - 1);
    }
}
