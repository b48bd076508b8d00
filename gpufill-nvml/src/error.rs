//! [`ProbeError`]: NVML's errors, classified once for the loop (see [`classify`]).

use gpufill_core::{DeviceError, ErrorKind};
use nvml_wrapper::error::NvmlError;

/// An error from NVML, with what gpufill was doing when it happened.
///
/// [`DeviceError::kind`] tells the loop whether to retry ([`ErrorKind::Transient`]),
/// give up on a feature or device ([`ErrorKind::Unsupported`]) or stop using the
/// device ([`ErrorKind::Lost`]); [`classify`] holds the whole mapping.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// `libnvidia-ml.so.1` could not be opened: no NVIDIA driver is installed (or it
    /// is not on the loader's path). The message states the cause once: the loader's
    /// own words only where they say more than "not found" (a broken library), and no
    /// `source`, whose chain would repeat them (nvml-wrapper's error and libloading's
    /// each print the same text).
    #[error("{}", library_missing(.0))]
    LibraryMissing(String),
    /// The library is there but the kernel driver is not loaded.
    #[error("NVIDIA driver is not loaded")]
    DriverNotLoaded,
    /// No GPU has this UUID.
    #[error("no GPU with UUID {uuid}")]
    NoSuchGpu {
        /// The UUID asked for.
        uuid: String,
    },
    /// MIG is enabled: NVML cannot measure the utilization of a MIG-enabled GPU
    /// (nvml.h, `nvmlDeviceGetUtilizationRates`).
    #[error("GPU {uuid} has MIG enabled: NVML cannot measure its utilization")]
    MigEnabled {
        /// The GPU's UUID.
        uuid: String,
    },
    /// The GPU has no GPM (GPU Performance Monitoring; Hopper and later).
    #[error("GPU {uuid} does not support GPM (Hopper or later needed)")]
    GpmUnsupported {
        /// The GPU's UUID.
        uuid: String,
    },
    /// An NVML call failed.
    #[error("{call}: {error}")]
    Nvml {
        /// The NVML function (or nvml-wrapper method) that failed.
        call: &'static str,
        /// What NVML said. Shown in this error's message, so not also its `source`.
        error: NvmlError,
    },
}

impl ProbeError {
    /// Wraps an error from the NVML call `call`.
    pub fn nvml(call: &'static str, error: NvmlError) -> Self {
        ProbeError::Nvml { call, error }
    }

    /// Turns an error of `nvml_wrapper::Nvml::init` into the message a user needs.
    pub fn from_init(error: NvmlError) -> Self {
        match error {
            NvmlError::LibloadingError(e) => ProbeError::LibraryMissing(e.to_string()),
            NvmlError::LibraryNotFound => ProbeError::LibraryMissing(String::new()),
            NvmlError::DriverNotLoaded => ProbeError::DriverNotLoaded,
            error => ProbeError::nvml("nvmlInit", error),
        }
    }

    /// The NVML error underneath, if there is one.
    pub fn nvml_error(&self) -> Option<&NvmlError> {
        match self {
            ProbeError::Nvml { error, .. } => Some(error),
            _ => None,
        }
    }
}

impl DeviceError for ProbeError {
    fn kind(&self) -> ErrorKind {
        match self {
            ProbeError::LibraryMissing(_)
            | ProbeError::DriverNotLoaded
            | ProbeError::NoSuchGpu { .. }
            | ProbeError::MigEnabled { .. }
            | ProbeError::GpmUnsupported { .. } => ErrorKind::Unsupported,
            ProbeError::Nvml { error, .. } => classify(error),
        }
    }
}

/// The message of [`ProbeError::LibraryMissing`] for what the loader said.
fn library_missing(loader: &str) -> String {
    if loader.is_empty() || loader.contains("No such file") {
        "libnvidia-ml.so.1 not found: install the NVIDIA driver".to_owned()
    } else {
        format!(
            "libnvidia-ml.so.1 cannot be loaded: {loader} (install or repair the NVIDIA driver)"
        )
    }
}

