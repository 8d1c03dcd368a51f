//! `tern_model_plan`: how a model and a context fit a memory budget, computed before loading
//! (`tern_engine::plan`; `docs/planner.md`).

use std::ffi::c_char;
use std::path::Path;

use tern_engine::BackendKind;

use crate::options::{
    read_versioned, tern_model_options, tern_model_options_default, write_versioned, Versioned,
    TERN_DEVICE_CPU, TERN_DEVICE_GPU,
};
use crate::status::{arg_out, arg_str, boundary, tern_status, Error};

/// Capacity of `tern_plan.configs` (every `TERN_KV_*` format fits).
pub const TERN_PLAN_MAX_CONFIGS: u32 = 16;
/// `tern_plan.chosen_kv_format` when no format was chosen (no context asked, or none fits).
pub const TERN_PLAN_NONE: u32 = 0xFFFF_FFFF;

/// One KV format's line of a `tern_plan`.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct tern_plan_config {
    /// One of `TERN_KV_*`.
    pub kv_format: u32,
    /// Unused; keeps the u64 fields 8-aligned on every ABI. 0.
    pub reserved0: u32,
    /// KV-cache bytes one position takes over all layers at `max_context` positions.
    pub kv_bytes_per_token: u64,
    /// The largest context (positions) that fits the budget in this format; 0: none. Capped at
    /// `tern_plan.context_cap`.
    pub max_context: u64,
    /// The largest context the budget holds without that cap (what a session under the budget
    /// may have).
    pub budget_context: u64,
}

/// What `tern_model_plan` computes. Set `struct_size = sizeof(tern_plan)` first.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct tern_plan {
    /// `sizeof(tern_plan)`, set by the caller.
    pub struct_size: u32,
    /// `TERN_DEVICE_CPU` or `TERN_DEVICE_GPU`: the device loading would pick (`AUTO` resolved).
    pub device: u32,
    /// The budget (`tern_model_options.max_memory`).
    pub budget_bytes: u64,
    /// Weights as they would be placed (GPU: what the loader allocates; CPU: resident bytes).
    pub weights_bytes: u64,
    /// A session's bytes besides its KV cache (activations, logits, staging).
    pub scratch_bytes: u64,
    /// The allowance kept beside the weights (GPU buffer granularity, small buffers; CPU: 0).
    pub reserve_bytes: u64,
    /// The cap of every `max_context`: the model's training context.
    pub context_cap: u64,
    /// The format chosen for the context asked (`TERN_KV_*`), or `TERN_PLAN_NONE`.
    pub chosen_kv_format: u32,
    /// Entries of `configs` filled.
    pub n_configs: u32,
    /// The context chosen (the one asked), or 0 with `TERN_PLAN_NONE`.
    pub chosen_context: u64,
    /// Per KV format (in `TERN_KV_*` order), `n_configs` of them.
    pub configs: [tern_plan_config; TERN_PLAN_MAX_CONFIGS as usize],
}

// SAFETY: repr(C), u32 struct_size first, only u32/u64 fields and arrays of them.
unsafe impl Versioned for tern_plan {
    const MIN_SIZE: usize = size_of::<Self>();
    const NAME: &'static str = "tern_plan";
    fn set_struct_size(&mut self) {
        self.struct_size = size_of::<Self>() as u32;
    }
}

impl tern_plan {
    pub(crate) fn from_plan(p: &tern_engine::Plan) -> Self {
        let mut configs = [tern_plan_config::default(); TERN_PLAN_MAX_CONFIGS as usize];
        let n = p.configs.len().min(configs.len());
        for (dst, c) in configs.iter_mut().zip(&p.configs) {
            *dst = tern_plan_config {
                kv_format: c.kv.index(),
                reserved0: 0,
                kv_bytes_per_token: c.kv_bytes_per_token,
                max_context: c.max_context,
                budget_context: c.budget_context,
            };
        }
        tern_plan {
            struct_size: size_of::<Self>() as u32,
            device: match p.backend {
                BackendKind::Cpu => TERN_DEVICE_CPU,
                BackendKind::Gpu => TERN_DEVICE_GPU,
            },
            budget_bytes: p.budget_bytes,
            weights_bytes: p.weights_bytes,
            scratch_bytes: p.scratch_bytes,
            reserve_bytes: p.reserve_bytes,
            context_cap: p.context_cap,
            chosen_kv_format: p.chosen.map_or(TERN_PLAN_NONE, |c| c.kv.index()),
            n_configs: n as u32,
            chosen_context: p.chosen.map_or(0, |c| c.context),
            configs,
        }
    }
}

/// Plan the model at `path` under `opts` before loading it: the weights' bytes as they would be
/// placed, a session's scratch, and per KV format the largest context within
/// `opts->max_memory` (required, non-zero), for the device `opts->device` picks (`AUTO`
/// resolved as `tern_model_load` resolves it). With `context` > 0, `chosen_kv_format` is the
/// best-quality format whose largest context reaches it (`TERN_PLAN_NONE` when none does, or
/// when `context` is 0). Only the file's header and tensor table are read. Set
/// `out->struct_size = sizeof(tern_plan)` first.
///
/// Errors: `TERN_NULL_ARGUMENT`, `TERN_INVALID_ARGUMENT` (no budget, bad options, `struct_size`
/// too small), `TERN_IO`, `TERN_CORRUPT_FILE`, `TERN_UNSUPPORTED` (`TERN_DEVICE_GPU` without a
/// usable GPU or kernels).
///
/// # Safety
/// `path` is NULL or NUL-terminated; `opts` is NULL or a valid `tern_model_options`; `out` is
/// NULL or a writable `tern_plan` whose `struct_size` is set.
#[no_mangle]
pub unsafe extern "C" fn tern_model_plan(
    path: *const c_char,
    opts: *const tern_model_options,
    context: u64,
    out: *mut tern_plan,
) -> tern_status {
    boundary("tern_model_plan", || {
        // SAFETY: the caller's contract.
        let path = unsafe { arg_str(path, "path") }?;
        let out = arg_out(out, "out")?;
        // SAFETY: the caller's contract.
        let opts = unsafe { read_versioned(opts, tern_model_options_default()) }?;
        let lo = opts.load_options(&crate::options::tern_load_options_default())?;
        if lo.max_memory.is_none() {
            return Err(Error::invalid(
                "tern_model_plan needs a budget: set tern_model_options.max_memory".to_string(),
            ));
        }
        let p = tern_engine::plan(Path::new(path), &lo, Some(context).filter(|&c| c > 0)).map_err(
            |e| {
                let mut err = Error::from(e);
                err.message = format!("{path}: {}", err.message);
                err
            },
        )?;
        // SAFETY: `out` is non-NULL, writable, with struct_size set (caller's contract).
        unsafe { write_versioned(out, tern_plan::from_plan(&p)) }
    })
}
