//! [`CudaError`] and the one place where driver results are classified.

use cudarc::driver::DriverError;
use cudarc::driver::sys::{CUresult, cudaError_enum};
use gpufill_core::{DeviceError, ErrorKind};

/// An error from the CUDA driver or from this crate's use of it.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CudaError {
    /// No CUDA driver library on this machine.
    #[error("libcuda.so.1 not found: install the NVIDIA driver (this machine has no CUDA driver)")]
    NoDriver,
    /// A driver call failed.
    #[error("{call} failed: {name}: {description}")]
    Driver {
        /// The driver function, e.g. `cuLaunchKernel`.
        call: &'static str,
        /// The driver's result code.
        code: CUresult,
        /// The code's name, e.g. `CUDA_ERROR_LAUNCH_FAILED`.
        name: String,
        /// The driver's description of the code.
        description: String,
    },
    /// The requested ordinal is not among the devices the driver sees.
    #[error("no CUDA device {ordinal}: the driver sees {count}")]
    NoSuchDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices the driver sees.
        count: usize,
    },
    /// [`crate::LauncherSettings`] out of range.
    #[error("invalid launcher settings: {0}")]
    Settings(String),
    /// The one-in-flight launcher thread could not start, or panicked. Transient: the
    /// next call starts another.
    #[error("{0}")]
    Thread(String),
}

impl CudaError {
    /// Wraps a failed driver call. Call this only after the driver library has loaded
    /// (it asks the driver for the code's name and description, as `DriverError` would).
    pub(crate) fn driver(call: &'static str, err: DriverError) -> Self {
        let text = |s: Result<&std::ffi::CStr, DriverError>| {
            s.map(|c| c.to_string_lossy().into_owned()).ok()
        };
        CudaError::Driver {
            call,
            code: err.0,
            name: text(err.error_name()).unwrap_or_else(|| format!("{:?}", err.0)),
            description: text(err.error_string()).unwrap_or_else(|| "no description".into()),
        }
    }

    /// The driver's result code, if this came from a driver call.
    pub fn code(&self) -> Option<CUresult> {
        match self {
            CudaError::Driver { code, .. } => Some(*code),
            _ => None,
        }
    }
}

impl DeviceError for CudaError {
    fn kind(&self) -> ErrorKind {
        match self {
            CudaError::NoDriver | CudaError::NoSuchDevice { .. } | CudaError::Settings(_) => {
                ErrorKind::Unsupported
            }
            CudaError::Driver { code, .. } => classify(*code),
            CudaError::Thread(_) => ErrorKind::Transient,
        }
    }
}

