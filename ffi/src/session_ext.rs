//! Session calls added after the first version: generation with stop strings and stop tokens
//! (`tern_generate_ex`), saving and restoring a session (`tern_session_save*`,
//! `tern_session_restore*`).

use std::ffi::{c_char, c_void};
use std::mem::size_of;
use std::path::Path;

use tern_engine::GenerateOptions;

use crate::options::{read_versioned, tern_sampling, tern_sampling_default, Versioned};
use crate::session::{generate_with, tern_piece_callback, tern_session};
use crate::status::{arg_out, arg_ref, arg_str, boundary, boundary_void, tern_status, Error};

/// How `tern_generate_ex` generates. Initialise with `tern_generate_options_default()`.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct tern_generate_options {
    /// `sizeof(tern_generate_options)`, set by `tern_generate_options_default()`.
    pub struct_size: u32,
    /// As `tern_generate`'s `max_tokens`: at most that many tokens; 0 runs only the prompt; a
    /// negative value (default -1) until an end-of-generation token or a full context.
    pub max_tokens: i32,
    /// `n_stop_strings` NUL-terminated UTF-8 strings (NULL when 0; empty strings are ignored):
    /// generation stops when the text contains one of them, and the text passed to the callback
    /// ends before it (text that could begin a stop string is held back until it is known not
    /// to; stop reason `TERN_STOP_STRING`). The strings are read during the call only.
    pub stop_strings: *const *const c_char,
    pub n_stop_strings: usize,
    /// `n_stop_tokens` token ids (NULL when 0) that end generation like the model's own
    /// end-of-generation tokens (stop reason `TERN_STOP_TOKEN`; the token is not passed on).
    pub stop_tokens: *const u32,
    pub n_stop_tokens: usize,
}

// SAFETY: repr(C), u32 struct_size first; u32/i32/usize fields and raw pointers, for which every
// bit pattern is a valid value (they are checked before use).
unsafe impl Versioned for tern_generate_options {
    const MIN_SIZE: usize = size_of::<Self>();
    const NAME: &'static str = "tern_generate_options";
    fn set_struct_size(&mut self) {
        self.struct_size = size_of::<Self>() as u32;
    }
}

/// Generation options with their defaults (no limit, no stop strings or tokens). Thread-safety:
/// any thread.
#[no_mangle]
pub extern "C" fn tern_generate_options_default() -> tern_generate_options {
    tern_generate_options {
        struct_size: size_of::<tern_generate_options>() as u32,
        max_tokens: -1,
        stop_strings: std::ptr::null(),
        n_stop_strings: 0,
        stop_tokens: std::ptr::null(),
        n_stop_tokens: 0,
    }
}

/// `tern_generate` with options: stop strings and stop tokens (`tern_generate_options`;
/// `opts` NULL = the defaults). Everything else — tokenization, prefix reuse, callbacks,
/// cancellation, statistics, errors — is `tern_generate`'s.
///
/// Thread-safety: one call at a time per session (`TERN_BUSY` otherwise); `tern_cancel` from any
/// thread. Different sessions run in parallel.
///
/// Errors: `tern_generate`'s; `TERN_NULL_ARGUMENT` for a NULL array with a non-zero count or a
/// NULL stop string, `TERN_INVALID_ARGUMENT` for a stop string that is not UTF-8 or a stop
/// token outside the vocabulary.
///
/// # Safety
/// As `tern_generate`; `opts` is NULL or a valid `tern_generate_options` whose arrays hold their
/// counts of elements (the strings NUL-terminated).
#[no_mangle]
pub unsafe extern "C" fn tern_generate_ex(
    session: *mut tern_session,
    prompt: *const c_char,
    params: *const tern_sampling,
    opts: *const tern_generate_options,
    cb: tern_piece_callback,
    user_data: *mut c_void,
) -> tern_status {
    boundary("tern_generate_ex", || {
        // SAFETY: the caller's contract (for all four).
        let s = unsafe { arg_ref(session.cast_const(), "session") }?;
        let prompt = unsafe { arg_str(prompt, "prompt") }?;
        let params = unsafe { read_versioned(params, tern_sampling_default()) }?.to_params()?;
        let o = unsafe { read_versioned(opts, tern_generate_options_default()) }?;
        let mut go = GenerateOptions {
            max_tokens: usize::try_from(o.max_tokens).unwrap_or(usize::MAX),
            ..GenerateOptions::default()
        };
        if o.n_stop_strings > 0 {
            if o.stop_strings.is_null() {
                return Err(Error::null("opts.stop_strings"));
            }
            // SAFETY: `n_stop_strings` pointers (caller's contract).
            let ptrs = unsafe { std::slice::from_raw_parts(o.stop_strings, o.n_stop_strings) };
            for (i, &p) in ptrs.iter().enumerate() {
                // SAFETY: each is NULL or NUL-terminated (caller's contract).
                let st = unsafe { arg_str(p, &format!("opts.stop_strings[{i}]")) }?;
                go.stop_strings.push(st.to_string());
            }
        }
        if o.n_stop_tokens > 0 {
            if o.stop_tokens.is_null() {
                return Err(Error::null("opts.stop_tokens"));
            }
            // SAFETY: `n_stop_tokens` ids (caller's contract).
            let ids = unsafe { std::slice::from_raw_parts(o.stop_tokens, o.n_stop_tokens) };
            go.stop_tokens = ids.to_vec();
        }
        let mut guard = s.lock()?;
        guard
            .session
            .with_dependent_mut(|m, _| m.check_tokens(&go.stop_tokens))?;
        drop(guard);
        // SAFETY: the caller's contract.
        unsafe { generate_with(s, prompt, &params, &go, cb, user_data) }
    })
}

