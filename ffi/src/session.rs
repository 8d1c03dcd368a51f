//! `tern_session`: one conversation's KV cache on a model; generation, scoring, cancellation.

use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use tern_engine::{GenerateOptions, Model, Session};

use crate::model::tern_model;
use crate::options::{
    read_versioned, stop_reason_code, tern_generation_stats, tern_sampling, tern_sampling_default,
    tern_session_options, tern_session_options_default, tern_session_report, write_versioned,
};
use crate::status::{
    arg_out, arg_ref, arg_str, boundary, boundary_void, tern_status, Error, Result,
};

self_cell::self_cell!(
    /// A session that owns (a share of) its model: the handle can outlive `tern_model_free`.
    pub(crate) struct OwnedSession {
        owner: Arc<Model>,
        #[covariant]
        dependent: Session,
    }
);

pub(crate) struct State {
    pub(crate) session: OwnedSession,
    pub(crate) stats: tern_generation_stats,
    /// The current piece, NUL-terminated, handed to the callback.
    pub(crate) piece: Vec<u8>,
}

/// A session (opaque): a KV cache on a model. Free with `tern_session_free`.
#[allow(non_camel_case_types)]
pub struct tern_session {
    state: Mutex<State>,
    /// Shared with the engine session; set by `tern_cancel` without taking the lock.
    cancel: Arc<AtomicBool>,
}

const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<tern_session>();
};

impl tern_session {
    /// The session's state, or `TERN_BUSY` while another call holds it. After a panic in an
    /// earlier call the cache is cleared and the session is usable again.
    pub(crate) fn lock(&self) -> Result<MutexGuard<'_, State>> {
        match self.state.try_lock() {
            Ok(g) => Ok(g),
            Err(TryLockError::WouldBlock) => Err(Error::new(
                tern_status::TERN_BUSY,
                "another call is running on this session: use one session per thread",
            )),
            Err(TryLockError::Poisoned(p)) => {
                let mut g = p.into_inner();
                g.session.with_dependent_mut(|_, s| s.reset());
                self.state.clear_poison();
                log::warn!("session recovered after an internal error: its cache was cleared");
                Ok(g)
            }
        }
    }
}

/// Called with each piece of generated text: `piece` points to `len` bytes of UTF-8 that end on a
/// character boundary, followed by a NUL (the text itself may contain NUL bytes: use `len`). The
/// pointer is valid only during the call. Return 0 to go on, non-zero to stop.
#[allow(non_camel_case_types)]
pub type tern_piece_callback =
    Option<unsafe extern "C" fn(piece: *const c_char, len: usize, user_data: *mut c_void) -> i32>;

/// Tokenize text the way `tern run -p` does (special tokens parsed, BOS added when the model's
/// tokenizer adds one), except that a BOS the text already starts with is not doubled.
pub(crate) fn tokenize(model: &Model, text: &str) -> Result<Vec<u32>> {
    let mut ids = model.tokenize(text, true)?;
    let tok = model.tokenizer()?;
    if tok.add_bos() && ids.len() >= 2 && tok.bos() == Some(ids[0]) && ids[1] == ids[0] {
        ids.remove(0);
    }
    Ok(ids)
}

/// Fail with `TERN_OUT_OF_MEMORY` when the KV cache of `n_ctx` positions cannot be allocated (the
/// engine's allocation would abort the process instead).
fn check_kv_memory(model: &Model, n_ctx: usize) -> Result<()> {
    let hp = &model.meta().hparams;
    let elems = (hp.n_layer as usize)
        .checked_mul(n_ctx)
        .and_then(|v| v.checked_mul(hp.n_head_kv as usize))
        .and_then(|v| v.checked_mul(hp.head_dim as usize));
    let mib = |e: usize| (e as f64) * 8.0 / (1024.0 * 1024.0);
    let oom = |what: String| {
        Error::new(
            tern_status::TERN_OUT_OF_MEMORY,
            format!("the KV cache for n_ctx = {n_ctx} {what}: lower n_ctx"),
        )
    };
    let elems = elems.ok_or_else(|| oom("overflows the address space".into()))?;
    let (mut k, mut v) = (Vec::<f32>::new(), Vec::<f32>::new());
    if k.try_reserve_exact(elems).is_err() || v.try_reserve_exact(elems).is_err() {
        return Err(oom(format!("({:.0} MiB) cannot be allocated", mib(elems))));
    }
    Ok(())
}

