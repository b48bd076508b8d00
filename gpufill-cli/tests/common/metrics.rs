//! Reading a running `gpufill`'s metrics endpoint.

use std::io::{Read, Write};
use std::net::TcpStream;

/// The labels of the simulated GPU's series, with `NODE_NAME` as [`super::bin`] sets it.
pub const LABELS: &str = "gpu=\"0\",UUID=\"GPU-00000000-0000-0000-0000-000000000000\",\
                          model_name=\"simulated GPU\",Hostname=\"test-node\"";

/// One `GET /metrics` on 127.0.0.1:`port`: the whole answer, checked to be a 200.
pub fn scrape(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
    out
}

/// The value of `series` (its name with labels, as written) in the text of a scrape.
pub fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The target in force on the simulated GPU (NaN until the first tick is published).
pub fn target(text: &str) -> Option<f64> {
    value(text, &format!("gpufill_target_percent{{{LABELS}}}"))
}
