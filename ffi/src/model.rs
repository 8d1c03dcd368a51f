//! `tern_model`: a loaded `.tern` file, shareable by any number of sessions and threads.

use std::ffi::c_char;
use std::path::Path;
use std::sync::Arc;

use tern_engine::{EngineError, Model};

use crate::options::{
    read_versioned, tern_load_options, tern_load_options_default, tern_model_options,
    tern_model_options_default,
};
use crate::status::{arg_out, arg_str, boundary, boundary_void, tern_status, Error, Result};

/// A loaded model (opaque). Free with `tern_model_free`.
#[allow(non_camel_case_types)]
pub struct tern_model {
    pub(crate) model: Arc<Model>,
}

// Sessions on one model run on several threads at once.
const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<tern_model>();
};

fn load(path: &str, opts: &tern_model_options, extra: &tern_load_options) -> Result<Model> {
    let lo = opts.load_options(extra)?;
    let t0 = std::time::Instant::now();
    let model = Model::open_with(Path::new(path), &lo).map_err(|e| match e {
        // At load time a tokenizer that does not build is a problem of the file.
        EngineError::Tokenizer(m) => Error::new(
            tern_status::TERN_CORRUPT_FILE,
            format!("{path}: the tokenizer does not load: {m}"),
        ),
        e => {
            let mut err = Error::from(e);
            err.message = format!("{path}: {}", err.message);
            err
        }
    })?;
    log::info!(
        "loaded {path} in {:.2}s ({} layers, vocabulary {})",
        t0.elapsed().as_secs_f64(),
        model.meta().hparams.n_layer,
        model.n_vocab()
    );
    Ok(model)
}

/// Load and validate a `.tern` model. `opts` may be NULL (defaults). On success `*out` receives a
/// handle to free with `tern_model_free`.
///
/// Thread-safety: any thread; loads of different models may run at once.
///
/// Errors: `TERN_NULL_ARGUMENT` (path or out), `TERN_INVALID_ARGUMENT` (path not UTF-8, bad
/// options), `TERN_IO` (missing/unreadable file), `TERN_CORRUPT_FILE`, `TERN_UNSUPPORTED`,
/// `TERN_OUT_OF_MEMORY`.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `opts` is NULL or a valid `tern_model_options`;
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tern_model_load(
    path: *const c_char,
    opts: *const tern_model_options,
    out: *mut *mut tern_model,
) -> tern_status {
    boundary("tern_model_load", || {
        // SAFETY: the caller's contract.
        let path = unsafe { arg_str(path, "path") }?;
        let out = arg_out(out, "out")?;
        // SAFETY: the caller's contract.
        let opts = unsafe { read_versioned(opts, tern_model_options_default()) }?;
        let model = load(path, &opts, &tern_load_options_default())?;
        let handle = Box::into_raw(Box::new(tern_model {
            model: Arc::new(model),
        }));
        crate::handle_made();
        // SAFETY: `out` is non-NULL and writable (caller's contract).
        unsafe { out.write(handle) };
        Ok(())
    })
}

/// `tern_model_load` with `tern_load_options` (`load` may be NULL: the defaults): the CPU thread
/// count and a load-progress callback.
///
/// Thread-safety: any thread; loads of different models may run at once.
///
/// Errors: `tern_model_load`'s; `TERN_INVALID_ARGUMENT` for a thread count other than the
/// process's pool's once it exists.
///
/// # Safety
/// As `tern_model_load`; `load` is NULL or a valid `tern_load_options` whose callback is NULL or
/// safe to call with its user data during this call.
#[no_mangle]
pub unsafe extern "C" fn tern_model_load_ex(
    path: *const c_char,
    opts: *const tern_model_options,
    load_opts: *const tern_load_options,
    out: *mut *mut tern_model,
) -> tern_status {
    boundary("tern_model_load_ex", || {
        // SAFETY: the caller's contract.
        let path = unsafe { arg_str(path, "path") }?;
        let out = arg_out(out, "out")?;
        // SAFETY: the caller's contract.
        let opts = unsafe { read_versioned(opts, tern_model_options_default()) }?;
        let extra = unsafe { read_versioned(load_opts, tern_load_options_default()) }?;
        let model = load(path, &opts, &extra)?;
        let handle = Box::into_raw(Box::new(tern_model {
            model: Arc::new(model),
        }));
        crate::handle_made();
        // SAFETY: `out` is non-NULL and writable (caller's contract).
        unsafe { out.write(handle) };
        Ok(())
    })
}

/// Free a model handle (NULL is ignored). Sessions made from it stay valid: the weights are
/// released with the last of them.
///
/// Thread-safety: not while another call on this model handle runs (its sessions may go on).
///
/// # Safety
/// `model` is NULL or a handle from `tern_model_load` not yet freed, with no call on it running.
#[no_mangle]
pub unsafe extern "C" fn tern_model_free(model: *mut tern_model) {
    boundary_void("tern_model_free", || {
        if !model.is_null() {
            // SAFETY: made by Box::into_raw in tern_model_load, freed once (caller's contract).
            drop(unsafe { Box::from_raw(model) });
            crate::handle_freed();
        }
    })
}