/// Make a session on `model`. `opts` may be NULL (defaults: the model's training context). On
/// success `*out` receives a handle to free with `tern_session_free`. The session keeps the model
/// alive: `tern_model_free` may be called before `tern_session_free`.
///
/// Thread-safety: any thread, concurrently with other calls on the model and its sessions.
///
/// Errors: `TERN_NULL_ARGUMENT`, `TERN_INVALID_ARGUMENT` (bad options), `TERN_OUT_OF_MEMORY`
/// (the KV cache does not fit).
///
/// # Safety
/// `model` is NULL or a live model handle; `opts` is NULL or a valid `tern_session_options`; `out`
/// is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tern_session_new(
    model: *mut tern_model,
    opts: *const tern_session_options,
    out: *mut *mut tern_session,
) -> tern_status {
    boundary("tern_session_new", || {
        // SAFETY: the caller's contract.
        let model = unsafe { arg_ref(model.cast_const(), "model") }?;
        let out = arg_out(out, "out")?;
        // SAFETY: the caller's contract.
        let opts = unsafe { read_versioned(opts, tern_session_options_default()) }?;
        let so = opts.session_options()?;
        check_kv_memory(&model.model, so.resolved_n_ctx(&model.model.meta().hparams))?;
        let session = OwnedSession::try_new(model.model.clone(), |m| Session::with_options(m, &so))
            .map_err(Error::from)?;
        let cancel = session.borrow_dependent().cancel_handle();
        let handle = Box::into_raw(Box::new(tern_session {
            state: Mutex::new(State {
                session,
                stats: tern_generation_stats::default(),
                piece: Vec::new(),
            }),
            cancel,
        }));
        crate::handle_made();
        // SAFETY: `out` is non-NULL and writable (caller's contract).
        unsafe { out.write(handle) };
        Ok(())
    })
}

/// Free a session (NULL is ignored).
///
/// Thread-safety: not while another call on this session runs.
///
/// # Safety
/// `session` is NULL or a handle from `tern_session_new` not yet freed, with no call on it
/// running.
#[no_mangle]
pub unsafe extern "C" fn tern_session_free(session: *mut tern_session) {
    boundary_void("tern_session_free", || {
        if !session.is_null() {
            // SAFETY: made by Box::into_raw in tern_session_new, freed once (caller's contract).
            drop(unsafe { Box::from_raw(session) });
            crate::handle_freed();
        }
    })
}

/// Forget the session's KV cache.
///
/// Thread-safety: one call at a time per session (`TERN_BUSY` otherwise).
///
/// Forget the session's KV cache.
///
/// # Safety
/// `session` is NULL or a live session handle.
#[no_mangle]
pub unsafe extern "C" fn tern_session_reset(session: *mut tern_session) -> tern_status {
    boundary("tern_session_reset", || {
        // SAFETY: the caller's contract.
        let s = unsafe { arg_ref(session.cast_const(), "session") }?;
        s.lock()?.session.with_dependent_mut(|_, sess| sess.reset());
        Ok(())
    })
}

