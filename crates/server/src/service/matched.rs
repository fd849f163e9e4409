//! The match stage: every rule a request's descriptors match (or its override), each
//! with its counter key and cost, the replaced ones dropped, and split into the store
//! rounds that decide them, at one `now`.

use std::borrow::Cow;
use std::sync::Arc;

use spillway_core::{Ticket, TicketKind};
use spillway_policy::{Mode, Rule, RuleLimit, member_of};

use super::overrides::Rules;
use super::request::Valid;
use super::{Check, CheckError, Hit, Service, override_key, rule_refunds};

impl Service {
    /// The match stage: every rule the request's descriptors match (replaced ones
    /// dropped), each with its counter key and cost, split into the store rounds that
    /// decide them, at one `now`.
    pub(super) fn matched<'p>(
        &self,
        req: &Valid,
        rules: Rules<'p>,
    ) -> Result<Check<'p>, CheckError> {
        let mut hits = self.hits(req, rules)?;
        drop_replaced(&mut hits);
        let counted = |h: &Hit<'_>| h.key.is_some();
        // With STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, a request of reference rules only
        // is one round whatever their modes, as the reference decides it: any rule over
        // its limit (shadow or quota-mode included) stops the others' counting.
        let one_round = self.options.stop_increment_when_over_limit
            && hits.iter().all(|h| !counted(h) || h.rule.reference);
        let independent =
            |h: &Hit<'_>| !one_round && (h.rule.mode == Mode::Shadow || self.is_quota(&h.rule));
        let together = (0..hits.len())
            .filter(|&i| counted(&hits[i]) && !independent(&hits[i]))
            .collect();
        let alone = (0..hits.len())
            .filter(|&i| counted(&hits[i]) && independent(&hits[i]))
            .collect();
        Ok(Check {
            hits,
            together,
            alone,
            one_round,
            now: self.clock.now(),
        })
    }

    /// Every rule each descriptor matched (or its override), with its counter key.
    pub(super) fn hits<'p>(
        &self,
        req: &Valid,
        rules: Rules<'p>,
    ) -> Result<Vec<Hit<'p>>, CheckError> {
        let domain = rules.file;
        let mut hits = Vec::with_capacity(req.descriptors.len());
        for (i, d) in req.descriptors.iter().enumerate() {
            // At most 2^53: `CheckRequest::validate` checked it ([`Valid`]).
            let cost = d.hits.unwrap_or(req.hits);
            let invalid =
                |e: spillway_core::Error| CheckError::Invalid(format!("descriptor {i}: {e}"));
            if let Some((m, entries)) = releasing(req, rules, &d.entries) {
                // A release: the holds its concurrency rules name are given back, and
                // nothing else is counted.
                for rule in m.rules.iter().filter(|r| r.holds()) {
                    hits.push(Hit {
                        descriptor: i,
                        rule: Cow::Borrowed(rule),
                        key: Some(m.key(rule).map_err(invalid)?),
                        cost: 1,
                        usage: true,
                        refund: Some(spillway_core::Timestamp::from_micros(0)),
                        member: hold_member(rule, release_ticket(req), entries),
                    });
                }
                continue;
            }
            if req.release {
                // `/v1/release` of a descriptor with no hold to give back: nothing.
                continue;
            }
            if req.renew {
                // `/v1/renew`: the holds its concurrency rules name renewed, nothing
                // else counted.
                let Some(m) = rules.resolve(&d.entries) else {
                    continue;
                };
                for rule in m.rules.iter().filter(|r| r.holds()) {
                    hits.push(Hit {
                        descriptor: i,
                        rule: Cow::Borrowed(rule),
                        key: Some(m.key(rule).map_err(invalid)?),
                        cost,
                        usage: cost > 0,
                        refund: None,
                        member: hold_member(rule, Ticket::default(), &d.entries),
                    });
                }
                continue;
            }
            if let Some(o) = d.limit {
                let mut rule = Rule::reference(o.requests_per_unit, o.unit);
                if self.options.stop_increment_when_over_limit {
                    rule = rule.charging_own_rejections();
                }
                rule.metric = Arc::clone(&self.override_path);
                let key = counts(&rule)
                    .then(|| override_key(domain, &d.entries))
                    .transpose()
                    .map_err(invalid)?;
                hits.push(Hit {
                    descriptor: i,
                    rule: Cow::Owned(rule),
                    key,
                    cost,
                    usage: req.usage && cost > 0,
                    refund: req.refund.filter(|_| req.usage && cost > 0),
                    member: None,
                });
            } else if let Some(m) = rules.resolve(&d.entries) {
                for rule in m.rules {
                    let key = counts(rule)
                        .then(|| m.key(rule))
                        .transpose()
                        .map_err(invalid)?;
                    if req.usage && rule.takes_member() && !req.settle {
                        let name = rule.name.as_deref().unwrap_or(&rule.metric);
                        return Err(CheckError::Invalid(if rule.shares() {
                            format!(
                                "descriptor {i}: rule {name} shares a parent's rate \
                                 (shares), which cannot take usage: a request is guaranteed \
                                 or borrows before it goes"
                            )
                        } else if rule.holds() {
                            format!(
                                "descriptor {i}: rule {name} holds slots at once \
                                 (concurrency), which cannot take usage: give a hold back \
                                 with /v1/release"
                            )
                        } else {
                            format!(
                                "descriptor {i}: rule {name} counts distinct values \
                                 (distinct), which cannot take usage: a value is counted \
                                 once, whatever it cost"
                            )
                        }));
                    }
                    // A distinct rule counts the request's member once, whatever its
                    // hits; a concurrency rule takes its hits as holds under it.
                    let (member, cost) = match rule.takes_member() {
                        true if rule.shares() => (Some(share_member(rule, &m, &d.entries)), cost),
                        true if rule.holds() => {
                            (hold_member(rule, take_ticket(req, rule), &d.entries), cost)
                        }
                        true => (last_member(&d.entries), cost.min(1)),
                        false => (None, cost),
                    };
                    let usage = (req.usage || (rule.metered && !req.reserve))
                        && cost > 0
                        && member.is_none();
                    let mut refund = req.refund.filter(|_| usage);
                    let mut cost = cost;
                    if req.settle && rule.takes_member() {
                        // Rules changed since the reservation: a distinct or concurrency
                        // rule takes no usage.
                        cost = 0;
                    } else if refund.is_some() && !rule_refunds(rule) {
                        // Rules changed since the reservation: what this one took stays.
                        (refund, cost) = (None, 0);
                    }
                    hits.push(Hit {
                        descriptor: i,
                        rule: Cow::Borrowed(rule),
                        key,
                        cost,
                        usage,
                        refund,
                        member,
                    });
                }
            }
        }
        if req.ticket.kind != TicketKind::Plain && hits.iter().any(charges_denials) {
            // Each try of a take that waits would charge these again: it cannot wait.
            for h in hits.iter_mut().filter(|h| h.rule.holds() && waits(&h.rule)) {
                if let Some(m) = h.member.as_mut() {
                    m.replace_range(1..2, "p");
                }
            }
        }
        Ok(hits)
    }
}

