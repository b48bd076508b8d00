//! gpufill's probe over NVML (work in progress; see the final crate docs).

#![forbid(unsafe_code)]

mod error;

pub use error::{ProbeError, classify};
