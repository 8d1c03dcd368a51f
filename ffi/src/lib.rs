//! tern's C ABI — the only crate with `extern "C"`. The header is `include/tern.h`, generated from
//! this crate by cbindgen (`tests/c/run.sh` regenerates it and fails on a difference).
//!
//! # Conventions (rustls-ffi's, with SQLite's last-error message)
//!
//! 1. **Opaque handles** — `tern_model`, `tern_session` — made by a `_load`/`_new` function and
//!    released by the matching `_free`, which accepts NULL.
//! 2. **Every fallible call returns a [`tern_status`]**, whose numbers are stable: new codes are
//!    only ever appended. `TERN_OK` is 0.
//! 3. **Outputs go through out-parameters, written only on success.** On failure they are left as
//!    they were.
//! 4. **NULL where a pointer is required is `TERN_NULL_ARGUMENT`**, never a crash. Text arguments
//!    must be NUL-terminated UTF-8 (`TERN_INVALID_ARGUMENT` otherwise).
//! 5. **A panic boundary on every entry point**: a panic inside tern becomes `TERN_INTERNAL` (void
//!    functions swallow it); nothing unwinds into the caller.
//! 6. **A thread-local last-error message**: every call that returns a status first clears it and,
//!    on failure, sets it; [`tern_last_error`] reads it (never NULL; "" after a success).
//! 7. **Options structs start with `struct_size`**, set by `tern_*_default()`. The library reads at
//!    most the bytes it knows and rejects a `struct_size` below its first published version, so a
//!    struct can grow at the end without breaking older callers.
//! 8. **Threads** (each function's doc says its own rule, under "Thread-safety"): a `tern_model` may be shared by any number of threads and sessions. A
//!    `tern_session` runs one call at a time (a second concurrent call on the same session gets
//!    `TERN_BUSY`), except [`tern_cancel`], which is safe from any thread at any time. `_free` must
//!    not race other calls on the same handle.
//!
//! Logging goes through the `log` crate; `tern_set_log_callback` (`log.rs`) routes it to the
//! app's C function with a level; on Android the JNI layer (feature `jni`) also sends it to
//! logcat with `android_logger`.

use std::ffi::c_char;
use std::sync::atomic::{AtomicUsize, Ordering};

mod chat;
mod info;
mod log;
mod model;
mod options;
mod plan;
mod session;
mod session_ext;
mod status;

#[cfg(feature = "jni")]
mod jni;

pub use chat::{tern_chat_apply, tern_chat_apply_template, tern_chat_message, tern_string_free};
pub use info::{
    tern_detokenize, tern_model_get_info, tern_model_get_string, tern_model_info, tern_tokenize,
    tern_tokens_free, TERN_MODEL_STR_ARCHITECTURE, TERN_MODEL_STR_CHAT_TEMPLATE,
    TERN_MODEL_STR_DEVICE, TERN_MODEL_STR_NAME,
};
pub use log::{
    tern_log_callback, tern_set_log_callback, TERN_LOG_DEBUG, TERN_LOG_ERROR, TERN_LOG_INFO,
    TERN_LOG_OFF, TERN_LOG_TRACE, TERN_LOG_WARN,
};
pub use model::{tern_model, tern_model_free, tern_model_load, tern_model_load_ex};
pub use options::{
    tern_generation_stats, tern_load_options, tern_load_options_default, tern_model_options,
    tern_model_options_default, tern_progress_callback, tern_sampling, tern_sampling_default,
    tern_session_options, tern_session_options_default, tern_session_report, TERN_DEVICE_AUTO,
    TERN_DEVICE_CPU, TERN_DEVICE_GPU, TERN_STOP_CALLBACK, TERN_STOP_CONTEXT, TERN_STOP_MAX_TOKENS,
    TERN_STOP_NONE, TERN_STOP_STRING, TERN_STOP_TOKEN,
};
pub use options::{
    TERN_KV_A3, TERN_KV_A4, TERN_KV_DEFAULT, TERN_KV_F16, TERN_KV_F32, TERN_KV_Q2, TERN_KV_Q2R,
    TERN_KV_Q3, TERN_KV_Q3R, TERN_KV_Q4, TERN_KV_Q4R, TERN_KV_Q8, TERN_MINICACHE_CUSTOM,
    TERN_MINICACHE_OFF, TERN_MINICACHE_ON,
};
pub use plan::{
    tern_model_plan, tern_plan, tern_plan_config, TERN_PLAN_MAX_CONFIGS, TERN_PLAN_NONE,
};
pub use session::{
    tern_cancel, tern_debug_lose_device, tern_generate, tern_piece_callback, tern_score,
    tern_session, tern_session_free, tern_session_get_report, tern_session_last_stats,
    tern_session_new, tern_session_reset,
};
pub use session_ext::{
    tern_bytes_free, tern_generate_ex, tern_generate_options, tern_generate_options_default,
    tern_session_restore, tern_session_restore_file, tern_session_save, tern_session_save_file,
};
pub use status::{tern_last_error, tern_status, tern_status_name};

/// Version of the C ABI. Bumped on any incompatible change; the Swift and Kotlin wrappers check it
/// when the library loads.
pub const TERN_ABI_VERSION: u32 = 1;

/// The C ABI version this library implements (`TERN_ABI_VERSION` of the header it was built with).
/// Thread-safety: any thread.
#[no_mangle]
pub extern "C" fn tern_abi_version() -> u32 {
    TERN_ABI_VERSION
}

/// tern's version as a static NUL-terminated UTF-8 string (never freed). Thread-safety: any thread.
#[no_mangle]
pub extern "C" fn tern_version() -> *const c_char {
    static VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    VERSION.as_ptr().cast()
}

/// Handles (models + sessions) made and not yet freed, in this process.
static LIVE_HANDLES: AtomicUsize = AtomicUsize::new(0);

pub(crate) fn handle_made() {
    LIVE_HANDLES.fetch_add(1, Ordering::SeqCst);
}

pub(crate) fn handle_freed() {
    LIVE_HANDLES.fetch_sub(1, Ordering::SeqCst);
}

/// Number of `tern_model` and `tern_session` handles made and not yet freed in this process: a leak
/// check for tests and wrappers. A model handle counts as freed when `tern_model_free` is called,
/// although its weights stay in memory until the last session made from it is freed.
/// Thread-safety: any thread.
#[no_mangle]
pub extern "C" fn tern_debug_live_handles() -> usize {
    LIVE_HANDLES.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests;
