//! Overrides (#63, first steps: set in process through `Service`): an override's
//! limits apply to exactly its path, ahead of the policy file's; a sibling path keeps
//! the file's rules; removed, the file's rules are back. On memory and Redis.

use serde_json::json;
use spillway_policy::overrides::Override;

use crate::support::{self, Server};

const POLICY: &str = "domain: o
descriptors:
  - key: api_key
    limits:
      - { name: per-minute, algorithm: gcra, limit: 5, window: 1m }
";

fn body(key: &str) -> serde_json::Value {
    json!({ "domain": "o", "descriptors": [{ "entries": [{ "key": "api_key", "value": key }] }] })
}

/// How many of `n` checks of `key` are admitted (the manual clock stands still).
async fn admitted(s: &Server, key: &str, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        ok += usize::from(s.check(body(key)).await.0 == 200);
    }
    ok
}

#[tokio::test]
async fn an_override_beats_the_files_rule_for_its_path_only() {
    for backing in support::backings() {
        let s = Server::start("overrides", &[("o.yaml", POLICY)], backing.clone()).await;
        let service = &s.running.state.service;
        let path = vec![("api_key".to_owned(), "k1".to_owned())];
        let limits =
            json!([{ "name": "plan", "algorithm": "fixed_window", "limit": 2, "window": "1m" }]);
        service
            .set_override("o", Override::compile("o", &path, &limits).unwrap())
            .unwrap();
        assert_eq!(
            admitted(&s, "k1", 4).await,
            2,
            "{backing:?}: the override's 2"
        );
        assert_eq!(admitted(&s, "k2", 7).await, 5, "{backing:?}: the file's 5");
        // Raised: the count goes on (a limit changed keeps its state, as on a reload):
        // the 2 used count against the raised 3.
        let raised =
            json!([{ "name": "plan", "algorithm": "fixed_window", "limit": 3, "window": "1m" }]);
        service
            .set_override("o", Override::compile("o", &path, &raised).unwrap())
            .unwrap();
        assert_eq!(admitted(&s, "k1", 5).await, 1, "{backing:?}: the raised 3");
        // Removed: the file's rule for k1 again, its counter untouched so far.
        assert!(service.remove_override("o", &path));
        assert!(!service.remove_override("o", &path));
        assert_eq!(
            admitted(&s, "k1", 7).await,
            5,
            "{backing:?}: the file's 5 again"
        );
    }
}