/// Generate text after `prompt`, greedily when `params` is NULL, calling `cb` with each piece.
///
/// `prompt` is the whole context (e.g. a rendered chat): it is tokenized as `tern run -p` does
/// (special tokens parsed, BOS added when the model adds one, but never doubled). The session
/// keeps the longest common prefix of its KV cache with the prompt's tokens and runs only the rest,
/// so a chat that resends its growing transcript recomputes only the new part; the output is the
/// same as on a fresh session.
///
/// `max_tokens`: at most that many tokens are generated; 0 runs only the prompt; a negative value
/// means until an end-of-generation token or a full context. Generation also stops when `cb`
/// returns non-zero (`TERN_OK`, stop reason `TERN_STOP_CALLBACK`).
///
/// Thread-safety: one call at a time per session (`TERN_BUSY` otherwise); `tern_cancel` from any
/// thread; different sessions run in parallel.
///
/// Errors: `TERN_NULL_ARGUMENT` (session, prompt, cb), `TERN_INVALID_ARGUMENT` (bad sampling
/// values, empty prompt, prompt not UTF-8), `TERN_CONTEXT_FULL` (the prompt does not fit),
/// `TERN_CANCELLED` (`tern_cancel` during the call: the text passed to `cb` so far stands),
/// `TERN_BUSY`, `TERN_NO_TOKENIZER`, `TERN_DEVICE_LOST` (the GPU was lost: free the session and
/// the model, load the model again — `TERN_DEVICE_CPU` always works — and resend the prompt with
/// the text generated so far).
///
/// # Safety
/// `session` is NULL or a live session handle; `prompt` is NULL or NUL-terminated; `params` is NULL
/// or a valid `tern_sampling`; `cb` is NULL or a function safe to call with `user_data`.
#[no_mangle]
pub unsafe extern "C" fn tern_generate(
    session: *mut tern_session,
    prompt: *const c_char,
    params: *const tern_sampling,
    max_tokens: i32,
    cb: tern_piece_callback,
    user_data: *mut c_void,
) -> tern_status {
    boundary("tern_generate", || {
        // SAFETY: the caller's contract (for all three).
        let s = unsafe { arg_ref(session.cast_const(), "session") }?;
        let prompt = unsafe { arg_str(prompt, "prompt") }?;
        let params = unsafe { read_versioned(params, tern_sampling_default()) }?.to_params()?;
        let opts = GenerateOptions {
            max_tokens: usize::try_from(max_tokens).unwrap_or(usize::MAX),
            ..GenerateOptions::default()
        };
        // SAFETY: the caller's contract.
        unsafe { generate_with(s, prompt, &params, &opts, cb, user_data) }
    })
}

/// The body of `tern_generate` and `tern_generate_ex`.
///
/// # Safety
/// `cb` is NULL or a function safe to call with `user_data`.
pub(crate) unsafe fn generate_with(
    s: &tern_session,
    prompt: &str,
    params: &tern_engine::SamplingParams,
    opts: &GenerateOptions,
    cb: tern_piece_callback,
    user_data: *mut c_void,
) -> Result<()> {
    let cb = cb.ok_or_else(|| Error::null("cb"))?;
    let mut guard = s.lock()?;
    let State {
        session,
        stats,
        piece,
    } = &mut *guard;
    session.with_dependent_mut(|model, sess| -> Result<()> {
        let ids = tokenize(model, prompt)?;
        let mut on_piece = |text: &str| -> bool {
            piece.clear();
            piece.extend_from_slice(text.as_bytes());
            piece.push(0);
            // SAFETY: `cb` is callable with `user_data` (caller's contract); `piece` holds
            // `text.len()` bytes plus a NUL and is not touched during the call.
            unsafe { cb(piece.as_ptr().cast(), text.len(), user_data) == 0 }
        };
        // The engine's prefix reuse: keep the cached common prefix, run the rest.
        let (out, keep) = sess.generate_from(&ids, params, opts, &mut on_piece)?;
        let sat = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        *stats = tern_generation_stats {
            struct_size: 0,
            stop_reason: stop_reason_code(out.stop),
            prompt_tokens: sat(ids.len()),
            reused_tokens: sat(keep),
            generated_tokens: sat(out.tokens.len()),
            prefill_seconds: out.prefill_secs,
            decode_seconds: out.decode_secs,
        };
        log::debug!(
            "generated {} tokens ({} prompt tokens, {} reused) in {:.2}s + {:.2}s",
            out.tokens.len(),
            ids.len(),
            keep,
            out.prefill_secs,
            out.decode_secs
        );
        Ok(())
    })
}

