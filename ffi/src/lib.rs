//! tern's C ABI — the only crate with `extern "C"`.
//!
//! Conventions (see `ARCHITECTURE.md`): opaque handles, a `tern_status` return on every fallible
//! call, outputs through out-parameters written only on success, NULL arguments reported as a
//! status, a panic boundary on every entry point. This first piece exposes the versions; models,
//! sessions, generation and scoring follow with the C ABI work.

use std::ffi::c_char;

/// Version of the C ABI. Bumped on any incompatible change; the Swift and Kotlin wrappers check it
/// when the library loads.
pub const TERN_ABI_VERSION: u32 = 1;

/// The C ABI version this library implements.
#[no_mangle]
pub extern "C" fn tern_abi_version() -> u32 {
    TERN_ABI_VERSION
}

/// tern's version as a static NUL-terminated UTF-8 string (never freed).
#[no_mangle]
pub extern "C" fn tern_version() -> *const c_char {
    static VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    VERSION.as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(tern_abi_version(), TERN_ABI_VERSION);
        // SAFETY: tern_version returns a pointer to a static NUL-terminated string.
        let v = unsafe { std::ffi::CStr::from_ptr(tern_version()) };
        assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }
}
