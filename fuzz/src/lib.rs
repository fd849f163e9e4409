//! What every request decoder's fuzz target checks of a decoded request: if the service
//! would accept it, it is within every bound the service promises the store.

use spillway_server::{
    CheckError, CheckRequest, MAX_DESCRIPTORS, MAX_DOMAIN_LEN, MAX_ENTRIES, MAX_ENTRY_KEY_LEN,
};

/// Decoding may fail (with a message, never a panic); a request that decodes and
/// validates holds every bound.
pub fn check_decoded(decoded: Result<CheckRequest, CheckError>) {
    let req = match decoded.map(CheckRequest::validate) {
        Ok(Ok(req)) => req,
        Ok(Err(_)) => return,
        Err(e) => {
            assert!(!e.to_string().is_empty(), "an error that says nothing");
            return;
        }
    };
    assert!(!req.domain.is_empty() && req.domain.len() <= MAX_DOMAIN_LEN);
    assert!((1..=MAX_DESCRIPTORS).contains(&req.descriptors.len()));
    assert!(req.hits <= spillway_core::MAX_EXACT);
    for d in &req.descriptors {
        assert!((1..=MAX_ENTRIES).contains(&d.entries.len()));
        // A value has no bound (a long one is kept in keys as its digest); keys do.
        assert!(
            d.entries
                .iter()
                .all(|(k, _)| !k.is_empty() && k.len() <= MAX_ENTRY_KEY_LEN)
        );
    }
}
