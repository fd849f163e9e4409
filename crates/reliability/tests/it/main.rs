//! The reliability experiments, in one test binary. Each one is an experiment of its own
//! on the machine: thousands of connections, a Redis Cluster failed over, a service
//! driven to overload and its latency read, the process's heap and file descriptors
//! counted. Run side by side they would measure each other (and the connection floods
//! run the process out of file descriptors), so they take turns ([`turn`]).

mod faults;
mod hostile;
mod memory;
mod overload;
mod rlqs;
mod skew;
mod soak;

static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// This experiment's turn: no other runs until the guard is dropped.
pub async fn turn() -> tokio::sync::MutexGuard<'static, ()> {
    TURN.lock().await
}

/// [`turn`], for an experiment that is not async.
pub fn turn_blocking() -> tokio::sync::MutexGuard<'static, ()> {
    TURN.blocking_lock()
}
