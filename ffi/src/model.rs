//! `tern_model`: a loaded `.tern` file, shareable by any number of sessions and threads.

use std::ffi::c_char;
use std::path::Path;
use std::sync::Arc;

use tern_engine::{EngineError, ForwardOptions, Model, Verb};

use crate::options::{
    read_versioned, tern_model_options, tern_model_options_default, TERN_DEVICE_AUTO,
    TERN_DEVICE_CPU, TERN_DEVICE_GPU,
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

fn load(path: &str, opts: &tern_model_options) -> Result<Model> {
    match opts.device {
        TERN_DEVICE_AUTO | TERN_DEVICE_CPU | TERN_DEVICE_GPU => {}
        other => {
            return Err(Error::invalid(format!(
                "device {other}: expected TERN_DEVICE_AUTO (0), TERN_DEVICE_CPU (1) or TERN_DEVICE_GPU (2)"
            )))
        }
    }
    // AUTO stays on the CPU in this release: the GPU is used when asked for explicitly.
    let device = if opts.device == TERN_DEVICE_GPU {
        tern_engine::Device::Gpu
    } else {
        tern_engine::Device::Cpu
    };
    let t0 = std::time::Instant::now();
    let lo = tern_engine::LoadOptions {
        device,
        max_memory: Some(opts.max_memory).filter(|&m| m != 0),
    };
    let mut model = Model::open_with(Path::new(path), &lo).map_err(|e| match e {
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
    if model.capabilities().has(Verb::ForwardOptions) {
        let mut fo = ForwardOptions::default();
        fo.matmul.parallel = opts.use_threads != 0;
        model.set_forward_options(fo)?;
    }
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
        let model = load(path, &opts)?;
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
