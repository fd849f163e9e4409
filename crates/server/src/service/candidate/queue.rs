//! The candidate's queue and the thread that empties it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use tokio::sync::mpsc;

use super::{BATCH, ForCandidate, GATHER, QUEUE};
use crate::service::Service;

/// The candidate's queue, and the thread that empties it: a thread of its own at the
/// lowest CPU priority there is (`SCHED_IDLE` on Linux), so the candidate only ever gets
/// CPU time the live traffic leaves. On a saturated machine it falls behind, its queue
/// fills, and what does not fit is dropped and counted, instead of taking CPU from
/// live answers. (A task spawned per request on the live runtime cost the live path
/// 15-19% of its throughput on two cores; docs/operating.md has the figures.)
pub(super) fn spawn(
    service: Weak<Service>,
    queued: Arc<AtomicUsize>,
) -> mpsc::Sender<ForCandidate> {
    let (tx, rx) = mpsc::channel(QUEUE);
    let started = std::thread::Builder::new()
        .name("spillway-candidate".into())
        .spawn(move || {
            lowest_priority();
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime.block_on(decide(service, rx, queued)),
                Err(e) => tracing::error!(error = %e, "the candidate set cannot run"),
            }
        });
    if let Err(e) = started {
        tracing::error!(error = %e, "the candidate set cannot run");
    }
    tx
}

/// This thread runs only when no other thread wants the CPU.
fn lowest_priority() {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::{
            NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy,
            set_thread_priority_and_policy, thread_native_id,
        };
        let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
        if let Err(e) =
            set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, idle)
        {
            tracing::warn!(error = ?e, "the candidate thread keeps the normal CPU priority");
        }
    }
}

/// Takes queued requests up to [`BATCH`] at a time and decides them together, until
/// the service is gone.
async fn decide(
    service: Weak<Service>,
    mut queue: mpsc::Receiver<ForCandidate>,
    queued: Arc<AtomicUsize>,
) {
    let mut batch = Vec::with_capacity(BATCH);
    while queue.recv_many(&mut batch, BATCH).await > 0 {
        let taken: usize = batch.iter().map(|(req, _)| super::queued_bytes(req)).sum();
        queued.fetch_sub(taken, Ordering::AcqRel);
        let Some(service) = service.upgrade() else {
            return;
        };
        let full = batch.len() == BATCH;
        service.candidate_check(&batch).await;
        batch.clear();
        drop(service);
        if !full {
            // Let the next batch gather rather than wake this task for every request.
            tokio::time::sleep(GATHER).await;
        }
    }
}
