//! A wall clock a test sets for the processes it spawns (libfaketime, preloaded).

use super::tempdir;

/// The start of the next hour of the real clock, in seconds since the epoch: where a
/// test's clock starts so that an aligned window (a minute, an hour) is all ahead of it.
pub fn next_hour() -> u64 {
    use spillway_core::Clock;
    let now = spillway_core::SystemClock.now().as_micros() / 1_000_000;
    (now / 3600 + 1) * 3600
}

/// Spillway's wall clock, set by the test: libfaketime (preloaded) reads the time from a
/// file at every call, so the test moves it on when it chooses, and no pause of a busy
/// machine between two steps can move it (a period that ends while the test is still
/// spending it would change the outcome). The monotonic clock is the real one.
pub struct FakeClock {
    file: std::path::PathBuf,
    lib: String,
}

impl FakeClock {
    /// A clock that starts at `at` (`2026-11-30 22:50:00`, UTC) and runs from there.
    pub fn at(at: &str) -> FakeClock {
        let lib = std::env::var("SPILLWAY_TEST_FAKETIME").expect(
            "SPILLWAY_TEST_FAKETIME is not set: run the suite with scripts/test, which installs \
             libfaketime (Debian's faketime) and exports its path",
        );
        let file = tempdir("fake-clock").join("now");
        let clock = FakeClock { file, lib };
        clock.set(at);
        clock
    }

    /// A clock that starts at the start of the next hour of the real one (later than
    /// now, so certificates made today are valid): an hour, a minute or a day window
    /// of the reference's aligned ones has all its length ahead, and no pause of a busy
    /// machine carries a test's requests into the next.
    pub fn next_hour() -> FakeClock {
        let hour = jiff::Timestamp::from_second(next_hour() as i64).unwrap();
        FakeClock::at(&hour.strftime("%Y-%m-%d %H:%M:%S").to_string())
    }

    /// Spillway's clock from now on reads `at` and runs from there.
    pub fn set(&self, at: &str) {
        let next = self.file.with_extension("next");
        std::fs::write(&next, format!("@{at}\n")).unwrap();
        std::fs::rename(&next, &self.file).unwrap();
    }

    /// The environment that gives a process this clock.
    pub fn env(&self) -> Vec<(&'static str, &str)> {
        vec![
            ("LD_PRELOAD", self.lib.as_str()),
            ("FAKETIME_TIMESTAMP_FILE", self.file.to_str().unwrap()),
            ("FAKETIME_NO_CACHE", "1"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
            ("TZ", "UTC"),
        ]
    }
}
