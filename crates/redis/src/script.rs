//! The decision code (`scripts/*.lua`, joined into one library): how it reaches Redis, its arguments and
//! its reply.
//!
//! The same Lua runs two ways. As a **function library** (Redis ≥ 7.0, Valkey):
//! `FUNCTION LOAD` once, then `FCALL` per call; the library's body (every algorithm,
//! the limits already parsed) stays defined between calls. As a **script** (older
//! servers, or functions turned off): `EVALSHA`, whose body defines everything again on
//! every call. [`Library`] names both.
//!
//! A call carries one or more batches ([`Section`]s); each request of a batch becomes
//! its limit's text (eight integers, parsed once however many requests share it, and
//! kept from call to call by a library), its cost and its member (see the script's
//! header). Rust computes every derived parameter (scaled rates, GCRA times) so the
//! script does no validation of limits beyond range checks. The reply is one flat
//! array: per batch, `denied_by` then four integers per request, or the reason the
//! batch failed.

use std::sync::LazyLock;

use redis::{Cmd, Value};
use spillway_core::algorithm::shares::{Pace, Terms};
use spillway_core::algorithm::{bloom, distinct};
use spillway_core::{Algorithm, Edge, Limit, Rejected, Request, Timestamp};

use crate::coalesce::{Batch, Waiting};

mod reply;

pub(crate) use reply::{parse_reply, reply_len, split_reply};

/// The decision code's files, joined at build time in the order `prelude.lua` states:
/// one Lua chunk that defines `decide(keys, argv)`.
macro_rules! decide_lua {
    () => {
        concat!(
            include_str!("../scripts/prelude.lua"),
            include_str!("../scripts/algorithm/fixed_window.lua"),
            include_str!("../scripts/algorithm/sliding_log.lua"),
            include_str!("../scripts/algorithm/sliding_window.lua"),
            include_str!("../scripts/algorithm/token_bucket.lua"),
            include_str!("../scripts/algorithm/gcra.lua"),
            include_str!("../scripts/algorithm/distinct.lua"),
            include_str!("../scripts/algorithm/distinct_sketch.lua"),
            include_str!("../scripts/algorithm/concurrency.lua"),
            include_str!("../scripts/algorithm/shares.lua"),
            include_str!("../scripts/record.lua"),
            include_str!("../scripts/round.lua"),
        )
    };
}

/// The decision code, embedded at build time: it defines `decide(keys, argv)`.
pub(crate) const BODY: &str = decide_lua!();

/// The script form: the body, then a call of `decide` (sent with `EVAL`/`EVALSHA`).
pub(crate) const SCRIPT_SOURCE: &str = concat!(decide_lua!(), "\nreturn decide(KEYS, ARGV)\n");

/// The decision code as a function library, and as a script for servers without
/// functions.
#[derive(Debug)]
pub(crate) struct Library {
    /// The function `FCALL` names: the library's name and `_decide`. The library is
    /// `spillway_` and the first 16 hex digits of the body's SHA-1, so that two
    /// versions of Spillway on one Redis (a rolling upgrade) each call their own.
    pub(crate) function: String,
    /// What `FUNCTION LOAD` takes.
    pub(crate) source: String,
    /// The script form's SHA-1, for `EVALSHA`.
    pub(crate) sha: String,
}

/// The one library of this build.
pub(crate) static LIBRARY: LazyLock<Library> = LazyLock::new(|| {
    let hash = redis::Script::new(BODY).get_hash().to_owned();
    let name = format!("spillway_{}", &hash[..16]);
    let function = format!("{name}_decide");
    let source =
        format!("#!lua name={name}\n{BODY}\nredis.register_function('{function}', decide)\n");
    Library {
        function,
        source,
        sha: redis::Script::new(SCRIPT_SOURCE).get_hash().to_owned(),
    }
});

/// Where the script takes `now` from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TimeSource {
    /// Redis `TIME`, read inside the script: one clock for every app server. The
    /// `now` callers pass is ignored.
    #[default]
    Server,
    /// The caller's `now` (its `Clock`). For tests with a manual clock, and for setups
    /// whose app servers' clocks are known to agree.
    Caller,
}

/// A request's cost as the script reads it: units, sent as they are; usage already
/// spent, sent `u` then the units (charged in full, into debt); or units given back (a
/// reservation's unused estimate), sent `r` then the units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cost {
    pub(crate) units: u64,
    pub(crate) usage: bool,
    pub(crate) refund: bool,
}

