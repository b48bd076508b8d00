//! The metrics endpoint's request-head parsing on arbitrary bytes: the scanner (where a
//! head ends), the checker (refusing garbage as it arrives) and the parser never panic
//! and never disagree (`gpufill_cli::metrics::server::check_head_parsers`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    gpufill_cli::metrics::server::check_head_parsers(data);
});
