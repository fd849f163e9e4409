//! Coalesced script calls against a real server: decisions that arrive while the
//! store's calls are in flight go out together in the next call, in order, each batch
//! decided as it would be alone, a failing one failing alone.
//!
//! The server is stopped (SIGSTOP) while the decisions are submitted, so which call
//! carries which decision is known exactly, without sleeps.

use crate::support;

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use spillway_core::{Algorithm, Decision, Error, Key, Limit, Request, Store, Timestamp};
use spillway_testkit::redis::RedisServer;

/// Futures polled in the order given: each one's first poll submits its decision.
struct InOrder<'a, T> {
    futures: Vec<Pin<Box<dyn Future<Output = T> + Send + 'a>>>,
    outputs: Vec<Option<T>>,
}

/// What a decision's future gives.
type Decided = Result<Decision, Error>;

impl<'a> InOrder<'a, Decided> {
    /// A take of 1 on `limit` at `now` for each of `keys`, in order, on `store`.
    fn takes(
        store: &'a spillway_redis::RedisStore,
        keys: impl IntoIterator<Item = &'a Key>,
        limit: &'a Limit,
        now: Timestamp,
    ) -> Self {
        let futures = (keys.into_iter())
            .map(|k| {
                Box::pin(store.check_one(Request::new(k, limit, 1), now))
                    as Pin<Box<dyn Future<Output = Decided> + Send + 'a>>
            })
            .collect();
        InOrder::new(futures)
    }
}

impl<'a, T> InOrder<'a, T> {
    fn new(futures: Vec<Pin<Box<dyn Future<Output = T> + Send + 'a>>>) -> Self {
        let outputs = futures.iter().map(|_| None).collect();
        InOrder { futures, outputs }
    }

    /// Polls each unfinished future once, in order; true when all are done.
    fn poll_all(&mut self, cx: &mut std::task::Context<'_>) -> bool {
        let mut done = true;
        for (f, out) in self.futures.iter_mut().zip(&mut self.outputs) {
            if out.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *out = Some(v),
                    Poll::Pending => done = false,
                }
            }
        }
        done
    }

    async fn start(&mut self) {
        poll_fn(|cx| {
            self.poll_all(cx);
            Poll::Ready(())
        })
        .await
    }

    /// Drops future `i` (its caller gone), `instead` its output.
    fn cancel(&mut self, i: usize, instead: T)
    where
        T: 'a,
    {
        self.futures[i] = Box::pin(std::future::pending());
        self.outputs[i] = Some(instead);
    }

    async fn finish(mut self) -> Vec<T> {
        poll_fn(|cx| {
            if self.poll_all(cx) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
        self.outputs.into_iter().map(Option::unwrap).collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_waiting_for_a_call_share_the_next_one_and_fail_alone() {
    share_the_next_call_and_fail_alone(RedisServer::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_valkey_decisions_waiting_for_a_call_share_the_next_one() {
    share_the_next_call_and_fail_alone(RedisServer::start_valkey()).await;
}

async fn share_the_next_call_and_fail_alone(server: RedisServer) {
    let store = support::caller_clock_store(&server.url(), "coalesce").await;
    let now = Timestamp::from_secs(1_800_000_000);
    let limit = Limit::new(Algorithm::FixedWindow, 10, Duration::from_secs(60)).unwrap();
    let key = |k: &str| Key::new(k).unwrap();

    // Loads the script, so every call below is one EVALSHA.
    let warm = key("warm");
    store
        .check_one(Request::new(&warm, &limit, 1), now)
        .await
        .unwrap();
    let bad = key("bad");
    let mut set = redis::cmd("SET");
    set.arg(store.key_for(&bad, &limit, now))
        .arg("not a window");
    store.query(&set).await.unwrap();
    store
        .query(redis::cmd("CONFIG").arg("RESETSTAT"))
        .await
        .unwrap();

    // The first decision goes at once; the 63 after it wait (one on a key holding
    // another program's value, 61 on one key with room for 10) until 16 fill a second
    // call (`SECOND_CALL_AT`), and the other 47 wait for a third.
    let (a, b, hot) = (key("a"), key("b"), key("hot"));
    let mut keys = vec![&a, &b, &bad];
    keys.extend(std::iter::repeat_n(&hot, 61));
    let mut decisions = InOrder::takes(&store, keys.iter().copied(), &limit, now);
    server.signal("STOP");
    decisions.start().await;
    server.signal("CONT");
    let decisions = decisions.finish().await;

    assert!(decisions[0].as_ref().unwrap().allowed());
    assert!(decisions[1].as_ref().unwrap().allowed());
    match &decisions[2] {
        Err(e @ Error::Store { .. }) => {
            assert!(e.to_string().contains("not state of its algorithm"), "{e}");
            assert!(!e.is_transient());
        }
        other => panic!("the bad key's batch must fail: {other:?}"),
    }
    // In order, each seeing the charges of those before it: the first ten admitted.
    let hot: Vec<bool> = decisions[3..]
        .iter()
        .map(|d| d.as_ref().expect("the others are decided").allowed())
        .collect();
    assert_eq!(hot.iter().filter(|a| **a).count(), 10, "exactly the limit");
    assert!(hot[..10].iter().all(|a| *a), "the first ten: {hot:?}");
    // The one that went at once, the 16 that filled a second call, the 47 left.
    assert_eq!(server.script_calls(), 3);
    let remaining = store
        .check_one(Request::new(&key("hot"), &limit, 0), now)
        .await
        .unwrap()
        .remaining;
    assert_eq!(remaining, 0, "the ten admitted are charged");
}

/// A caller whose decision filled a second call (`SECOND_CALL_AT`) sends it from its
/// own task, carrying 15 other callers' batches; it goes away while the call is on the
/// wire (the server stopped). The call is finished on a task of its own: the 15 get
/// their decisions. (It used to be dropped with its caller: each of the 15 failed with
/// "the call carrying this decision was dropped", though Redis ran their charges.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_goes_away_mid_call_does_not_fail_the_batches_it_carries() {
    let server = RedisServer::start();
    let store = support::caller_clock_store(&server.url(), "carrier").await;
    let now = Timestamp::from_secs(1_800_000_000);
    let limit = Limit::new(Algorithm::FixedWindow, 10, Duration::from_secs(60)).unwrap();
    let keys: Vec<Key> = (0..17)
        .map(|i| Key::new(format!("k{i}")).unwrap())
        .collect();
    store
        .check_one(Request::new(&keys[0], &limit, 0), now)
        .await
        .unwrap();
    let mut decisions = InOrder::takes(&store, &keys, &limit, now);
    server.signal("STOP");
    // The first goes at once; the next 15 wait; the 17th fills a second call and
    // sends it, then its caller goes away.
    decisions.start().await;
    decisions.cancel(16, Err(Error::Timeout(Duration::ZERO)));
    server.signal("CONT");
    let decisions = decisions.finish().await;
    for (i, d) in decisions[..16].iter().enumerate() {
        assert!(
            d.as_ref().is_ok_and(Decision::allowed),
            "decision {i}: {d:?}"
        );
    }
    let charged = store
        .check_one(Request::new(&keys[16], &limit, 0), now)
        .await
        .unwrap();
    assert_eq!(charged.remaining, 9, "the carrier's own take went out too");
}
