//! One reading of a guarded round's answer, for whoever reports it (the service's
//! metrics and log, the tower layer's): whether the store failed, and who gave each
//! decision that the store did not.

use super::{Guarded, Source, Unanswered};
use crate::StoreFailure;

/// How a user of a [`GuardedStore`](super::GuardedStore) reports its rounds; [`report`]
/// reads each answer into it, once.
pub trait Report {
    /// The store did not answer the round: `closed` when no failure policy answered
    /// either (the round is refused), else the failure policies decided.
    fn failed(&self, failure: &StoreFailure, closed: bool);

    /// Decision `i` of the round was given by `source`, not the store: its deny cache,
    /// this server's share, or a failure policy.
    fn answered_by(&self, i: usize, source: Source);
}

impl Source {
    /// A failure policy gave the decision (`local`, `open`): not the store, its deny
    /// cache, nor this server's share of the limit.
    pub fn degraded(self) -> bool {
        matches!(self, Source::Local | Source::Open)
    }
}

/// Reads a round's `answer` into `to`: the failure, then each decision the store did
/// not give.
pub fn report(answer: Result<&Guarded, &Unanswered>, to: &impl Report) {
    match answer {
        Err(Unanswered::Unavailable(failure)) => to.failed(failure, true),
        Err(Unanswered::Invalid(_)) => {}
        Ok(guarded) => {
            if let Some(failure) = &guarded.failure {
                to.failed(failure, false);
            }
            for (i, source) in guarded.sources.iter().enumerate() {
                if *source != Source::Store {
                    to.answered_by(i, *source);
                }
            }
        }
    }
}