impl Cost {
    pub(crate) fn of(r: &Request<'_>) -> Cost {
        Cost {
            units: r.cost,
            usage: r.usage,
            refund: r.refund.is_some(),
        }
    }

    fn push(self, cmd: &mut Cmd) {
        match (self.usage, self.refund) {
            (_, true) => cmd.arg(format!("r{}", self.units)),
            (true, false) => cmd.arg(format!("u{}", self.units)),
            (false, false) => cmd.arg(self.units),
        };
    }
}

/// One batch's part of a call: its keys, its `now`, and each request's limit text,
/// cost and member (empty but for `distinct`).
#[derive(Debug)]
pub(crate) struct Section {
    pub(crate) keys: Vec<String>,
    /// `now` in µs, or `None` for Redis `TIME`.
    pub(crate) now: Option<u64>,
    pub(crate) requests: Vec<(String, Cost, Vec<u8>)>,
    /// The numbers the reply has after the decisions ([`reply::tail`]: one per
    /// `concurrency` request, three per request with budget alerts).
    pub(crate) tail: usize,
}

impl Batch for Section {
    fn keys(&self) -> usize {
        self.keys.len()
    }

    fn split(reply: Value, batches: &[Waiting<Self>]) -> Result<Vec<Value>, String> {
        split_reply(
            reply,
            batches
                .iter()
                .map(|w| reply_len(w.batch.requests.len(), w.batch.tail)),
        )
    }
}

impl Section {
    /// The limit of a batch the script takes in its short form (`s`, then the limit):
    /// one request on one key, on Redis `TIME`, at cost 1, with no member. Four
    /// arguments fewer than the full form, for the batch nearly every decision is.
    fn short(&self) -> Option<&str> {
        const ONE: Cost = Cost {
            units: 1,
            usage: false,
            refund: false,
        };
        match &self.requests[..] {
            [(limit, ONE, member)] if self.keys.len() == 1 && self.now.is_none() => {
                member.is_empty().then_some(limit.as_str())
            }
            _ => None,
        }
    }

    pub(crate) fn new(
        keys: Vec<String>,
        requests: &[Request<'_>],
        source: TimeSource,
        now: Timestamp,
    ) -> Section {
        let tail = reply::tail(requests);
        let requests = requests
            .iter()
            .map(|r| (limit_text(r.limit), Cost::of(r), member_arg(r, now)))
            .collect();
        let now = match source {
            TimeSource::Server => None,
            TimeSource::Caller => Some(now.as_micros()),
        };
        Section {
            keys,
            now,
            tail,
            requests,
        }
    }
}

/// A request's member as the script reads it: as it is, but for a sketched `distinct`
/// limit, whose member comes after its Bloom filter positions (7 × u32, little-endian):
/// Lua 5.1 cannot compute the 64-bit hashes they come from; and for a fixed window,
/// which has none, the caller's `now` (µs): its key names the window holding that
/// instant (`key.rs`), so the script counts that window whatever clock the batch
/// decides on; for a calendar's period, then the period's end (µs), which Lua cannot
/// compute.
pub(crate) fn member_arg(r: &Request<'_>, now: Timestamp) -> Vec<u8> {
    if r.limit.algorithm() == Algorithm::FixedWindow {
        let now = now.as_micros();
        if let Some(calendar) = r.limit.calendar() {
            return format!("{now} {}", calendar.bounds(now).1).into_bytes();
        }
        return now.to_string().into_bytes();
    }
    let member = r.member_bytes();
    if let Some((name, t)) = r.limit.share_terms(member) {
        return share_member(name, t);
    }
    if !r.limit.algorithm().counts_members() || distinct::is_exact(r.limit.limit()) {
        return member.to_vec();
    }
    let positions = bloom::positions(member, bloom::bits(r.limit.limit()));
    let mut arg = Vec::with_capacity(4 * bloom::HASHES + member.len());
    positions
        .iter()
        .for_each(|p| arg.extend_from_slice(&p.to_le_bytes()));
    arg.extend_from_slice(member);
    arg
}

/// A `shares` request's member as the script reads it (shares.lua): the child's terms
/// at the request's priority, then its name.
fn share_member(name: &[u8], t: &Terms) -> Vec<u8> {
    let none = Pace {
        rate: 0,
        unit: 0,
        tolerance: 0,
    };
    let (g, c, p) = (
        t.guarantee.unwrap_or(none),
        t.ceiling,
        t.pool.unwrap_or(none),
    );
    let mut arg = format!(
        "{} {} {} {} {} {} {} {} {} {} {} {} {} ",
        t.bands[0],
        t.bands[1],
        g.rate,
        g.unit,
        g.tolerance,
        c.rate,
        c.unit,
        c.tolerance,
        t.weight,
        t.burst,
        p.rate,
        p.unit,
        p.tolerance
    )
    .into_bytes();
    arg.extend_from_slice(name);
    arg
}

/// The command calling the decision code (`FCALL function`, `EVALSHA sha` or `EVAL
/// source`) for `sections`.
pub(crate) fn call<'a>(
    head: &str,
    body: &str,
    sections: impl Iterator<Item = &'a Section> + Clone,
) -> Cmd {
    // Sized once: a call may carry hundreds of arguments.
    let (mut keys, mut args, mut bytes) = (0, 4, head.len() + body.len() + 16);
    for s in sections.clone() {
        keys += s.keys.len();
        args += s.keys.len() + 3 * s.requests.len() + 3;
        bytes += s.keys.iter().map(String::len).sum::<usize>() + 24;
        bytes += s
            .requests
            .iter()
            .map(|(l, _, m)| l.len() + m.len() + 24)
            .sum::<usize>();
    }
    let mut cmd = Cmd::with_capacity(args, bytes);
    cmd.arg(head).arg(body).arg(keys);
    for s in sections.clone() {
        cmd.arg(&s.keys[..]);
    }
    cmd.arg(sections.clone().count());
    for s in sections {
        if let Some(limit) = s.short() {
            cmd.arg("s").arg(limit);
            continue;
        }
        cmd.arg(s.requests.len()).arg(s.keys.len());
        match s.now {
            Some(micros) => cmd.arg(micros),
            None => cmd.arg("server"),
        };
        for (limit, cost, member) in &s.requests {
            cmd.arg(limit);
            cost.push(&mut cmd);
            cmd.arg(&member[..]);
        }
    }
    cmd
}

