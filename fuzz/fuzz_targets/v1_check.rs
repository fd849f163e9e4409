//! `spillway_server::decode::v1_check` on arbitrary bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    spillway_fuzz::check_decoded(spillway_server::decode::v1_check(data));
});
