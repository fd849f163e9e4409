//! The lanes' queue, on batches that are only their number of keys.

use super::*;

/// A batch of this many keys, whose part of a call's reply (an array) is one
/// element.
#[derive(Debug)]
struct Keys(usize);

impl Batch for Keys {
    fn keys(&self) -> usize {
        self.0
    }

    fn split(reply: Value, batches: &[Waiting<Self>]) -> Result<Vec<Value>, String> {
        match reply {
            Value::Array(parts) if parts.len() == batches.len() => Ok(parts),
            other => Err(format!(
                "{} batch replies expected: {other:?}",
                batches.len()
            )),
        }
    }
}

fn batch(keys: usize) -> (Waiting<Keys>, oneshot::Receiver<Result<Value, Failure>>) {
    let (answer, reply) = oneshot::channel();
    (
        Waiting {
            batch: Keys(keys),
            answer,
        },
        reply,
    )
}

/// The one lane of a standalone server, for light batches.
const LIGHT: LaneId = (None, Kind::Light);

/// Keys of the batches handed out, to tell them apart.
fn sizes(batches: &[Waiting<Keys>]) -> Vec<usize> {
    batches.iter().map(|w| w.batch.0).collect()
}

#[test]
fn a_free_lane_sends_at_once_and_a_busy_one_queues() {
    let lanes = Lanes::<Keys>::default();
    let mut held = Vec::new();
    let (w, r) = batch(1);
    held.push(r);
    let sent = lanes.submit(LIGHT, w).expect("a free lane sends at once");
    assert_eq!(sizes(&sent), [1], "alone, with nothing waiting");
    // A call in flight: the next ones wait for it, until enough wait to fill a
    // second call; another lane does not wait.
    for n in 2..=SECOND_CALL_AT {
        let (w, r) = batch(n);
        held.push(r);
        assert!(lanes.submit(LIGHT, w).is_none(), "{n} waits");
    }
    let other = (Slot::new(42), Kind::Light);
    let (w, r) = batch(99);
    held.push(r);
    assert_eq!(sizes(&lanes.submit(other, w).unwrap()), [99], "apart");
    let (w, r) = batch(SECOND_CALL_AT + 1);
    held.push(r);
    let second = lanes
        .submit(LIGHT, w)
        .expect("enough waiting for a second call");
    assert_eq!(
        sizes(&second),
        (2..=SECOND_CALL_AT + 1).collect::<Vec<_>>(),
        "everything waiting, in order"
    );
    // Both calls in flight (CALLS_PER_LANE): the next ones wait whatever their number.
    for n in [200, 201] {
        let (w, r) = batch(n);
        held.push(r);
        assert!(lanes.submit(LIGHT, w).is_none());
    }
    // A call ends with few waiting and another in flight: they wait for that one.
    assert!(lanes.next(LIGHT).is_none());
    // The last call ends: they go out together.
    assert_eq!(sizes(&lanes.next(LIGHT).unwrap()), [200, 201]);
    // Nothing waits: the ending call frees its place, and the lane is forgotten.
    assert!(lanes.next(LIGHT).is_none());
    assert!(lanes.next(other).is_none());
    assert!(lanes.lanes.lock().is_empty());
}

#[test]
fn a_call_takes_at_most_its_share_and_skips_callers_gone() {
    let lanes = Lanes::<Keys>::default();
    let mut held = Vec::new();
    let (w, r) = batch(1);
    held.push(r);
    lanes.submit(LIGHT, w).unwrap();
    // 100 one-key batches wait (the 16th fills a second call of its 15 and itself);
    // the third one's caller stops waiting.
    let mut second = None;
    for i in 0..100 {
        let (w, r) = batch(1);
        if let Some(sent) = lanes.submit(LIGHT, w) {
            second = Some(sent);
        }
        if i != 2 {
            held.push(r);
        }
    }
    let second = second.expect("a second call");
    assert_eq!(second.len(), SECOND_CALL_AT - 1, "the gone one skipped");
    assert!(second.iter().all(|w| !w.answer.is_closed()));
    let first = lanes.next(LIGHT).unwrap();
    assert_eq!(first.len(), MAX_BATCHES, "capped at {MAX_BATCHES} batches");
    assert_eq!(
        lanes.next(LIGHT).unwrap().len(),
        100 - SECOND_CALL_AT - MAX_BATCHES,
        "the rest"
    );
    // Both calls end.
    assert!(lanes.next(LIGHT).is_none());
    assert!(lanes.next(LIGHT).is_none());
    assert!(lanes.lanes.lock().is_empty());

    // Keys cap a call too, but a batch larger than the cap still goes, alone.
    let (w, r) = batch(1);
    held.push(r);
    lanes.submit(LIGHT, w).unwrap();
    for keys in [MAX_KEYS - 1, 2, MAX_KEYS + 5, 1] {
        let (w, r) = batch(keys);
        held.push(r);
        assert!(lanes.submit(LIGHT, w).is_none());
    }
    assert_eq!(sizes(&lanes.next(LIGHT).unwrap()), [MAX_KEYS - 1]);
    assert_eq!(sizes(&lanes.next(LIGHT).unwrap()), [2]);
    assert_eq!(sizes(&lanes.next(LIGHT).unwrap()), [MAX_KEYS + 5]);
    assert_eq!(sizes(&lanes.next(LIGHT).unwrap()), [1]);
}

#[test]
fn a_heavy_lane_sends_one_batch_per_call_one_call_at_a_time() {
    let lanes = Lanes::<Keys>::default();
    let heavy = (None, Kind::Heavy);
    let mut held = Vec::new();
    let (w, r) = batch(1);
    held.push(r);
    assert_eq!(sizes(&lanes.submit(heavy, w).unwrap()), [1]);
    // One heavy call in flight: the next heavy ones wait, light ones do not.
    for keys in [2, 3] {
        let (w, r) = batch(keys);
        held.push(r);
        assert!(lanes.submit(heavy, w).is_none());
    }
    let (w, r) = batch(9);
    held.push(r);
    assert_eq!(sizes(&lanes.submit(LIGHT, w).unwrap()), [9], "apart");
    // Each ending call takes the next heavy batch alone.
    assert_eq!(sizes(&lanes.next(heavy).unwrap()), [2]);
    assert_eq!(sizes(&lanes.next(heavy).unwrap()), [3]);
    assert!(lanes.next(heavy).is_none());
}

#[test]
fn each_batch_gets_its_part_or_the_calls_failure() {
    let (a, mut ra) = batch(1);
    let (b, mut rb) = batch(1);
    let parts = vec![Value::Int(1), Value::BulkString(b"why".to_vec())];
    answer(vec![a, b], Ok(Value::Array(parts)));
    assert_eq!(ra.try_recv().unwrap().unwrap(), Value::Int(1));
    assert_eq!(
        rb.try_recv().unwrap().unwrap(),
        Value::BulkString(b"why".to_vec())
    );

    // A reply that is not one part per batch fails every batch of the call.
    let (a, mut ra) = batch(1);
    let (b, mut rb) = batch(1);
    answer(vec![a, b], Ok(Value::Array(vec![Value::Int(1)])));
    for r in [&mut ra, &mut rb] {
        let err = r.try_recv().unwrap().unwrap_err().error();
        assert!(err.to_string().contains("2 batch replies"), "{err}");
        assert!(!err.is_transient());
    }
    let (a, mut ra) = batch(1);
    answer(vec![a], Err(Failure::Timeout(Duration::from_millis(10))));
    assert!(ra.try_recv().unwrap().unwrap_err().error().is_transient());
}
