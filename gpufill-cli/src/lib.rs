//! The library half of the `gpufill` binary: the parts of the command line that are
//! worth testing without a GPU.
//!
//! Only this crate knows TOML and flags (see the house style); the core receives
//! already-resolved settings ([`gpufill_core::FillSettings`],
//! [`gpufill_core::YieldSettings`], [`gpufill_core::ControllerKind`]).
//!
//! - [`config`]: the configuration file, its validation, the flags that override it,
//!   and the resolution into core types.

pub mod config;