/// Save the session — its tokens and its KV cache, exactly — into `*out_bytes` (`*out_len`
/// bytes; free with `tern_bytes_free`). `tern_session_restore` on a session of the same model
/// file, session options (context, KV format) and device makes it continue exactly as this one
/// would (same greedy tokens). The format is versioned and checksummed
/// (`tern_engine::session` `state.rs`); positions the cache does not hold take no space. On the
/// GPU the cache is read back from the device.
///
/// Thread-safety: one call at a time per session (`TERN_BUSY` while another runs).
///
/// Errors: `TERN_NULL_ARGUMENT`, `TERN_BUSY`, `TERN_OUT_OF_MEMORY`, `TERN_DEVICE_LOST`.
///
/// # Safety
/// `session` is NULL or a live session handle; the outputs are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tern_session_save(
    session: *mut tern_session,
    out_bytes: *mut *mut u8,
    out_len: *mut usize,
) -> tern_status {
    boundary("tern_session_save", || {
        // SAFETY: the caller's contract.
        let s = unsafe { arg_ref(session.cast_const(), "session") }?;
        let out_bytes = arg_out(out_bytes, "out_bytes")?;
        let out_len = arg_out(out_len, "out_len")?;
        let bytes = s
            .lock()?
            .session
            .with_dependent_mut(|_, sess| sess.save_state())?;
        let n = bytes.len();
        let p = Box::into_raw(bytes.into_boxed_slice()).cast::<u8>();
        // SAFETY: non-NULL and writable (caller's contract).
        unsafe {
            out_bytes.write(p);
            out_len.write(n);
        }
        Ok(())
    })
}

/// Free bytes from `tern_session_save` (`len`: the length it gave; NULL is ignored).
/// Thread-safety: any thread, once per buffer.
///
/// # Safety
/// `bytes` is NULL or a pointer from `tern_session_save` with its length `len`, not yet freed.
#[no_mangle]
pub unsafe extern "C" fn tern_bytes_free(bytes: *mut u8, len: usize) {
    boundary_void("tern_bytes_free", || {
        if !bytes.is_null() {
            // SAFETY: made by Box::into_raw of a boxed slice of `len` bytes (caller's contract).
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(bytes, len)) });
        }
    })
}

/// Make `session` hold what `bytes` (from `tern_session_save`) holds: its tokens and KV cache.
/// A `tern_generate` after it reuses that cache as if the saved session itself continued.
///
/// Thread-safety: one call at a time per session (`TERN_BUSY` while another runs).
///
/// Errors (the session is unchanged): `TERN_NULL_ARGUMENT`, `TERN_BUSY`, `TERN_CORRUPT_FILE`
/// (not a session state, truncated, checksum mismatch), `TERN_UNSUPPORTED` (another state
/// format version), `TERN_STATE_MISMATCH` (saved from another model, KV format, context size,
/// numerics or device). After those checks, `TERN_DEVICE_LOST` leaves the session empty.
///
/// # Safety
/// `session` is NULL or a live session handle; `bytes` is NULL or points to `len` readable
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn tern_session_restore(
    session: *mut tern_session,
    bytes: *const u8,
    len: usize,
) -> tern_status {
    boundary("tern_session_restore", || {
        // SAFETY: the caller's contract.
        let s = unsafe { arg_ref(session.cast_const(), "session") }?;
        if bytes.is_null() {
            return Err(Error::null("bytes"));
        }
        // SAFETY: `len` readable bytes (caller's contract).
        let b = unsafe { std::slice::from_raw_parts(bytes, len) };
        s.lock()?
            .session
            .with_dependent_mut(|_, sess| sess.restore_state(b))?;
        Ok(())
    })
}

/// `tern_session_save` into the file `path` (written beside it and renamed: an interrupted save
/// never leaves a partial file at `path`).
///
/// Thread-safety: as `tern_session_save`.
///
/// Errors: `tern_session_save`'s, `TERN_INVALID_ARGUMENT` (path not UTF-8), `TERN_IO`.
///
/// # Safety
/// `session` is NULL or a live session handle; `path` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn tern_session_save_file(
    session: *mut tern_session,
    path: *const c_char,
) -> tern_status {
    boundary("tern_session_save_file", || {
        // SAFETY: the caller's contract.
        let s = unsafe { arg_ref(session.cast_const(), "session") }?;
        let path = unsafe { arg_str(path, "path") }?;
        s.lock()?
            .session
            .with_dependent_mut(|_, sess| sess.save_state_file(Path::new(path)))?;
        Ok(())
    })
}

/// `tern_session_restore` from the file `path`.
///
/// Thread-safety: as `tern_session_restore`.
///
/// Errors: `tern_session_restore`'s, `TERN_INVALID_ARGUMENT` (path not UTF-8), `TERN_IO`.
///
/// # Safety
/// `session` is NULL or a live session handle; `path` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn tern_session_restore_file(
    session: *mut tern_session,
    path: *const c_char,
) -> tern_status {
    boundary("tern_session_restore_file", || {
        // SAFETY: the caller's contract.
        let s = unsafe { arg_ref(session.cast_const(), "session") }?;
        let path = unsafe { arg_str(path, "path") }?;
        s.lock()?
            .session
            .with_dependent_mut(|_, sess| sess.restore_state_file(Path::new(path)))?;
        Ok(())
    })
}
