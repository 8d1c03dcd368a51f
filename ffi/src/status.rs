//! Status codes, the thread-local last-error message, the panic boundary and the argument checks
//! shared by every entry point.

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use tern_engine::{EngineError, ErrorKind};

/// What a call did. The numbers are stable: codes are only ever appended.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum tern_status {
    /// Success.
    TERN_OK = 0,
    /// An argument is out of range or malformed (bad option value, text that is not UTF-8, an
    /// empty prompt, a token id outside the vocabulary, a `struct_size` that is too small).
    TERN_INVALID_ARGUMENT = 1,
    /// A required pointer argument is NULL.
    TERN_NULL_ARGUMENT = 2,
    /// Reading a file failed (missing, unreadable).
    TERN_IO = 3,
    /// The file is not a valid `.tern` model (bad magic, truncated, checksum mismatch, tensors that
    /// do not fit the hyperparameters, a tokenizer that does not load).
    TERN_CORRUPT_FILE = 4,
    /// Valid but not supported by this build (newer format version or features, an encoding this
    /// backend cannot run, the GPU device while no GPU backend is built).
    TERN_UNSUPPORTED = 5,
    /// Memory for the model or the KV cache could not be allocated.
    TERN_OUT_OF_MEMORY = 6,
    /// The prompt (or scored text) does not fit the session's context.
    TERN_CONTEXT_FULL = 7,
    /// `tern_cancel` stopped the call.
    TERN_CANCELLED = 8,
    /// A bug in tern (a panic was caught at the boundary, or an internal invariant failed).
    TERN_INTERNAL = 9,
    /// Another call is running on this session right now.
    TERN_BUSY = 10,
    /// The model has no tokenizer, so text cannot be used with it.
    TERN_NO_TOKENIZER = 11,
    /// The model has no chat template, or the template failed to render the conversation.
    TERN_TEMPLATE = 12,
    /// The forward pass produced non-finite values.
    TERN_NUMERIC = 13,
    /// The GPU device was lost (driver reset, GPU hang, the OS reclaiming it). The process and
    /// every other handle are fine, but this model and its sessions can no longer run: free them,
    /// load the model again (`TERN_DEVICE_CPU` always works) and make a new session. Appended
    /// (ABI version unchanged); libraries before it reported a lost device as `TERN_INTERNAL`.
    TERN_DEVICE_LOST = 14,
    /// `tern_session_restore`: the state was saved from another model, KV format, context size,
    /// numerics or device; the session is unchanged. Appended (issue 32; ABI version unchanged).
    TERN_STATE_MISMATCH = 15,
}

use tern_status::*;

/// The name of a status code (`"TERN_OK"`, ...) as a static string; `"TERN_UNKNOWN"` for a number
/// that is not a status. Takes an integer so that any value is safe to pass. Thread-safety: any
/// thread.
#[no_mangle]
pub extern "C" fn tern_status_name(status: i32) -> *const c_char {
    let s: &'static str = match status {
        0 => "TERN_OK\0",
        1 => "TERN_INVALID_ARGUMENT\0",
        2 => "TERN_NULL_ARGUMENT\0",
        3 => "TERN_IO\0",
        4 => "TERN_CORRUPT_FILE\0",
        5 => "TERN_UNSUPPORTED\0",
        6 => "TERN_OUT_OF_MEMORY\0",
        7 => "TERN_CONTEXT_FULL\0",
        8 => "TERN_CANCELLED\0",
        9 => "TERN_INTERNAL\0",
        10 => "TERN_BUSY\0",
        11 => "TERN_NO_TOKENIZER\0",
        12 => "TERN_TEMPLATE\0",
        13 => "TERN_NUMERIC\0",
        14 => "TERN_DEVICE_LOST\0",
        15 => "TERN_STATE_MISMATCH\0",
        _ => "TERN_UNKNOWN\0",
    };
    s.as_ptr().cast()
}

/// A failed call: its status and the message for `tern_last_error`.
#[derive(Debug)]
pub(crate) struct Error {
    pub status: tern_status,
    pub message: String,
}

pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(status: tern_status, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(TERN_INVALID_ARGUMENT, message)
    }

    pub fn null(name: &str) -> Self {
        Self::new(TERN_NULL_ARGUMENT, format!("`{name}` is NULL"))
    }
}

impl From<EngineError> for Error {
    fn from(e: EngineError) -> Self {
        let status = engine_status(&e);
        Self::new(status, e.to_string())
    }
}

/// The status of an engine error: a function of its kind ([`EngineError::kind`], the engine's one
/// classification) and of nothing else.
pub(crate) fn engine_status(e: &EngineError) -> tern_status {
    kind_status(e.kind())
}

/// The status of each [`ErrorKind`]. `ErrorKind` is `#[non_exhaustive]`: a kind added to the
/// engine after this table is `TERN_INTERNAL` until it is given a status here (the test
/// `every_error_kind_has_its_own_status` fails until then).
pub(crate) fn kind_status(k: ErrorKind) -> tern_status {
    match k {
        ErrorKind::InvalidArgument | ErrorKind::Tokenizer => TERN_INVALID_ARGUMENT,
        ErrorKind::Io => TERN_IO,
        ErrorKind::BadFile => TERN_CORRUPT_FILE,
        ErrorKind::Unsupported => TERN_UNSUPPORTED,
        ErrorKind::OutOfMemory => TERN_OUT_OF_MEMORY,
        ErrorKind::ContextFull => TERN_CONTEXT_FULL,
        ErrorKind::Cancelled => TERN_CANCELLED,
        ErrorKind::Internal => TERN_INTERNAL,
        ErrorKind::NoTokenizer => TERN_NO_TOKENIZER,
        ErrorKind::Template => TERN_TEMPLATE,
        ErrorKind::Numeric => TERN_NUMERIC,
        ErrorKind::DeviceLost => TERN_DEVICE_LOST,
        ErrorKind::StateMismatch => TERN_STATE_MISMATCH,
        _ => TERN_INTERNAL,
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    // A NUL inside the message would cut it short: show it escaped.
    let c = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|e| {
        if let Ok(mut e) = e.try_borrow_mut() {
            *e = c;
        }
    });
}