/// A limit as the script reads it: `alg rejected cap window p1 p2 p3 p4`, and ` wait`
/// (µs) for a limit with a `max_wait`, or ` a` and the units of use at which each
/// budget alert is reached, joined by commas, for one with alerts.
pub(crate) fn limit_text(limit: &Limit) -> String {
    let (code, params) = match limit.algorithm() {
        Algorithm::FixedWindow => (1, [0; 4]),
        Algorithm::SlidingLog => (2, [0; 4]),
        Algorithm::SlidingWindow { precision, edge } => {
            let edge = match edge {
                Edge::Interpolate => 0,
                Edge::Strict => 1,
                Edge::Lenient => 2,
            };
            (3, [u64::from(precision), edge, 0, 0])
        }
        Algorithm::TokenBucket => {
            let (rate, unit) = limit.scaled_rate();
            (4, [rate, unit, 0, 0])
        }
        Algorithm::Gcra => {
            let (rate, unit) = limit.scaled_rate();
            let (e1, tau) = limit.gcra_times();
            (5, [rate, unit, e1, tau])
        }
        // The parent is a GCRA of the limit's rate and burst.
        Algorithm::Shares => {
            let (rate, unit) = limit.scaled_rate();
            let (e1, tau) = limit.gcra_times();
            (10, [rate, unit, e1, tau])
        }
        Algorithm::Distinct { precision } if distinct::is_exact(limit.limit()) => {
            (6, [u64::from(precision), 0, 0, 0])
        }
        Algorithm::Distinct { precision } => (7, [u64::from(precision), 0, 0, 0]),
        Algorithm::Concurrency => (9, [0; 4]),
    };
    let [p1, p2, p3, p4] = params;
    let mut text = format!(
        "{code} {} {} {} {p1} {p2} {p3} {p4}",
        match limit.rejected() {
            Rejected::NotCharged => 0,
            Rejected::Charged => 1,
            Rejected::ChargedWhenOwn => 2,
        },
        limit.capacity(),
        limit.window_micros()
    );
    let wait = limit.max_wait().as_micros();
    if wait > 0 {
        text.push_str(&format!(" {wait}"));
    }
    if !limit.alert_at().is_empty() {
        let units: Vec<String> = limit.alert_units().map(|u| u.to_string()).collect();
        text.push_str(" a");
        text.push_str(&units.join(","));
    }
    text
}
