//! One decision round over states a store has already locked: check every request,
//! then charge all of them or none, then charge usage in full. The Redis script makes
//! the same three passes.
//!
//! Requests that share a state (same key and limit shape) are checked in order
//! against a scratch copy that carries the earlier ones' charges, so two requests for
//! 6 against a limit of 10 are not both admitted. A duplicate that is then denied
//! reports the combined demand.

use crate::algorithm::State;
use crate::{BatchDecision, Crossing, Decision, Outcome, Timestamp};

use super::Request;

/// Access to the locked states of one batch, by request index.
pub(crate) trait Slots {
    /// The stored state of request `i`'s key and limit shape, if there is one.
    fn get(&self, i: usize) -> Option<&State>;
    /// The stored state of request `i`, created empty if missing.
    fn get_mut(&mut self, i: usize) -> &mut State;
    /// Request `i`'s state was charged; record when it expires.
    fn charged(&mut self, i: usize);
}

static EMPTY: State = State::empty();

/// The first request of `requests` sharing request `i`'s state (same key, same limit
/// shape): `i` itself when none before it does.
pub(crate) fn first_sharing(requests: &[Request<'_>], i: usize) -> usize {
    let (key, shape) = (requests[i].key, requests[i].limit.shape());
    (0..i)
        .find(|&k| requests[k].key == key && requests[k].limit.shape() == shape)
        .unwrap_or(i)
}

/// The round of `requests`, all of them fixed windows that charge every request
/// (`Rejected::Charged`), from each one's count in its current window before the
/// round (`before[i]`; of requests sharing a state, only the first one's is read: the
/// others decide on its state, as in every round). A store that charges
/// such requests with no script (Redis `INCRBY`) learns the counts after charging, and
/// decides from them exactly as the round would have: every request is charged
/// whatever the outcome, so the counts after are the counts before plus the costs.
pub(crate) fn decide_counted(
    requests: &[Request<'_>],
    before: &[u64],
    now: Timestamp,
) -> BatchDecision {
    struct Counted(Vec<State>, Vec<usize>);
    impl Slots for Counted {
        fn get(&self, i: usize) -> Option<&State> {
            Some(&self.0[self.1[i]])
        }
        fn get_mut(&mut self, i: usize) -> &mut State {
            &mut self.0[self.1[i]]
        }
        fn charged(&mut self, _: usize) {}
    }
    let at = now.as_micros();
    let states = requests
        .iter()
        .zip(before)
        .map(|(r, &count)| State::fixed_window_count(at, r.limit.window_micros(), count))
        .collect();
    let leaders = (0..requests.len())
        .map(|i| first_sharing(requests, i))
        .collect();
    decide(&mut Counted(states, leaders), requests, now)
}

pub(crate) fn decide(
    slots: &mut impl Slots,
    requests: &[Request<'_>],
    now: Timestamp,
) -> BatchDecision {
    // leader[i]: the first request sharing i's state; only computed when there is one.
    let leader: Option<Vec<usize>> = (0..requests.len())
        .any(|i| first_sharing(requests, i) != i)
        .then(|| {
            (0..requests.len())
                .map(|i| first_sharing(requests, i))
                .collect()
        });

    // Pass 1: check (usage is not checked: it is charged in pass 3, whatever the others
    // decide, and its decision is the look after its charge).
    let mut scratch: Vec<Option<State>> = Vec::new();
    let mut decisions: Vec<Decision> = Vec::with_capacity(requests.len());
    for (i, r) in requests.iter().enumerate() {
        if r.usage {
            decisions.push(Decision::ALLOWED_UNCHECKED);
            continue;
        }
        let decision = match &leader {
            None => r.limit.check_member(
                slots.get(i).unwrap_or(&EMPTY),
                now,
                r.cost,
                r.member_bytes(),
            ),
            Some(leader) => {
                if scratch.is_empty() {
                    scratch.resize(requests.len(), None);
                }
                let s = scratch[leader[i]]
                    .get_or_insert_with(|| slots.get(i).cloned().unwrap_or_default());
                let d = r.limit.check_member(s, now, r.cost, r.member_bytes());
                if d.allowed() {
                    r.limit.commit_member(s, now, r.cost, r.member_bytes());
                }
                d
            }
        };
        decisions.push(decision);
    }

    // Holds lapsed in the states as stored: those a charge below clears are counted.
    let stale = lapsed_holds(slots, requests, now);
    // Budget alerts the states as stored have reached: those the charges below reach
    // are the round's.
    let marked = alert_marks(slots, requests, now);

    // Pass 2: charge all, or (denied) only the limits that charge rejected requests
    // (all of them, or those they denied themselves: `Limit::charges_rejected`).
    let denied_by = decisions.iter().position(|d| !d.allowed());
    for (i, r) in requests.iter().enumerate() {
        match denied_by {
            // Usage is pass 3's. One that leads others of its state (the first request
            // on it) still hands their charges over from the scratch copy.
            None if r.usage => {
                if let Some(s) = scratch.get_mut(i).and_then(Option::take) {
                    *slots.get_mut(i) = s;
                    slots.charged(i);
                }
            }
            Some(_) if r.usage => {}
            None => match &leader {
                None if r.cost == 0 => {}
                None => {
                    r.limit
                        .commit_member(slots.get_mut(i), now, r.cost, r.member_bytes());
                    slots.charged(i);
                }
                Some(leader) if leader[i] == i => {
                    *slots.get_mut(i) = scratch[i].take().unwrap_or_default();
                    slots.charged(i);
                }
                Some(_) => {}
            },
            // A denied take of a held id leaves a mark for its release (concurrency); a
            // denied borrower marks its child active (shares).
            Some(_)
                if (r.limit.algorithm().shares()
                    || (r.limit.algorithm().holds() && slots.get(i).is_some()))
                    && r.limit
                        .mark_denied(slots.get_mut(i), now, r.cost, r.member_bytes()) =>
            {
                slots.charged(i);
                if decisions[i].allowed() {
                    let peek = r
                        .limit
                        .check_member(slots.get_mut(i), now, 0, r.member_bytes());
                    decisions[i] = Decision {
                        outcome: Outcome::Allowed,
                        ..peek
                    };
                }
            }
            Some(_) if r.limit.charges_rejected(!decisions[i].allowed()) => {
                let s = slots.get_mut(i);
                decisions[i] = if decisions[i].allowed() {
                    r.limit.commit_member(s, now, r.cost, r.member_bytes());
                    Decision {
                        outcome: Outcome::Allowed,
                        ..r.limit.check_member(s, now, 0, r.member_bytes())
                    }
                } else {
                    // What remained when it came is pass 1's (on a shared key, after the
                    // requests before it), as the script says it.
                    Decision {
                        remaining: decisions[i].remaining,
                        ..r.limit.charge_rejected(s, now, r.cost)
                    }
                };
                slots.charged(i);
            }
            Some(_) if decisions[i].allowed() => {
                // Had room but was not charged: report the state as it is.
                let peek =
                    r.limit
                        .check_member(slots.get(i).unwrap_or(&EMPTY), now, 0, r.member_bytes());
                decisions[i] = Decision {
                    outcome: Outcome::Allowed,
                    ..peek
                };
            }
            Some(_) => {}
        }
    }

    // Pass 3: usage, in full, on the states as the round left them; refunds.
    for (i, r) in requests.iter().enumerate().filter(|(_, r)| r.usage) {
        if r.cost == 0 || (r.refund.is_some() && slots.get(i).is_none()) {
            // Nothing to charge, or to give back to: a look, which must not create a
            // state.
            decisions[i] = r.limit.check(slots.get(i).unwrap_or(&EMPTY), now, 0);
            continue;
        }
        if let Some(at) = r.refund {
            decisions[i] = r
                .limit
                .give_back(slots.get_mut(i), now, r.cost, at, r.member_bytes())
                .0;
            slots.charged(i);
            continue;
        }
        let (decision, charged) =
            r.limit
                .decide_usage_of(slots.get_mut(i), now, r.cost, r.member_bytes());
        decisions[i] = decision;
        if charged.is_some() {
            slots.charged(i);
        }
    }
    let lapsed = stale
        .into_iter()
        .filter_map(|(i, before)| {
            let cleared = before - kept_lapsed(slots, &requests[i], i, now).min(before);
            (cleared > 0).then_some((i, cleared))
        })
        .collect();
    let alerts = marked
        .into_iter()
        .filter_map(|(i, from)| {
            let (to, used) = slots
                .get(i)
                .map_or((0, 0), |s| requests[i].limit.reached(s, now));
            (to > from).then_some(Crossing {
                request: i,
                from,
                to,
                used,
            })
        })
        .collect();
    BatchDecision {
        decisions,
        denied_by,
        lapsed,
        alerts,
    }
}

/// The requests of `requests` with budget alerts (the first with them on each state):
/// their index and the alerts their state has reached before the round.
fn alert_marks(slots: &impl Slots, requests: &[Request<'_>], now: Timestamp) -> Vec<(usize, u8)> {
    let alerting = |i: usize| !requests[i].limit.alert_at().is_empty();
    (0..requests.len())
        .filter(|&i| {
            let state = first_sharing(requests, i);
            alerting(i) && !(0..i).any(|j| alerting(j) && first_sharing(requests, j) == state)
        })
        .map(|i| {
            (
                i,
                slots
                    .get(i)
                    .map_or(0, |s| requests[i].limit.reached(s, now).0),
            )
        })
        .collect()
}

/// The `concurrency` states of `requests` that keep lapsed holds: (the index of the
/// first request on each, how many).
fn lapsed_holds(slots: &impl Slots, requests: &[Request<'_>], now: Timestamp) -> Vec<(usize, u64)> {
    (0..requests.len())
        .filter(|&i| requests[i].limit.algorithm().holds() && first_sharing(requests, i) == i)
        .map(|i| (i, kept_lapsed(slots, &requests[i], i, now)))
        .filter(|&(_, n)| n > 0)
        .collect()
}

/// The lapsed holds request `i`'s state keeps.
fn kept_lapsed(slots: &impl Slots, r: &Request<'_>, i: usize, now: Timestamp) -> u64 {
    slots.get(i).map_or(0, |s| r.limit.lapsed(s, now))
}