fn clear_last_error() {
    let _ = LAST_ERROR.try_with(|e| {
        if let Ok(mut e) = e.try_borrow_mut() {
            if !e.as_bytes().is_empty() {
                *e = CString::default();
            }
        }
    });
}

/// The message of the last failed call on this thread, as NUL-terminated UTF-8; `""` when the
/// last status-returning call on this thread succeeded. Never NULL. The pointer stays valid until
/// the next tern call on this thread; copy the text to keep it. Thread-safety: any thread; each
/// thread has its own last error.
#[no_mangle]
pub extern "C" fn tern_last_error() -> *const c_char {
    static EMPTY: &str = "\0";
    catch_unwind(|| {
        LAST_ERROR
            .try_with(|e| match e.try_borrow() {
                // The CString lives in the thread-local until it is replaced by a later call.
                Ok(s) => s.as_ptr(),
                Err(_) => EMPTY.as_ptr().cast(),
            })
            .unwrap_or(EMPTY.as_ptr().cast())
    })
    .unwrap_or(EMPTY.as_ptr().cast())
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

/// Run one entry point's body: clear the last error, catch panics, turn an `Err` into its status
/// and message.
pub(crate) fn boundary(name: &str, f: impl FnOnce() -> Result<()>) -> tern_status {
    clear_last_error();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => TERN_OK,
        Ok(Err(e)) => {
            log::debug!("{name}: {:?}: {}", e.status, e.message);
            set_last_error(&format!("{name}: {}", e.message));
            e.status
        }
        Err(p) => {
            let msg = format!(
                "{name}: internal error (a bug in tern, please report it): {}",
                panic_message(p.as_ref())
            );
            log::error!("{msg}");
            set_last_error(&msg);
            TERN_INTERNAL
        }
    }
}

/// Run a void entry point's body, swallowing a panic (logged).
pub(crate) fn boundary_void(name: &str, f: impl FnOnce()) {
    if let Err(p) = catch_unwind(AssertUnwindSafe(f)) {
        log::error!(
            "{name}: internal error (a bug in tern, please report it): {}",
            panic_message(p.as_ref())
        );
    }
}

/// A required NUL-terminated UTF-8 string argument.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn arg_str<'a>(p: *const c_char, name: &str) -> Result<&'a str> {
    if p.is_null() {
        return Err(Error::null(name));
    }
    // SAFETY: non-NULL and NUL-terminated per this function's contract.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str()
        .map_err(|e| Error::invalid(format!("`{name}` is not valid UTF-8 ({e})")))
}

/// A required handle argument.
///
/// # Safety
/// `p` is NULL or a live handle of type `T` made by this library.
pub(crate) unsafe fn arg_ref<'a, T>(p: *const T, name: &str) -> Result<&'a T> {
    // SAFETY: per this function's contract, a non-NULL `p` points to a live `T`.
    unsafe { p.as_ref() }.ok_or_else(|| Error::null(name))
}

/// A required out-parameter.
pub(crate) fn arg_out<T>(p: *mut T, name: &str) -> Result<*mut T> {
    if p.is_null() {
        Err(Error::null(name))
    } else {
        Ok(p)
    }
}

#[cfg(test)]
mod kind_tests {
    use super::*;

    /// Every kind the engine has is given a status of its own: only `Internal` is
    /// `TERN_INTERNAL`, and two kinds share a status only where the C ABI has always folded them
    /// (a tokenizer failure is an invalid argument to the call that tokenized).
    #[test]
    fn every_error_kind_has_its_own_status() {
        let mut seen: Vec<(tern_status, ErrorKind)> = Vec::new();
        for k in ErrorKind::ALL {
            let st = kind_status(k);
            assert_eq!(
                st == TERN_INTERNAL,
                k == ErrorKind::Internal,
                "{k:?} → {st:?}"
            );
            assert_ne!(st, TERN_OK, "{k:?}");
            for &(other_st, other) in &seen {
                if other_st == st {
                    let pair = [other, k];
                    assert!(
                        pair == [ErrorKind::InvalidArgument, ErrorKind::Tokenizer],
                        "{other:?} and {k:?} share {st:?}"
                    );
                }
            }
            seen.push((st, k));
        }
        // The statuses only the C ABI makes (no engine kind is them).
        for st in [TERN_NULL_ARGUMENT, TERN_BUSY] {
            assert!(seen.iter().all(|&(s, _)| s != st), "{st:?}");
        }
    }

    /// A verb the backend lacks is `TERN_UNSUPPORTED`.
    #[test]
    fn unsupported_verb_is_tern_unsupported() {
        let e = EngineError::Unsupported {
            verb: tern_engine::Verb::Profile,
            backend: tern_engine::BackendKind::Cpu,
        };
        assert_eq!(engine_status(&e), TERN_UNSUPPORTED);
        assert!(e.to_string().contains("CPU"), "{e}");
    }
}