/// How the loop should treat a driver result.
///
/// - `Unsupported`: this machine or device cannot run us at all (no device, a driver
///   or toolkit mismatch, a PTX the driver cannot JIT, a bad argument).
/// - `Lost`: the context is broken for good ("sticky" errors after which every call
///   fails, per the driver API docs of `cudaError_enum`), or the device went away.
/// - `Transient`: resources that may free up, and anything unknown.
pub fn classify(code: CUresult) -> ErrorKind {
    use cudaError_enum::*;
    match code {
        CUDA_ERROR_NO_DEVICE
        | CUDA_ERROR_INVALID_DEVICE
        | CUDA_ERROR_DEVICE_NOT_LICENSED
        | CUDA_ERROR_STUB_LIBRARY
        | CUDA_ERROR_NOT_SUPPORTED
        | CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
        | CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE
        | CUDA_ERROR_INVALID_IMAGE
        | CUDA_ERROR_INVALID_PTX
        | CUDA_ERROR_UNSUPPORTED_PTX_VERSION
        | CUDA_ERROR_NO_BINARY_FOR_GPU
        | CUDA_ERROR_JIT_COMPILER_NOT_FOUND
        | CUDA_ERROR_JIT_COMPILATION_DISABLED
        | CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND
        | CUDA_ERROR_SHARED_OBJECT_INIT_FAILED
        | CUDA_ERROR_INVALID_VALUE
        | CUDA_ERROR_UNSUPPORTED_LIMIT
        | CUDA_ERROR_NOT_FOUND => ErrorKind::Unsupported,

        CUDA_ERROR_DEINITIALIZED
        | CUDA_ERROR_NOT_INITIALIZED
        | CUDA_ERROR_DEVICE_UNAVAILABLE
        | CUDA_ERROR_NOT_PERMITTED
        | CUDA_ERROR_SYSTEM_NOT_READY
        | CUDA_ERROR_ECC_UNCORRECTABLE
        | CUDA_ERROR_NVLINK_UNCORRECTABLE
        | CUDA_ERROR_CONTAINED
        | CUDA_ERROR_EXTERNAL_DEVICE
        | CUDA_ERROR_ILLEGAL_ADDRESS
        | CUDA_ERROR_LAUNCH_FAILED
        | CUDA_ERROR_LAUNCH_TIMEOUT
        | CUDA_ERROR_HARDWARE_STACK_ERROR
        | CUDA_ERROR_ILLEGAL_INSTRUCTION
        | CUDA_ERROR_MISALIGNED_ADDRESS
        | CUDA_ERROR_INVALID_ADDRESS_SPACE
        | CUDA_ERROR_INVALID_PC
        | CUDA_ERROR_ASSERT
        | CUDA_ERROR_TENSOR_MEMORY_LEAK
        | CUDA_ERROR_CONTEXT_IS_DESTROYED
        | CUDA_ERROR_INVALID_CONTEXT
        | CUDA_ERROR_MPS_CLIENT_TERMINATED => ErrorKind::Lost,

        // Out of memory or launch resources, not ready, MPS server busy, timeouts,
        // CUDA_ERROR_UNKNOWN and codes newer than these bindings: worth another try.
        _ => ErrorKind::Transient,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_driver_is_unsupported_and_says_how_to_fix_it() {
        let err = CudaError::NoDriver;
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert!(err.to_string().contains("libcuda.so.1 not found"));
        assert!(err.to_string().contains("install the NVIDIA driver"));
    }

    #[test]
    fn no_device_and_invalid_device_are_unsupported() {
        assert_eq!(
            classify(CUresult::CUDA_ERROR_NO_DEVICE),
            ErrorKind::Unsupported
        );
        assert_eq!(
            classify(CUresult::CUDA_ERROR_INVALID_DEVICE),
            ErrorKind::Unsupported
        );
        assert_eq!(
            classify(CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION),
            ErrorKind::Unsupported
        );
        let err = CudaError::NoSuchDevice {
            ordinal: 3,
            count: 1,
        };
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert_eq!(err.to_string(), "no CUDA device 3: the driver sees 1");
    }

    #[test]
    fn sticky_context_errors_mean_the_device_is_lost() {
        for code in [
            CUresult::CUDA_ERROR_LAUNCH_FAILED,
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
            CUresult::CUDA_ERROR_ECC_UNCORRECTABLE,
            CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE,
            CUresult::CUDA_ERROR_DEINITIALIZED,
            CUresult::CUDA_ERROR_NOT_PERMITTED,
            CUresult::CUDA_ERROR_SYSTEM_NOT_READY,
        ] {
            assert_eq!(classify(code), ErrorKind::Lost, "{code:?}");
        }
    }

    #[test]
    fn resource_shortages_and_unknown_errors_are_transient() {
        for code in [
            CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
            CUresult::CUDA_ERROR_NOT_READY,
            CUresult::CUDA_ERROR_MPS_SERVER_NOT_READY,
            CUresult::CUDA_ERROR_UNKNOWN,
        ] {
            assert_eq!(classify(code), ErrorKind::Transient, "{code:?}");
        }
    }

    #[test]
    fn driver_errors_carry_their_code_and_classify_through_it() {
        let err = CudaError::Driver {
            call: "cuLaunchKernel",
            code: CUresult::CUDA_ERROR_LAUNCH_FAILED,
            name: "CUDA_ERROR_LAUNCH_FAILED".into(),
            description: "unspecified launch failure".into(),
        };
        assert_eq!(err.kind(), ErrorKind::Lost);
        assert_eq!(err.code(), Some(CUresult::CUDA_ERROR_LAUNCH_FAILED));
        assert_eq!(
            err.to_string(),
            "cuLaunchKernel failed: CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure"
        );
    }
}
