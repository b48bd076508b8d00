//! The metrics endpoint's request-head parser on arbitrary bytes: `feed` never panics,
//! and gives the same answer fed all at once as fed a byte at a time.
#![no_main]

use gpufill_cli::metrics::server::http::{Feed, HeadParser};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let data = &data[..data.len().min(16 * 1024)];
    let whole = HeadParser::default().feed(data);
    let mut parser = HeadParser::default();
    let mut bytewise = Feed::NeedMore;
    for &b in data {
        bytewise = parser.feed(&[b]);
    }
    assert_eq!(whole, bytewise);
});
