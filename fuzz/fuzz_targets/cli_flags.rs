//! The flag parser on arbitrary arguments (the input split on NUL and newline bytes):
//! parsed flags or a usage error, never a panic.
#![no_main]

use clap::Parser;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let args = std::iter::once("gpufill").chain(text.split(['\0', '\n']));
    let _ = gpufill_cli::cli::Cli::try_parse_from(args);
});
