//! A store's window against a real server: the decision that opens an idle lane
//! waits it out, and the decisions that arrive meanwhile share its call. The window
//! here ends when the test says, and the server is stopped where a call must not
//! end early: which call carries which decision is known exactly, however busy the
//! machine (a real window of 200 µs can end while the thread that opened it is
//! descheduled, before the others arrive).

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use spillway_core::{Algorithm, Key, Limit, Request, Store, Timestamp};
use spillway_testkit::redis::{RedisServer, unique_prefix};
use tokio::sync::Notify;

use crate::coalesce::window::Window;
use crate::{RedisStore, TimeSource};

async fn store(server: &RedisServer) -> RedisStore {
    RedisStore::builder(server.url())
        .prefix(unique_prefix("window"))
        .time_source(TimeSource::Caller)
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap()
}

/// Eight takes submitted in one poll (`join_all` polls each once before anything
/// else runs), then `meanwhile`; each is allowed.
async fn eight_takes(store: &RedisStore, meanwhile: impl FnOnce()) {
    let limit = Limit::new(Algorithm::FixedWindow, 10, Duration::from_secs(60)).unwrap();
    let keys: Vec<Key> = (0..8).map(|i| Key::new(format!("k{i}")).unwrap()).collect();
    let now = Timestamp::from_secs(1_800_000_000);
    let takes = join_all(
        keys.iter()
            .map(|k| store.check_one(Request::new(k, &limit, 1), now)),
    );
    let (decisions, ()) = tokio::join!(takes, async {
        tokio::task::yield_now().await;
        meanwhile();
    });
    for d in decisions {
        assert!(d.unwrap().allowed());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_decisions_that_arrive_in_a_window_share_the_call_that_opened_it() {
    let server = RedisServer::start();

    // No window: the first goes at once, alone (the server stopped, it cannot end
    // before the others arrive), and the seven after it share the next call.
    let store_now = store(&server).await;
    server.cli(&["CONFIG", "RESETSTAT"]);
    server.signal("STOP");
    eight_takes(&store_now, || server.signal("CONT")).await;
    assert_eq!(server.script_calls(), 2);

    // A window: the first waits it out, and all eight go in its call.
    let mut store_held = store(&server).await;
    let release = Arc::new(Notify::new());
    Arc::get_mut(&mut store_held.inner)
        .expect("not shared")
        .window = Window::held(Arc::clone(&release));
    server.cli(&["CONFIG", "RESETSTAT"]);
    eight_takes(&store_held, || release.notify_one()).await;
    assert_eq!(server.script_calls(), 1);
}

#[tokio::test]
async fn a_window_past_a_millisecond_is_refused() {
    let e = RedisStore::builder("redis://127.0.0.1:1")
        .window(Duration::from_millis(2))
        .build()
        .await
        .unwrap_err();
    assert!(e.to_string().contains("at most 1ms"), "{e}");
}
