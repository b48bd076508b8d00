//! [`UsageError`]: the error that makes the binary exit with status 2.

/// A usage or config error: the binary exits with status 2.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct UsageError(#[from] pub anyhow::Error);
