//! The driver and its devices, queried without creating a context.

use std::sync::OnceLock;

use cudarc::driver::{result, sys};

use crate::error::CudaError;

/// Whether the CUDA driver library (`libcuda.so.1`) can be loaded. Never panics.
///
/// Every other call of this crate checks this first: cudarc panics, instead of
/// returning an error, when it has to load a library that is not there.
pub fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: `is_culib_present` only tries to open the library by its usual names and
    // closes it again; it runs the library's initialisers, as any dlopen does, and
    // touches no cudarc state.
    *PRESENT.get_or_init(|| unsafe { cudarc::driver::sys::is_culib_present() })
}

/// Loads the driver and calls `cuInit`, or says why it cannot.
pub(crate) fn init() -> Result<(), CudaError> {
    if !driver_present() {
        return Err(CudaError::NoDriver);
    }
    result::init().map_err(|e| CudaError::driver("cuInit", e))
}

/// The CUDA version the driver supports, as `(major, minor)`, e.g. `(13, 0)`.
///
/// # Errors
/// [`CudaError::NoDriver`] without a driver, or the failed driver call.
pub fn driver_version() -> Result<(u32, u32), CudaError> {
    init()?;
    let mut version: std::ffi::c_int = 0;
    // SAFETY: `version` is a valid, writable int for the driver to fill in.
    unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .map_err(|e| CudaError::driver("cuDriverGetVersion", e))?;
    let version = u32::try_from(version).unwrap_or(0);
    Ok((version / 1000, version % 1000 / 10))
}

/// A CUDA device as the driver lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaDevice {
    /// The CUDA ordinal (after `CUDA_VISIBLE_DEVICES`); not necessarily NVML's index.
    pub ordinal: usize,
    /// The product name, e.g. `NVIDIA H200`.
    pub name: String,
    /// The UUID as NVML prints it (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`): the key to
    /// match CUDA devices with NVML devices, whose indices may differ.
    pub uuid: String,
    /// Streaming multiprocessors: the widest useful kernel, in one-warp blocks per SM.
    pub sm_count: u32,
    /// Blocks one SM can hold at once (`CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR`,
    /// 32 on Hopper); 0 where the driver does not say. A grid wider than
    /// `sm_count x max_blocks_per_sm` runs in waves, each as long as the kernel.
    pub max_blocks_per_sm: u32,
    /// Compute capability `(major, minor)`, e.g. `(9, 0)` for Hopper.
    pub compute_capability: (u32, u32),
    /// Device memory in bytes.
    pub total_memory_bytes: u64,
}

/// The devices the driver sees, in ordinal order. Creates no context, so it costs no
/// device memory and does not show up in `nvidia-smi`.
///
/// # Errors
/// [`CudaError::NoDriver`] without a driver; a driver error otherwise
/// (`CUDA_ERROR_NO_DEVICE` when the driver is there but sees no GPU).
pub fn devices() -> Result<Vec<CudaDevice>, CudaError> {
    (0..device_count()?).map(device).collect()
}

/// How many devices the driver sees.
pub(crate) fn device_count() -> Result<usize, CudaError> {
    init()?;
    let count =
        result::device::get_count().map_err(|e| CudaError::driver("cuDeviceGetCount", e))?;
    Ok(usize::try_from(count).unwrap_or(0))
}

/// The handle of device `ordinal`, checked against the device count for a clear message.
pub(crate) fn handle(ordinal: usize) -> Result<sys::CUdevice, CudaError> {
    let count = device_count()?;
    if ordinal >= count {
        return Err(CudaError::NoSuchDevice { ordinal, count });
    }
    let ordinal = i32::try_from(ordinal).map_err(|_| CudaError::NoSuchDevice { ordinal, count })?;
    result::device::get(ordinal).map_err(|e| CudaError::driver("cuDeviceGet", e))
}

fn device(ordinal: usize) -> Result<CudaDevice, CudaError> {
    let dev = handle(ordinal)?;
    let attribute = |attr, call| {
        // SAFETY: `dev` came from cuDeviceGet and devices are never invalidated.
        unsafe { result::device::get_attribute(dev, attr) }
            .map(|v| u32::try_from(v).unwrap_or(0))
            .map_err(|e| CudaError::driver(call, e))
    };
    use sys::CUdevice_attribute_enum::*;
    let uuid =
        result::device::get_uuid(dev).map_err(|e| CudaError::driver("cuDeviceGetUuid", e))?;
    Ok(CudaDevice {
        ordinal,
        name: result::device::get_name(dev).map_err(|e| CudaError::driver("cuDeviceGetName", e))?,
        uuid: format_uuid(uuid.bytes.map(|b| b as u8)),
        sm_count: attribute(
            CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            "cuDeviceGetAttribute",
        )?,
        // An old driver without the attribute: unknown, so no width is refused for it.
        max_blocks_per_sm: attribute(
            CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR,
            "cuDeviceGetAttribute",
        )
        .unwrap_or(0),
        compute_capability: (
            attribute(
                CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                "cuDeviceGetAttribute",
            )?,
            attribute(
                CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                "cuDeviceGetAttribute",
            )?,
        ),
        // SAFETY: as above.
        total_memory_bytes: unsafe { result::device::total_mem(dev) }
            .map(|b| b as u64)
            .map_err(|e| CudaError::driver("cuDeviceTotalMem", e))?,
    })
}

/// A device UUID in NVML's notation: `GPU-` and the 16 bytes as lowercase hex in groups
/// of 8-4-4-4-12 digits.
pub fn format_uuid(bytes: [u8; 16]) -> String {
    let mut out = String::with_capacity(40);
    out.push_str("GPU-");
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        out.push_str(&format!("{b:02x}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_formatted_as_nvml_prints_them() {
        let bytes = [
            0x5a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f, 0x60, 0x71, 0x82, 0x93, 0xa4, 0xb5, 0xc6, 0xd7,
            0xe8, 0xf9,
        ];
        assert_eq!(
            format_uuid(bytes),
            "GPU-5a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"
        );
        assert_eq!(
            format_uuid([0; 16]),
            "GPU-00000000-0000-0000-0000-000000000000"
        );
    }

    #[test]
    fn without_a_driver_queries_fail_cleanly_instead_of_panicking() {
        let name = "device::tests::without_a_driver_queries_fail_cleanly_instead_of_panicking";
        crate::no_driver::without_a_driver(name, || {
            assert_eq!(devices(), Err(CudaError::NoDriver));
            assert_eq!(driver_version(), Err(CudaError::NoDriver));
        });
    }
}
