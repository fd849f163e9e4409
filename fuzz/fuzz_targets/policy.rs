//! The policy parser on arbitrary text: an error or a domain, never a panic; a domain
//! that parses also assembles into a policy set and matches a descriptor.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(domain) = spillway_policy::parse("fuzz.yaml", text) else {
        return;
    };
    let name = domain.name().to_string();
    if let Ok(set) = spillway_policy::assemble([domain]) {
        if let Some(d) = set.domain(&name) {
            let _ = d.resolve(&[("key", "value")]);
        }
    }
});
