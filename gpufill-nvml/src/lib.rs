//! gpufill's probe over NVML (work in progress; see the final crate docs).

#![forbid(unsafe_code)]

mod error;
mod own;
#[allow(dead_code)] // used by the probe, next commit
mod schedule;

pub use error::{ProbeError, classify};
pub use own::{OwnProcess, identify_own};
