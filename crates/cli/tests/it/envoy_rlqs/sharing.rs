//! RLQS behind real Envoys sharing one bucket: by demand, on one Spillway or on two
//! replicas of one Redis, never more than the rate in total.

use super::*;

/// Requests of `tenant` through Envoy at `port` from `clients` threads until `stop`, each
/// pausing `pause` between requests (none: as fast as Envoy answers): the admitted.
fn drive(
    port: u16,
    tenant: &'static str,
    clients: usize,
    pause: Duration,
    stop: Arc<AtomicBool>,
    admitted: Arc<AtomicU32>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let threads: Vec<_> = (0..clients)
            .map(|_| {
                let (stop, admitted) = (Arc::clone(&stop), Arc::clone(&admitted));
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        match status(port, tenant) {
                            200 => {
                                admitted.fetch_add(1, Ordering::Relaxed);
                            }
                            429 => {}
                            other => panic!("status {other}"),
                        }
                        // The load's shape (a rate), not a wait for anything.
                        std::thread::sleep(pause);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
    })
}

/// Each holder of `tenant`'s bucket with a live share: its replica and stream, share
/// and demand; and the shares added up.
fn shares(admin: u16, tenant: &str) -> (Vec<(String, f64, f64)>, f64) {
    let explained = explain(admin, tenant);
    let holders = explained["holders"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| {
            let share = h["booked_per_second"].as_f64()?;
            Some((
                format!("{}:{}", h["replica"].as_str()?, h["stream"].as_u64()?),
                share,
                h["demand_per_second"].as_f64()?,
            ))
        })
        .collect();
    (holders, explained["booked_per_second"].as_f64().unwrap())
}

/// Three Envoys sharing one bucket of 30 a second: one idle, one at about 2× an even
/// third (20 a second), one as fast as it can. Over the run all three admit no more
/// than the rate and two seconds' worth (the buckets' first fills and what increases
/// add), and once the shares settled, not much less; the busy two get most of the
/// shares, never more than 30 in total; when the
/// fastest Envoy is stopped, its share goes to the others within its assignment's TTL
/// (8 s here) and a report.
#[test]
fn three_envoys_share_one_bucket_by_demand() {
    three_envoys_share_one_bucket(None);
}

/// The same on two Spillway replicas of one Redis, the idle and the paced Envoy on the
/// first, the fastest on the second: the shares live in Redis, and the same bound holds.
#[test]
fn three_envoys_on_two_replicas_share_one_bucket_through_redis() {
    three_envoys_share_one_bucket(Some(spillway_testkit::redis::standalone_url()));
}

