//! The config parser on arbitrary text: a config or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let _ = gpufill_cli::config::Config::from_toml_str(text, None);
});