/// How the loop should treat an NVML error.
///
/// - [`ErrorKind::Unsupported`]: this call can never work here, whatever the retries:
///   no library or driver, a driver too old for a symbol, no permission (containers
///   often refuse GPM and per-process queries), MIG, a blocked or corrupted device.
/// - [`ErrorKind::Lost`]: the device or the session is gone: fell off the bus, needs
///   a reset, the NVML session was shut down under us (`Uninitialized` after init),
///   interrupt trouble or missing power. Stop using it.
/// - [`ErrorKind::Transient`]: anything else (timeouts, `Unknown`, a buffer that grew
///   between the count query and the read, `NotFound` from a sample buffer that ran
///   dry, odd values from the wrapper): retry on the next tick.
pub fn classify(error: &NvmlError) -> ErrorKind {
    use NvmlError as E;
    #[allow(deprecated)] // AlreadyInitialized: matched so that the list is complete
    match error {
        E::LibloadingError(_)
        | E::LibraryNotFound
        | E::FunctionNotFound
        | E::FailedToLoadSymbol(_)
        | E::DriverNotLoaded
        | E::LibRmVersionMismatch
        | E::NotSupported
        | E::NoPermission
        | E::OperatingSystem
        | E::CorruptedInfoROM
        | E::VgpuEccNotSupported => ErrorKind::Unsupported,
        E::GpuLost | E::ResetRequired | E::Uninitialized | E::IrqIssue | E::InsufficientPower => {
            ErrorKind::Lost
        }
        E::Timeout
        | E::Unknown
        | E::InsufficientSize(_)
        | E::NotFound
        | E::InvalidArg
        | E::InUse
        | E::InsufficientMemory
        | E::NoData
        | E::AlreadyInitialized
        | E::UnexpectedVariant(_)
        | E::Utf8Error(_)
        | E::NulError(_)
        | E::StringTooLong { .. }
        | E::IncorrectBits(_)
        | E::SetReleaseFailed
        | E::GetPciInfoFailed
        | E::PciInfoToCFailed => ErrorKind::Transient,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    fn kind_of(error: NvmlError) -> ErrorKind {
        ProbeError::nvml("test", error).kind()
    }

    fn dlopen_error() -> NvmlError {
        let path = OsStr::new("/nonexistent/gpufill/libnvidia-ml.so.1");
        match nvml_wrapper::Nvml::builder().lib_path(path).init() {
            Err(error) => error,
            Ok(_) => panic!("opened a library that does not exist"),
        }
    }

    #[test]
    fn a_missing_library_is_unsupported_and_says_to_install_the_driver() {
        let error = dlopen_error();
        assert!(matches!(error, NvmlError::LibloadingError(_)));
        let error = ProbeError::from_init(error);
        assert_eq!(error.kind(), ErrorKind::Unsupported);
        assert_eq!(
            error.to_string(),
            "libnvidia-ml.so.1 not found: install the NVIDIA driver"
        );
        // Said once: no source whose chain would repeat the loader's words.
        assert!(std::error::Error::source(&error).is_none());
        let broken = ProbeError::LibraryMissing("libnvidia-ml.so.1: wrong ELF class".into());
        assert_eq!(
            broken.to_string(),
            "libnvidia-ml.so.1 cannot be loaded: libnvidia-ml.so.1: wrong ELF class (install or repair the NVIDIA driver)"
        );
    }

    #[test]
    fn an_unloaded_driver_is_unsupported_with_a_plain_message() {
        let error = ProbeError::from_init(NvmlError::DriverNotLoaded);
        assert_eq!(error.kind(), ErrorKind::Unsupported);
        assert_eq!(error.to_string(), "NVIDIA driver is not loaded");
    }

    #[test]
    fn other_init_failures_keep_the_nvml_message() {
        let error = ProbeError::from_init(NvmlError::NoPermission);
        assert_eq!(error.kind(), ErrorKind::Unsupported);
        assert_eq!(
            error.to_string(),
            "nvmlInit: the current user does not have permission to perform this operation"
        );
    }

    #[test]
    fn features_the_device_or_driver_lacks_are_unsupported() {
        for error in [
            NvmlError::NotSupported,
            NvmlError::NoPermission,
            NvmlError::FailedToLoadSymbol("nvmlGpmSampleGet".into()),
            NvmlError::FunctionNotFound,
            NvmlError::LibRmVersionMismatch,
            NvmlError::OperatingSystem,
            NvmlError::LibraryNotFound,
        ] {
            assert_eq!(kind_of(error), ErrorKind::Unsupported);
        }
        assert_eq!(kind_of(dlopen_error()), ErrorKind::Unsupported);
    }

    #[test]
    fn mig_and_gpm_refusals_are_unsupported() {
        let uuid = "GPU-1".to_string();
        let mig = ProbeError::MigEnabled { uuid: uuid.clone() };
        assert_eq!(mig.kind(), ErrorKind::Unsupported);
        assert_eq!(
            mig.to_string(),
            "GPU GPU-1 has MIG enabled: NVML cannot measure its utilization"
        );
        assert_eq!(
            ProbeError::GpmUnsupported { uuid }.kind(),
            ErrorKind::Unsupported
        );
    }

    #[test]
    fn a_gpu_off_the_bus_or_a_closed_session_is_lost() {
        for error in [
            NvmlError::GpuLost,
            NvmlError::ResetRequired,
            NvmlError::Uninitialized,
            NvmlError::IrqIssue,
        ] {
            assert_eq!(kind_of(error), ErrorKind::Lost);
        }
    }

    #[test]
    fn timeouts_and_races_are_transient() {
        for error in [
            NvmlError::Timeout,
            NvmlError::Unknown,
            NvmlError::InsufficientSize(Some(12)),
            NvmlError::InsufficientSize(None),
            NvmlError::NotFound,
            NvmlError::InUse,
            NvmlError::NoData,
            NvmlError::UnexpectedVariant(999),
        ] {
            assert_eq!(kind_of(error), ErrorKind::Transient);
        }
    }

    #[test]
    fn nvml_errors_name_the_call() {
        let error = ProbeError::nvml("nvmlDeviceGetUtilizationRates", NvmlError::GpuLost);
        assert_eq!(
            error.to_string(),
            "nvmlDeviceGetUtilizationRates: device fell off the bus or has otherwise become inacessible"
        );
        assert!(matches!(error.nvml_error(), Some(NvmlError::GpuLost)));
    }
}
