//! Two services whose clocks disagree by seconds, sharing one Redis in server-time mode
//! (the default): their decisions take Redis `TIME`, so together they still admit no
//! more than the limit in any window.

use std::sync::Arc;
use std::time::Duration;

use spillway_core::{Clock, SystemClock, Timestamp};
use spillway_server::App;
use tokio::time::Instant;

use crate::load::{self, Sample, certain_most};
use crate::trial::{LIMIT, Policy, WINDOW, service_settings};

/// A clock `offset` ahead (or behind, when `ahead` is false) of the OS's.
#[derive(Debug)]
struct Skewed {
    offset: Duration,
    ahead: bool,
}

impl Clock for Skewed {
    fn now(&self) -> Timestamp {
        let now = SystemClock.now();
        if self.ahead {
            now.saturating_add(self.offset)
        } else {
            now.saturating_sub(self.offset)
        }
    }
}

/// What the two services admitted together.
#[derive(Clone, Copy, Debug)]
pub struct SkewReport {
    pub sent: usize,
    pub admitted: usize,
    /// The most admitted that certainly fell in one window, both services together.
    pub certain_most: usize,
}

impl SkewReport {
    /// Admissions past the limit in one window (target 0).
    pub fn violations(&self) -> usize {
        self.certain_most.saturating_sub(LIMIT as usize)
    }
}

/// Two services on `url`, one `offset` ahead and one `offset` behind, each loaded at
/// 1.5× the limit's rate on the same key for `length`.
pub async fn run(url: &str, offset: Duration, length: Duration) -> anyhow::Result<SkewReport> {
    let settings = service_settings("skew", Policy::Closed, url.to_owned())?;
    let mut services = Vec::new();
    for ahead in [true, false] {
        let clock: Arc<dyn Clock> = Arc::new(Skewed { offset, ahead });
        services.push(
            App::builder(settings.clone())
                .clock(clock)
                .build()
                .await?
                .start()
                .await?,
        );
    }
    // A key no earlier run used, so the limit starts empty.
    let value = format!("skew-{}", std::process::id());
    let rate = (LIMIT as f64 * 1.5 / WINDOW.as_secs_f64()).ceil() as u32;
    let start = Instant::now();
    let mut loads = Vec::new();
    for s in &services {
        let check = load::HttpCheck::new(s.http_addr, &value)?;
        loads.push(tokio::spawn(load::drive(rate, length, start, move || {
            check.call()
        })));
    }
    let mut samples: Vec<Sample> = Vec::new();
    for l in loads {
        samples.extend(l.await?);
    }
    for s in services {
        s.stop().await;
    }
    let _ = std::fs::remove_dir_all(&settings.rules.path);
    samples.sort_by_key(|s| s.sent);
    let admitted = load::admitted(&samples);
    Ok(SkewReport {
        sent: samples.len(),
        admitted: admitted.len(),
        certain_most: certain_most(&admitted, WINDOW),
    })
}