/// Make the `tern_generate` or `tern_score` running on `session` return `TERN_CANCELLED` promptly:
/// between generated tokens, and inside a prompt or a scored text before every layer on the CPU
/// and between GPU submissions (a long prompt is submitted a few layers at a time). The session
/// is left as it was before the cancelled part (the prompt's tokens are not half in the cache)
/// and stays usable. Safe from any thread at any time; does nothing when no call is running (a
/// cancel that arrives before a call starts is not remembered). NULL is ignored.
///
/// # Safety
/// `session` is NULL or a live session handle.
#[no_mangle]
pub unsafe extern "C" fn tern_cancel(session: *mut tern_session) {
    boundary_void("tern_cancel", || {
        // SAFETY: the caller's contract.
        if let Some(s) = unsafe { session.as_ref() } {
            s.cancel.store(true, Ordering::SeqCst);
        }
    })
}

/// Statistics of the last successful `tern_generate` on `session` (stop reason `TERN_STOP_NONE`
/// and zeros before the first). Set `out->struct_size = sizeof(tern_generation_stats)` first.
///
/// Thread-safety: one call at a time per session (`TERN_BUSY` otherwise).
///
/// # Safety
/// `session` is NULL or a live session handle; `out` is NULL or a writable
/// `tern_generation_stats` whose `struct_size` is set.
#[no_mangle]
pub unsafe extern "C" fn tern_session_last_stats(
    session: *const tern_session,
    out: *mut tern_generation_stats,
) -> tern_status {
    boundary("tern_session_last_stats", || {
        // SAFETY: the caller's contract.
        let s = unsafe { arg_ref(session, "session") }?;
        let out = arg_out(out, "out")?;
        let stats = s.lock()?.stats;
        // SAFETY: `out` is non-NULL, writable, with struct_size set (caller's contract).
        unsafe { write_versioned(out, stats) }
    })
}

/// What `session` really uses: its device (`TERN_DEVICE_AUTO` resolved), context, KV format,
/// KIVI group/window, MiniCache settings, numerics, the memory budget, KV-cache bytes. Set
/// `out->struct_size = sizeof(tern_session_report)` first.
///
/// Thread-safety: one call at a time per session (`TERN_BUSY` otherwise).
///
/// Errors: `TERN_NULL_ARGUMENT`, `TERN_INVALID_ARGUMENT` (`struct_size` too small), `TERN_BUSY`,
/// `TERN_DEVICE_LOST`.
///
/// # Safety
/// `session` is NULL or a live session handle; `out` is NULL or a writable
/// `tern_session_report` whose `struct_size` is set.
#[no_mangle]
pub unsafe extern "C" fn tern_session_get_report(
    session: *const tern_session,
    out: *mut tern_session_report,
) -> tern_status {
    boundary("tern_session_get_report", || {
        // SAFETY: the caller's contract.
        let s = unsafe { arg_ref(session, "session") }?;
        let out = arg_out(out, "out")?;
        let r = s
            .lock()?
            .session
            .with_dependent_mut(|_, sess| sess.report())?;
        // SAFETY: `out` is non-NULL, writable, with struct_size set (caller's contract).
        unsafe { write_versioned(out, tern_session_report::from_report(&r)) }
    })
}

