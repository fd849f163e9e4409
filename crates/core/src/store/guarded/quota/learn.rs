//! What the store's answer teaches this server's shares: a lease's spare units (the
//! units asked past the request's cost, now this server's to spend in the window), and
//! a sync count's `known`, the window's count at the store.

use crate::decision::BatchDecision;
use crate::sharing::Sharing;
use crate::store::Request;

use super::super::Guard;
use super::{Entry, Quotas};

impl Quotas {
    /// Learns the store's answer to `requests` asked with `asks`, sent at `now`, and
    /// turns each lease's decision into the request's own (the spare units are this
    /// server's).
    pub fn learn(
        &self,
        requests: &[Request<'_>],
        guards: &[Guard],
        asks: &[u64],
        batch: &mut BatchDecision,
        now: u64,
    ) {
        let admitted = batch.allowed();
        for (i, (r, g)) in requests.iter().zip(guards).enumerate() {
            let d = &mut batch.decisions[i];
            let until = now.saturating_add(d.reset_after.as_micros() as u64);
            let slot = (r.key.clone(), r.limit.shape());
            match g.sharing {
                Sharing::Exact => {}
                Sharing::Lease { .. } => {
                    let spare = if admitted { asks[i] - r.cost } else { 0 };
                    d.remaining += spare;
                    let mut shard = self.shard(r.key, false).lock();
                    if let Some(Entry::Lease {
                        units,
                        hint,
                        until: end,
                        asking,
                    }) = shard.get_mut(&slot)
                    {
                        if asks[i] > r.cost || *asking == now.max(1) {
                            *asking = 0;
                        }
                        if now >= *end {
                            *units = 0;
                        }
                        *units += spare;
                        *hint = d.remaining - spare;
                        *end = until;
                    } else if shard.len() < self.per_shard {
                        shard.insert(
                            slot,
                            Entry::Lease {
                                units: spare,
                                hint: d.remaining - spare,
                                until,
                                asking: 0,
                            },
                        );
                    }
                }
                Sharing::Sync { every } => {
                    // The count at the store after this answer: `remaining` is after
                    // the charge when admitted, or as it stands (uncharged) when not;
                    // a limit with room in a denied batch was not charged.
                    let charged = admitted || r.limit.charges_rejected(!d.allowed());
                    let mut used = r.limit.limit().saturating_sub(d.remaining);
                    if d.allowed() && !charged {
                        used = used.saturating_sub(r.cost);
                    }
                    let mut shard = self.shard(r.key, true).lock();
                    let room = shard.len() < self.per_shard;
                    match shard.get_mut(&slot) {
                        Some(Entry::Sync {
                            known,
                            pending,
                            flushing,
                            until: end,
                            heard,
                            ..
                        }) => {
                            if now >= *end {
                                (*pending, *flushing) = (0, 0);
                            }
                            *known = used;
                            *end = until;
                            *heard = now;
                        }
                        _ if room => {
                            shard.insert(
                                slot,
                                Entry::Sync {
                                    known: used,
                                    pending: 0,
                                    flushing: 0,
                                    until,
                                    heard: now,
                                    active: false,
                                    every: every.as_micros() as u64,
                                    flush: r.limit.counting_rejected(),
                                    key: r.key.clone(),
                                },
                            );
                        }
                        _ => {}
                    }
                }
            }
        }
    }
}
