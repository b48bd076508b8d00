//! gpufill's probe over NVML (work in progress; see the final crate docs).

#![forbid(unsafe_code)]

mod error;
mod own;

pub use error::{ProbeError, classify};
pub use own::{OwnProcess, identify_own};
