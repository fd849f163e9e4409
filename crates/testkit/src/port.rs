//! Loopback ports for a process a test starts (a service, Envoy, chromedriver, a Redis)
//! when the port must be named before the process binds it.
//!
//! A port the kernel hands out for `bind(…:0)` comes from the ephemeral range
//! (`/proc/sys/net/ipv4/ip_local_port_range`, 32768–60999 by default), and so does the
//! local port of every outgoing connection: on a busy machine, a test's hundreds of
//! connections to Redis and Envoy can take a port between the moment it was found free
//! and the moment the child binds it ("Address already in use"). The ports here come
//! from below that range, where no outgoing connection lands, each one once per process
//! (from a starting point of its own, so that test processes side by side rarely try the
//! same one), and are checked free by binding them.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// Where [`free`] draws from: below the ephemeral range, and below the Redis servers
/// `scripts/test` starts (20000 and up), so that a Redis node's cluster bus port
/// (port + 10000) is below the ephemeral range too.
const RANGE: std::ops::Range<u32> = 10_000..20_000;

/// A loopback port nothing listens on, not handed out before by this process, outside
/// the range outgoing connections use.
pub fn free() -> u16 {
    free_where(|_| true)
}

/// [`free`], for a Redis node: its cluster bus port (port + 10000) is free too.
pub fn free_with_bus() -> u16 {
    free_where(|port| bindable(port + 10_000))
}

fn free_where(also: impl Fn(u16) -> bool) -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let width = RANGE.end - RANGE.start;
    // The first call picks this process's starting point.
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7919) % width,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..width {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % width;
        let port = u16::try_from(RANGE.start + offset).expect("the range is below 65536");
        if bindable(port) && also(port) {
            return port;
        }
    }
    panic!("no free loopback port in {RANGE:?}")
}

fn bindable(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_free_outside_the_ephemeral_range_and_never_repeat() {
        let ports: Vec<u16> = (0..200).map(|_| free()).collect();
        let mut seen = std::collections::HashSet::new();
        for &p in &ports {
            assert!(RANGE.contains(&u32::from(p)), "{p}");
            assert!(seen.insert(p), "{p} handed out twice");
        }
        // The next one in line, in use, is skipped.
        let width = RANGE.end - RANGE.start;
        let upcoming = RANGE.start + (u32::from(ports[199]) + 1 - RANGE.start) % width;
        let upcoming = u16::try_from(upcoming).unwrap();
        let held = TcpListener::bind(("127.0.0.1", upcoming));
        let next = free();
        assert!(
            next != upcoming && bindable(next),
            "{next} after {upcoming}, held: {held:?}"
        );
        let node = free_with_bus();
        assert!(bindable(node + 10_000));
    }
}