/// Score `text`: `*out_total_logprob` = Σ ln p(tᵢ | t₀ … tᵢ₋₁) over i = 1 … n−1, the natural-log
/// probability the model gives each of the text's tokens after the ones before it, summed in
/// double precision, and `*out_tokens` = n − 1, the number of scored tokens. The text is tokenized
/// as in `tern_generate` (so t₀ is BOS when the model adds one); the first token is context and is
/// not scored, so a text of one token scores 0 over 0 tokens. Perplexity is
/// `exp(-total / tokens)`.
///
/// The log-probabilities come from the engine's fused scorer (the same numbers as `tern score`
/// and `Model::score`; no logit matrix is made). Uses the session's KV cache: it is cleared first
/// and holds the text's tokens (but the last) afterwards. `tern_cancel` stops it with
/// `TERN_CANCELLED` (checked before every layer on the CPU, between submissions on the GPU); the
/// cache is empty after a failed or cancelled score.
///
/// Thread-safety: one call at a time per session (`TERN_BUSY` otherwise); `tern_cancel` from any
/// thread.
///
/// Errors: `TERN_NULL_ARGUMENT`, `TERN_INVALID_ARGUMENT` (not UTF-8), `TERN_CONTEXT_FULL` (more
/// tokens than the session's context), `TERN_CANCELLED`, `TERN_BUSY`, `TERN_NO_TOKENIZER`,
/// `TERN_DEVICE_LOST`.
///
/// # Safety
/// `session` is NULL or a live session handle; `text` is NULL or NUL-terminated; the outputs are
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tern_score(
    session: *mut tern_session,
    text: *const c_char,
    out_total_logprob: *mut f64,
    out_tokens: *mut usize,
) -> tern_status {
    boundary("tern_score", || {
        // SAFETY: the caller's contract (for both).
        let s = unsafe { arg_ref(session.cast_const(), "session") }?;
        let text = unsafe { arg_str(text, "text") }?;
        let out_total = arg_out(out_total_logprob, "out_total_logprob")?;
        let out_tokens = arg_out(out_tokens, "out_tokens")?;
        let mut guard = s.lock()?;
        s.cancel.store(false, Ordering::SeqCst);
        let (total, n) = guard.session.with_dependent_mut(|model, sess| -> Result<_> {
            let ids = tokenize(model, text)?;
            sess.reset();
            if ids.len() > sess.n_ctx() {
                return Err(Error::new(
                    tern_status::TERN_CONTEXT_FULL,
                    format!(
                        "the text has {} tokens but the context holds {}: score it in parts or make the session with a larger n_ctx",
                        ids.len(),
                        sess.n_ctx()
                    ),
                ));
            }
            // The engine's fused scorer (no logit matrix); the cache holds ids[..n-1] afterwards.
            let lp = sess.score(&ids)?;
            let total: f64 = lp.iter().map(|&v| f64::from(v)).sum();
            Ok((total, lp.len()))
        })?;
        // SAFETY: non-NULL and writable (caller's contract).
        unsafe {
            out_total.write(total);
            out_tokens.write(n);
        }
        Ok(())
    })
}

/// Testing aid: destroy the GPU device under `model` (`wgpu::Device::destroy`), as a driver reset
/// would, so that an app can test its handling of `TERN_DEVICE_LOST`: the next GPU work of the
/// model's sessions (the running `tern_generate` too) fails with `TERN_DEVICE_LOST`; the process
/// and other models are unaffected. Safe from any thread, also from a piece callback.
///
/// Errors: `TERN_NULL_ARGUMENT`, `TERN_UNSUPPORTED` (the model runs on the CPU; nothing happens).
///
/// # Safety
/// `model` is NULL or a live model handle.
#[no_mangle]
pub unsafe extern "C" fn tern_debug_lose_device(model: *const tern_model) -> tern_status {
    boundary("tern_debug_lose_device", || {
        // SAFETY: the caller's contract.
        let m = unsafe { arg_ref(model, "model") }?;
        if m.model.simulate_device_loss() {
            Ok(())
        } else {
            Err(Error::new(
                tern_status::TERN_UNSUPPORTED,
                "the model runs on the CPU: there is no device to lose",
            ))
        }
    })
}
