//! The window a decision that finds its lane idle waits before its call goes out, so
//! that the decisions arriving just after it share the call
//! ([`RedisStoreBuilder::window`](crate::RedisStoreBuilder::window)); off by default.
//!
//! tokio's timers tick in milliseconds, far coarser than a window of microseconds, so
//! a thread of the store's own sleeps to each window's end and wakes the decision
//! waiting for it. Every window of one store is as long, so windows end in the order
//! they began and the thread takes them first come, first served. Linux wakes a
//! sleeping thread up to its timer slack late (50 µs by default): a window lasts at
//! least its length, and about that much more.

use std::sync::mpsc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

/// The longest window a store takes: each decision on an idle lane waits it out, so
/// it is latency added to the quiet moments; past a millisecond it would be a good
/// part of a decision's 10 ms.
pub const MAX_WINDOW: Duration = Duration::from_millis(1);

/// A store's window, and the thread that ends it.
#[derive(Debug)]
pub(crate) struct Window {
    length: Duration,
    /// Each window's end, and whom to wake then; `None` when there is no window. The
    /// thread ends when the store, and with it this sender, is dropped.
    ends: Option<mpsc::Sender<(Instant, oneshot::Sender<()>)>>,
    /// A test's window, which ends when the test says (`notify_one`), not on time.
    #[cfg(test)]
    held: Option<std::sync::Arc<tokio::sync::Notify>>,
}

impl Window {
    /// A window of `length` (zero: none, and no thread).
    pub(crate) fn new(length: Duration) -> std::io::Result<Window> {
        if length.is_zero() {
            return Ok(Window {
                length,
                ends: None,
                #[cfg(test)]
                held: None,
            });
        }
        let (ends, windows) = mpsc::channel::<(Instant, oneshot::Sender<()>)>();
        std::thread::Builder::new()
            .name("spillway-window".into())
            .spawn(move || {
                for (end, wake) in windows {
                    let now = Instant::now();
                    if end > now {
                        std::thread::sleep(end - now);
                    }
                    // A decision whose caller stopped waiting dropped its receiver.
                    let _ = wake.send(());
                }
            })?;
        Ok(Window {
            length,
            ends: Some(ends),
            #[cfg(test)]
            held: None,
        })
    }

    /// A window that ends each time `release` is notified: what a test submits
    /// meanwhile is known to arrive within it, however slow the machine.
    #[cfg(test)]
    pub(crate) fn held(release: std::sync::Arc<tokio::sync::Notify>) -> Window {
        Window {
            length: Duration::from_micros(1),
            ends: None,
            held: Some(release),
        }
    }

    /// The window's length (zero: none).
    pub(crate) fn length(&self) -> Duration {
        self.length
    }

    /// Waits out one window; at once when there is none.
    pub(crate) async fn wait(&self) {
        #[cfg(test)]
        if let Some(release) = &self.held {
            return release.notified().await;
        }
        let Some(ends) = &self.ends else {
            return;
        };
        let (wake, woken) = oneshot::channel();
        if ends.send((Instant::now() + self.length, wake)).is_ok() {
            let _ = woken.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn no_window_waits_for_nothing_and_starts_no_thread() {
        let window = Window::new(Duration::ZERO).unwrap();
        assert!(window.ends.is_none());
        window.wait().await;
    }

    #[tokio::test]
    async fn a_window_lasts_at_least_its_length_and_ends_in_order() {
        let length = Duration::from_micros(200);
        let window = Window::new(length).unwrap();
        for _ in 0..20 {
            let began = Instant::now();
            window.wait().await;
            assert!(began.elapsed() >= length, "{:?}", began.elapsed());
        }
        // Many at once, each from its own start: every one waits its length.
        let waits = (0..50).map(|_| async {
            let began = Instant::now();
            window.wait().await;
            began.elapsed()
        });
        for waited in futures_util::future::join_all(waits).await {
            assert!(waited >= length, "{waited:?}");
        }
    }
}
