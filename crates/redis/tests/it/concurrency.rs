//! Many callers, one key, real Redis: the exact algorithms admit exactly the limit,
//! from 64 tasks on one connection (on every topology: standalone, Cluster, over TLS,
//! through a TLS sentinel, Valkey) and from several OS processes at once (standalone
//! and Cluster). Redis TIME decides; the window is long enough that
//! nothing refills while the test runs.

use crate::support;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use spillway_core::{Algorithm, Edge, Key, Limit, Request, Store, Timestamp};
use spillway_redis::{RedisStore, TimeSource};
use spillway_testkit::redis::unique_prefix;

const TASKS: usize = 64;
const PER_TASK: usize = 50;
const LIMIT: u64 = 100;

fn limits() -> Vec<Limit> {
    let hour = Duration::from_secs(3600);
    let mut all: Vec<Limit> = Algorithm::ALL
        .iter()
        .map(|a| Limit::new(*a, LIMIT, hour).unwrap())
        .collect();
    all.push(
        Limit::new(
            Algorithm::SlidingWindow {
                precision: 60,
                edge: Edge::Strict,
            },
            LIMIT,
            hour,
        )
        .unwrap(),
    );
    all
}

/// Runs `tasks` tasks of `PER_TASK` requests of `cost(task, i)` on one key; returns
/// the admitted cost.
async fn hammer(
    store: &RedisStore,
    limit: &Limit,
    tasks: usize,
    cost: fn(usize, usize) -> u64,
) -> u64 {
    let store = Arc::new(store.clone());
    let limit = Arc::new(limit.clone());
    let key = Arc::new(Key::new("hot").unwrap());
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (store, limit, key) = (store.clone(), limit.clone(), key.clone());
            tokio::spawn(async move {
                let mut admitted = 0;
                for i in 0..PER_TASK {
                    let c = cost(t, i);
                    let d = store
                        .check_one(Request::new(&key, &limit, c), Timestamp::from_secs(0))
                        .await
                        .expect("decision");
                    if d.allowed() {
                        admitted += c;
                    }
                }
                admitted
            })
        })
        .collect();
    let mut total = 0;
    for h in handles {
        total += h.await.unwrap();
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tasks_on_one_key_admit_exactly_the_limit() {
    // Every topology: plaintext, TLS (standalone, Cluster, Sentinel), Valkey.
    for (name, url) in support::topologies() {
        for limit in limits() {
            let store = support::server_clock_store(&url, &unique_prefix("tasks")).await;
            let admitted = hammer(&store, &limit, TASKS, |_, _| 1).await;
            assert_eq!(admitted, LIMIT, "{name}: {limit}");
        }
    }
}

/// The same, with every call an `EVALSHA` of the script (servers without functions).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn as_a_script_tasks_on_one_key_admit_exactly_the_limit() {
    for (name, url) in support::targets() {
        for limit in limits() {
            let prefix = unique_prefix("tasks");
            let store = support::script_store(&url, TimeSource::Server, &prefix).await;
            let admitted = hammer(&store, &limit, TASKS, |_, _| 1).await;
            assert_eq!(admitted, LIMIT, "{name}, as a script: {limit}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn weighted_costs_never_exceed_the_limit() {
    for (name, url) in support::targets() {
        for limit in limits() {
            let store = support::server_clock_store(&url, &unique_prefix("weighted")).await;
            let admitted = hammer(&store, &limit, TASKS, |t, i| {
                1 + ((t * 7 + i * 3) % 7) as u64
            })
            .await;
            // Costs go down to 1, so the last admitted ones fill the limit exactly.
            assert_eq!(admitted, LIMIT, "{name}: {limit}");
        }
    }
}

/// The child half of the multi-process test: runs only when the parent sets the
/// variables, and prints the admitted count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_process_hammer() {
    let (Ok(url), Ok(prefix), Ok(which)) = (
        std::env::var("SPILLWAY_CHILD_URL"),
        std::env::var("SPILLWAY_CHILD_PREFIX"),
        std::env::var("SPILLWAY_CHILD_LIMIT"),
    ) else {
        return;
    };
    let limit = &limits()[which.parse::<usize>().unwrap()];
    let store = support::server_clock_store(&url, &prefix).await;
    let admitted = hammer(&store, limit, TASKS / 4, |_, _| 1).await;
    println!("\nADMITTED={admitted}");
}

/// The child test's name as the harness knows it (its module path in this test binary).
fn child_test_name() -> String {
    let (_, module) = module_path!().split_once("::").unwrap();
    format!("{module}::child_process_hammer")
}

#[test]
fn processes_on_one_key_admit_exactly_the_limit() {
    if std::env::var("SPILLWAY_CHILD_URL").is_ok() {
        return; // a child runs only child_process_hammer
    }
    let exe = std::env::current_exe().unwrap();
    for (name, url) in support::targets() {
        for (which, limit) in limits().iter().enumerate() {
            let prefix = unique_prefix("processes");
            let children: Vec<_> = (0..4)
                .map(|_| {
                    Command::new(&exe)
                        .args([
                            "--exact",
                            &child_test_name(),
                            "--nocapture",
                            "--test-threads=1",
                        ])
                        .env("SPILLWAY_CHILD_URL", &url)
                        .env("SPILLWAY_CHILD_PREFIX", &prefix)
                        .env("SPILLWAY_CHILD_LIMIT", which.to_string())
                        .output_spawn()
                })
                .collect();
            let admitted: u64 = children
                .into_iter()
                .map(|c| {
                    let out = c.wait_with_output().unwrap();
                    let stdout = String::from_utf8_lossy(&out.stdout);
                    assert!(out.status.success(), "{name}: child failed:\n{stdout}");
                    stdout
                        .lines()
                        .find_map(|l| l.split_once("ADMITTED=").map(|(_, n)| n))
                        .unwrap_or_else(|| panic!("{name}: no count in:\n{stdout}"))
                        .trim()
                        .parse::<u64>()
                        .unwrap()
                })
                .sum();
            assert_eq!(
                admitted, LIMIT,
                "{name}: {limit}, 4 processes × 16 tasks × 50"
            );
        }
    }
}

trait SpawnPiped {
    fn output_spawn(&mut self) -> std::process::Child;
}

impl SpawnPiped for Command {
    fn output_spawn(&mut self) -> std::process::Child {
        self.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("the test binary starts")
    }
}