/// Whether a rule's limit waits (`max_wait`): a `concurrency` rule's members are then
/// tickets.
fn waits(rule: &Rule) -> bool {
    matches!(&rule.limit, RuleLimit::Limited(l) if !l.max_wait().is_zero())
}

/// Whether a hit's rule charges a request it denies (`count_rejected`, the reference's
/// rules without `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`).
fn charges_denials(hit: &Hit<'_>) -> bool {
    matches!(&hit.rule.limit, RuleLimit::Limited(l) if l.charges_rejected(true))
}

/// The ticket a take brings to a rule: the request's, but plain for a shadow rule
/// (nothing waits for it, so it must keep no place).
fn take_ticket(req: &Valid, rule: &Rule) -> Ticket {
    match rule.mode {
        Mode::Shadow => req.ticket.doing(TicketKind::Plain),
        _ => req.ticket,
    }
}

/// The ticket a release brings: a leave or give-back of the request's place, else
/// plain (a client's release gives back a hold, by its id).
fn release_ticket(req: &Valid) -> Ticket {
    match req.ticket.kind {
        TicketKind::Leave | TicketKind::GiveBack => req.ticket,
        _ => Ticket::default(),
    }
}

/// A `concurrency` rule's member: the hold's id (the descriptor's last value), as a
/// ticket's when the rule waits.
fn hold_member(rule: &Rule, ticket: Ticket, entries: &[(String, String)]) -> Option<String> {
    let id = last_member(entries)?;
    Some(if waits(rule) {
        ticket.member_str(&id)
    } else {
        id
    })
}

/// The member a descriptor brings: its last entry's value (a hold's id, what a
/// `distinct` rule counts), digested when long ([`member_of`]): decided on, never
/// refused for its length.
fn last_member(entries: &[(String, String)]) -> Option<String> {
    entries.last().map(|(_, v)| member_of(v).into_owned())
}

/// A `shares` rule's member: the child its node's entry names (an unlisted one is
/// `*`), at the priority the descriptor's last entry names, if it names one.
fn share_member(
    rule: &Rule,
    m: &spillway_policy::Match<'_>,
    entries: &[(String, String)],
) -> String {
    let child = &entries[m.member].1;
    let priority = m.priority.map(|p| entries[p].1.as_str());
    // ASCII digit, then a name from the policy (or `*`): UTF-8.
    String::from_utf8_lossy(&rule.share_member(child, priority)).into_owned()
}

fn counts(rule: &Rule) -> bool {
    matches!(rule.limit, RuleLimit::Limited(_))
}

/// The entry that makes a descriptor a release wherever it comes from: first, with any
/// value. Envoy's stream-done call carries it as a `generic_key`.
pub const RELEASE_ENTRY: &str = "release";

/// The match of a descriptor that gives holds back, and its entries without
/// [`RELEASE_ENTRY`]: one of a `/v1/release` request, or one led by that entry, whose
/// other entries reach a node with a `concurrency` rule. `None` otherwise: a descriptor
/// led by a `release` entry of a tree that has such a key is matched as it is.
fn releasing<'p, 'e>(
    req: &Valid,
    rules: Rules<'p>,
    entries: &'e [(String, String)],
) -> Option<(spillway_policy::Match<'p>, &'e [(String, String)])> {
    let rest = match entries.split_first() {
        Some(((k, _), rest)) if k == RELEASE_ENTRY && !rest.is_empty() => rest,
        _ if req.release => entries,
        _ => return None,
    };
    let m = rules.resolve(rest)?;
    m.rules.iter().any(Rule::holds).then_some((m, rest))
}

/// The reference's `replaces`: a matched rule named by another matched rule's `replaces`
/// is dropped from the request (its descriptor reports no limit, nothing is counted).
pub(super) fn drop_replaced(hits: &mut Vec<Hit<'_>>) {
    if hits.iter().all(|h| h.rule.replaces.is_empty()) {
        return;
    }
    let replaced: Vec<Arc<str>> = hits
        .iter()
        .flat_map(|h| h.rule.replaces.iter().cloned())
        .collect();
    hits.retain(|h| h.rule.name.as_ref().is_none_or(|n| !replaced.contains(n)));
}