/// [`three_envoys_share_one_bucket_by_demand`], on one Spillway of the memory store, or
/// (`redis`) on two replicas of that Redis.
fn three_envoys_share_one_bucket(redis: Option<String>) {
    const RATE: f64 = 30.0;
    let mut procs = Procs(Vec::new());
    let policy = "domain: api
descriptors:
  - key: tenant
    rate_limit: { unit: second, requests_per_unit: 30 }
";
    let prefix = spillway_testkit::redis::unique_prefix("envoy-rlqs");
    let spillway = |procs: &mut Procs| {
        let admin = free_port();
        let admin_addr = format!("127.0.0.1:{admin}");
        let mut env = vec![
            ("SPILLWAY_ADMIN_ADDR", admin_addr.as_str()),
            ("SPILLWAY_RLQS_ASSIGNMENT_TTL", "8s"),
        ];
        if let Some(url) = &redis {
            env.extend([
                ("SPILLWAY_STORE", url.as_str()),
                ("SPILLWAY_KEY_PREFIX", prefix.as_str()),
                ("SPILLWAY_STORE_TIMEOUT", "1s"),
            ]);
        }
        let (grpc, _) = spillway_with(procs, policy, &env);
        (grpc, admin)
    };
    let (grpc, admin) = spillway(&mut procs);
    let (other, other_admin) = match &redis {
        Some(_) => spillway(&mut procs),
        None => (grpc, admin),
    };
    let config = example("envoy.yaml");
    let app = upstream();
    let ports: Vec<u16> = [grpc, grpc, other]
        .into_iter()
        .map(|to| envoy(&mut procs, &config, to, app))
        .collect();
    // The idle one makes its bucket with one request, and sends nothing more.
    status(ports[0], "shared");

    let stop = Arc::new(AtomicBool::new(false));
    let start = SystemClock.now();
    // The idle one's request counted.
    let admitted = Arc::new(AtomicU32::new(1));
    let load = |port, clients, pause| {
        drive(
            port,
            "shared",
            clients,
            pause,
            Arc::clone(&stop),
            Arc::clone(&admitted),
        )
    };
    let paced = load(ports[1], 2, Duration::from_millis(100));
    let fast = load(ports[2], 4, Duration::ZERO);
    // Three reports of each Envoy (every 5 s), checking the shares' total meanwhile (as
    // each replica sees it). The paced and the fastest Envoy start together, and each
    // finds the room the idle one (alone, it had all but a newcomer's floor) gives up
    // only at the idle one's next report: the one that comes second is sent its share
    // of 0 until its own next report. So the shares settle by the third report (10 s),
    // and what the Envoys admit is judged from there.
    let settled_at = Duration::from_secs(11);
    let mut settled = None;
    let mut most = 0.0f64;
    let mut timeline = Vec::new();
    for tick in 0.. {
        let at = SystemClock.now().duration_since(start);
        if at >= Duration::from_secs(17) {
            break;
        }
        if at >= settled_at && settled.is_none() {
            settled = Some((at, admitted.load(Ordering::Relaxed)));
        }
        let seen = shares(admin, "shared");
        most = most.max(seen.1).max(shares(other_admin, "shared").1);
        if tick % 5 == 0 {
            timeline.push((at, seen.0));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    paced.join().unwrap();
    fast.join().unwrap();
    let end = SystemClock.now().duration_since(start);
    let secs = end.as_secs_f64();
    let admitted = admitted.load(Ordering::Relaxed);
    let (holders, total) = shares(admin, "shared");
    eprintln!("{admitted} admitted in {secs:.2} s; shares {holders:?}, most assigned {most}");
    assert!(
        most <= RATE + 1e-9 && total <= RATE + 1e-9,
        "{most}, {total}"
    );
    let bound = (RATE * (secs + 2.0)).ceil() as u32;
    assert!(
        admitted <= bound,
        "{admitted} admitted in {secs:.2} s, more than {bound}"
    );
    let (from, before) = settled.expect("the run lasts past the third report");
    let since = (end - from).as_secs_f64();
    let after = admitted - before;
    assert!(
        f64::from(after) >= RATE * since * 0.6,
        "{after} admitted in the {since:.2} s since the shares settled"
    );
    // The busy two hold most of the rate; the idle one (the least demand) little more
    // than its floor.
    assert_eq!(holders.len(), 3, "{holders:?}");
    let mut by_demand = holders.clone();
    by_demand.sort_by(|a, b| a.2.total_cmp(&b.2));
    assert!(by_demand[0].1 < 0.2 * RATE, "{holders:?}");
    assert!(by_demand[1].1 + by_demand[2].1 > 0.75 * RATE, "{holders:?}");
    // Each Envoy's share over the run, a row a second (docs/algorithms.md shows it).
    eprintln!("| s | idle | paced | fastest | assigned |\n|---|---|---|---|---|");
    for (at, seen) in &timeline {
        let share = |who: usize| {
            seen.iter()
                .find(|h| h.0 == by_demand[who].0)
                .map_or("–".to_string(), |h| format!("{:.2}", h.1))
        };
        let total: f64 = seen.iter().map(|h| h.1).sum();
        eprintln!(
            "| {:.1} | {} | {} | {} | {total:.2} |",
            at.as_secs_f64(),
            share(0),
            share(1),
            share(2)
        );
    }

    // The fastest (the most demand) stops for good: its share goes to the others
    // within its TTL and a report (8 s + 5 s).
    let fast_holder = by_demand[2].0.clone();
    let fastest = procs.0.last_mut().unwrap();
    fastest.kill().unwrap();
    fastest.wait().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let again = Arc::new(AtomicU32::new(0));
    let paced = drive(
        ports[1],
        "shared",
        4,
        Duration::ZERO,
        Arc::clone(&stop),
        again,
    );
    let stopped = SystemClock.now();
    loop {
        let (holders, total) = shares(admin, "shared");
        assert!(total <= RATE + 1e-9, "{holders:?}");
        let gone = !holders.iter().any(|h| h.0 == fast_holder);
        let busy = holders.iter().map(|h| h.1).fold(0.0, f64::max);
        if gone && busy > 0.8 * RATE {
            eprintln!(
                "after {:?}: {holders:?}",
                SystemClock.now().duration_since(stopped)
            );
            break;
        }
        assert!(
            SystemClock.now().duration_since(stopped) < Duration::from_secs(20),
            "the stopped Envoy's share never came back: {holders:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    paced.join().unwrap();
}
