//! The `#[repr(C)]` option and statistics structs, their defaults, and the versioned reads.
//!
//! Every struct starts with `uint32_t struct_size`, which `tern_*_default()` sets to the size this
//! library knows. The library copies `min(struct_size, sizeof)` bytes over its defaults, so a
//! caller compiled against a newer header (a larger struct) works with this library, which
//! ignores the fields it does not know; a `struct_size` smaller than the first published version
//! is `TERN_INVALID_ARGUMENT`. All fields are plain numbers (no `bool`, no enums) so that any bit
//! pattern is a valid value.

use std::ffi::{c_char, c_void};
use std::mem::size_of;

use tern_engine::{
    BackendKind, CpuThreads, Device, Kivi, KvOptions, KvQuant, LoadOptions, LoadProgress,
    MiniCache, MiniCacheMode, Numerics, SamplingParams, SessionOptions, SessionReport, StopReason,
};

use crate::status::{Error, Result};

/// `tern_model_options.device`: a hardware GPU when there is one and the model has kernels for
/// every tensor on it, else the CPU reference (never a software adapter such as lavapipe: ask for
/// `TERN_DEVICE_GPU` to use one). tern's one meaning of "auto" (`tern_engine::Device::Auto`).
/// `tern_session_get_report` says which one a session runs on.
pub const TERN_DEVICE_AUTO: u32 = 0;
/// `tern_model_options.device`: the CPU reference backend.
pub const TERN_DEVICE_CPU: u32 = 1;
/// `tern_model_options.device`: the GPU engine (wgpu); `TERN_UNSUPPORTED` when there is no usable
/// adapter or the model has tensors without GPU kernels.
pub const TERN_DEVICE_GPU: u32 = 2;

/// How to load a model. Initialise with `tern_model_options_default()`.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct tern_model_options {
    /// `sizeof(tern_model_options)`, set by `tern_model_options_default()`.
    pub struct_size: u32,
    /// `TERN_DEVICE_AUTO` (default), `TERN_DEVICE_CPU` or `TERN_DEVICE_GPU`.
    pub device: u32,
    /// Non-zero (default): split matrix products over a thread pool. Zero: run on the calling
    /// thread only. The results are bit-identical either way.
    pub use_threads: u32,
    /// Unused; keeps `max_memory` at offset 16 on every ABI. Set to 0.
    pub reserved0: u32,
    /// GPU memory budget in bytes (`TERN_DEVICE_GPU`): everything the model and its sessions
    /// allocate on the GPU (weights, just-in-time scratch, KV caches, activation scratch,
    /// staging) stays within it, or `tern_model_load` / `tern_session_new` fail with
    /// `TERN_OUT_OF_MEMORY` and a message naming the smallest budget that works. 0 (default): no
    /// cap. Added after the first version (`struct_size` 12 = no budget).
    pub max_memory: u64,
}

/// What `tern_model_load_ex` adds to `tern_model_options`: the CPU thread count and a load-progress
/// callback. Initialise with `tern_load_options_default()`.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct tern_load_options {
    /// `sizeof(tern_load_options)`, set by `tern_load_options_default()`.
    pub struct_size: u32,
    /// CPU backend: the number of threads that split the matrix products; 0 (default): one per
    /// core (or the calling thread only when `tern_model_options.use_threads` is 0). The thread
    /// pool is made once per process, by the first model that runs on the CPU: a later model
    /// asking for another count fails with `TERN_INVALID_ARGUMENT` naming the count in use. The
    /// GPU ignores it. `tern_model_info.cpu_threads` reads back what a model uses.
    pub cpu_threads: u32,
    /// Called on the loading thread as the load goes (NULL: not reported; see
    /// `tern_progress_callback`).
    pub progress: tern_progress_callback,
    /// Passed to `progress`.
    pub progress_user_data: *mut c_void,
}

/// Load progress: `fraction` in [0, 1] and the stage that just finished, a static
/// NUL-terminated string — `"open"` (the file mapped and its header, metadata and tensor table
/// checked), `"weights"` (the weights loaded for the device: the long part), `"tokenizer"`,
/// `"done"` (1.0) — each once, in that order, on the thread calling `tern_model_load`; `"done"`
/// only when the load succeeds. The strings are valid only during the call.
#[allow(non_camel_case_types)]
pub type tern_progress_callback =
    Option<unsafe extern "C" fn(fraction: f32, stage: *const c_char, user_data: *mut c_void)>;

/// How to make a session. Initialise with `tern_session_options_default()`.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct tern_session_options {
    /// `sizeof(tern_session_options)`, set by `tern_session_options_default()`.
    pub struct_size: u32,
    /// Context size in tokens; 0 (default) = the model's training context, capped at 4096 (a
    /// number from the file does not decide the app's memory). The KV cache for all of it is
    /// allocated up front.
    pub n_ctx: u32,
    /// Non-zero: run this session with llama.cpp's CPU numerics (Q8 activation blocks, an f16 KV
    /// cache, its kernels), which reproduce llama.cpp's greedy output token for token for
    /// llama-family Q4_1/Q8_0 models on x86. 0 (default): the model's own numerics (f32
    /// activations and KV cache). A CPU mode: `TERN_INVALID_ARGUMENT` on a model loaded on the
    /// GPU. Added after the first version: a caller whose `struct_size` ends before it gets 0.
    pub llama_cpp_numerics: u32,
    /// KV-cache format: one of `TERN_KV_*`, or `TERN_KV_DEFAULT` (what
    /// `tern_session_options_default()` sets): the library's default format, today
    /// `TERN_KV_Q8` (about half of f16's bytes for ≤ 0.1 % perplexity; docs/kv-cache.md), and
    /// `TERN_KV_F32` when `llama_cpp_numerics` is set. A value set explicitly is used as is:
    /// `TERN_KV_F32` (0, also what a zeroed struct holds) is the f32 reference cache. The
    /// formats and their math: `tern_format::kv`; how to choose: docs/kv-cache.md (the rotated
    /// `TERN_KV_Q4R`/`Q3R`/`Q2R` run on both devices; a GPU session refuses them with MiniCache or
    /// a head_dim above 256, `TERN_INVALID_ARGUMENT`). Added with the fields below (issue 14): a
    /// caller whose `struct_size` ends before them gets `TERN_KV_DEFAULT`.
    pub kv_format: u32,
    /// MiniCache cross-layer merging: `TERN_MINICACHE_OFF` (default), `TERN_MINICACHE_ON` (the
    /// measured defaults) or `TERN_MINICACHE_CUSTOM` (the three fields below).
    pub minicache: u32,
    /// `TERN_MINICACHE_CUSTOM`: the first merged layer `S` (pairs `(S, S+1), (S+2, S+3), …`).
    pub minicache_start_layer: u32,
    /// `TERN_MINICACHE_CUSTOM`: SLERP parameter `t` in [0, 1] (layer `S` gets weight `1 − t`).
    pub minicache_t: f32,
    /// `TERN_MINICACHE_CUSTOM`: retention threshold `gamma` in [0, 1] on the angular distance.
    pub minicache_gamma: f32,
    /// KIVI (`TERN_KV_Q4/Q3/Q2`) group size `G`; 0 = 32.
    pub kivi_group: u32,
    /// KIVI full-precision window `R` (a multiple of `G`); 0 = 128.
    pub kivi_window: u32,
}

/// `tern_session_options.kv_format`: the library's default format (`TERN_KV_Q8` today;
/// `TERN_KV_F32` with `llama_cpp_numerics`), set by `tern_session_options_default()`.
pub const TERN_KV_DEFAULT: u32 = 0xFFFF_FFFF;
/// `tern_session_options.kv_format`: f32 keys and values (the reference numerics).
pub const TERN_KV_F32: u32 = 0;
/// `tern_session_options.kv_format`: f16.
pub const TERN_KV_F16: u32 = 1;
/// `tern_session_options.kv_format`: 8-bit absmax per (token, head) (the default).
pub const TERN_KV_Q8: u32 = 2;
/// `tern_session_options.kv_format`: KIVI 4-bit (keys per channel, values per token).
pub const TERN_KV_Q4: u32 = 3;
/// `tern_session_options.kv_format`: KIVI 3-bit.
pub const TERN_KV_Q3: u32 = 4;
/// `tern_session_options.kv_format`: KIVI 2-bit.
pub const TERN_KV_Q2: u32 = 5;
/// `tern_session_options.kv_format`: a4.8-style 4-bit absmax per (token, head).
pub const TERN_KV_A4: u32 = 6;
/// `tern_session_options.kv_format`: a4.8-style 3-bit absmax (the BOS token at 4 bits).
pub const TERN_KV_A3: u32 = 7;
/// `tern_session_options.kv_format`: rotated 4-bit (per-head Walsh–Hadamard rotation, then
/// min-max per (token, kv-head) for keys and values; no window, `kivi_group/_window` unused).
pub const TERN_KV_Q4R: u32 = 8;
/// `tern_session_options.kv_format`: rotated KIVI 3-bit (codes packed 32 in 3 words).
pub const TERN_KV_Q3R: u32 = 9;
/// `tern_session_options.kv_format`: rotated KIVI 2-bit.
pub const TERN_KV_Q2R: u32 = 10;
/// `tern_session_options.minicache`: no cross-layer merging (default).
pub const TERN_MINICACHE_OFF: u32 = 0;
/// `tern_session_options.minicache`: MiniCache with the measured defaults.
pub const TERN_MINICACHE_ON: u32 = 1;
/// `tern_session_options.minicache`: MiniCache with `minicache_start_layer/_t/_gamma`.
pub const TERN_MINICACHE_CUSTOM: u32 = 2;

/// Sampling parameters. Initialise with `tern_sampling_default()` (greedy); the chain is
/// repetition penalty → temperature → top-k → top-p → min-p → draw.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct tern_sampling {
    /// `sizeof(tern_sampling)`, set by `tern_sampling_default()`.
    pub struct_size: u32,
    /// 0 = off (default).
    pub top_k: u32,
    /// Seed of the random draw (default 0). The same seed, prompt and parameters give the same
    /// text.
    pub seed: u64,
    /// 0 = greedy (default): the most probable token, lowest id on ties.
    pub temperature: f32,
    /// In (0, 1]; 1 = off (default).
    pub top_p: f32,
    /// In [0, 1]; 0 = off (default).
    pub min_p: f32,
    /// > 0; 1 = off (default). Applied to tokens seen in the last `repeat_last_n` tokens.
    pub repeat_penalty: f32,
    /// Window of the repetition penalty (default 64).
    pub repeat_last_n: u32,
}

/// `tern_generation_stats.stop_reason`: no generation has run on this session yet.
pub const TERN_STOP_NONE: u32 = 0;
/// `tern_generation_stats.stop_reason`: `max_tokens` were generated.
pub const TERN_STOP_MAX_TOKENS: u32 = 1;
/// `tern_generation_stats.stop_reason`: an end-of-generation token.
pub const TERN_STOP_TOKEN: u32 = 2;
/// `tern_generation_stats.stop_reason`: a stop string.
pub const TERN_STOP_STRING: u32 = 3;
/// `tern_generation_stats.stop_reason`: the context is full.
pub const TERN_STOP_CONTEXT: u32 = 4;
/// `tern_generation_stats.stop_reason`: the piece callback returned non-zero.
pub const TERN_STOP_CALLBACK: u32 = 5;

/// What the last successful `tern_generate` on a session did. Set `struct_size` to
/// `sizeof(tern_generation_stats)` before calling `tern_session_last_stats`.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct tern_generation_stats {
    /// `sizeof(tern_generation_stats)`, set by the caller.
    pub struct_size: u32,
    /// One of `TERN_STOP_*`.
    pub stop_reason: u32,
    /// Tokens in the prompt.
    pub prompt_tokens: u32,
    /// Of those, tokens whose KV entries were reused from the session's cache (not recomputed).
    pub reused_tokens: u32,
    /// Tokens generated.
    pub generated_tokens: u32,
    /// Seconds spent on the prompt (the tokens not reused) and on generating.
    pub prefill_seconds: f64,
    pub decode_seconds: f64,
}

/// Model options with their defaults. Thread-safety: any thread.
#[no_mangle]
pub extern "C" fn tern_model_options_default() -> tern_model_options {
    tern_model_options {
        struct_size: size_of::<tern_model_options>() as u32,
        device: TERN_DEVICE_AUTO,
        use_threads: 1,
        reserved0: 0,
        max_memory: 0,
    }
}

/// Load options (`tern_model_load_ex`) with their defaults: one thread per core, no callback.
/// Thread-safety: any thread.
#[no_mangle]
pub extern "C" fn tern_load_options_default() -> tern_load_options {
    tern_load_options {
        struct_size: size_of::<tern_load_options>() as u32,
        cpu_threads: 0,
        progress: None,
        progress_user_data: std::ptr::null_mut(),
    }
}

// SAFETY: repr(C), u32 struct_size first, a u32, a nullable function pointer and a raw pointer
// (any bit pattern is a value; the pointers are only passed back to the caller).
unsafe impl Versioned for tern_load_options {
    const MIN_SIZE: usize = size_of::<Self>();
    const NAME: &'static str = "tern_load_options";
    fn set_struct_size(&mut self) {
        self.struct_size = size_of::<Self>() as u32;
    }
}

/// Session options with their defaults. Thread-safety: any thread.
#[no_mangle]
pub extern "C" fn tern_session_options_default() -> tern_session_options {
    tern_session_options {
        struct_size: size_of::<tern_session_options>() as u32,
        n_ctx: 0,
        llama_cpp_numerics: 0,
        kv_format: TERN_KV_DEFAULT,
        minicache: TERN_MINICACHE_OFF,
        minicache_start_layer: 0,
        minicache_t: 0.5,
        minicache_gamma: 1.0,
        kivi_group: 0,
        kivi_window: 0,
    }
}

/// Greedy sampling (and the defaults of the other fields). Thread-safety: any thread.
#[no_mangle]
pub extern "C" fn tern_sampling_default() -> tern_sampling {
    let d = SamplingParams::default();
    tern_sampling {
        struct_size: size_of::<tern_sampling>() as u32,
        top_k: d.top_k as u32,
        seed: d.seed,
        temperature: d.temperature,
        top_p: d.top_p,
        min_p: d.min_p,
        repeat_penalty: d.repeat_penalty,
        repeat_last_n: d.repeat_last_n as u32,
    }
}

/// A struct whose first field is `struct_size` and all of whose fields accept any bit pattern.
///
/// # Safety
/// Implementors are `#[repr(C)]`, start with a `u32` `struct_size`, and every bit pattern of
/// every field is a valid value.
pub(crate) unsafe trait Versioned: Copy {
    /// The size of the first published version of the struct.
    const MIN_SIZE: usize;
    const NAME: &'static str;
    fn set_struct_size(&mut self);
}

// SAFETY: repr(C), u32 struct_size first, only u32/u64 fields.
unsafe impl Versioned for tern_model_options {
    /// The first version: `struct_size`, `device`, `use_threads`.
    const MIN_SIZE: usize = 12;
    const NAME: &'static str = "tern_model_options";
    fn set_struct_size(&mut self) {
        self.struct_size = size_of::<Self>() as u32;
    }
}

// SAFETY: repr(C), u32 struct_size first, only u32/f32 fields.
unsafe impl Versioned for tern_session_options {
    /// The first version ended after `n_ctx`.
    const MIN_SIZE: usize = std::mem::offset_of!(Self, llama_cpp_numerics);
    const NAME: &'static str = "tern_session_options";
    fn set_struct_size(&mut self) {
        self.struct_size = size_of::<Self>() as u32;
    }
}

// SAFETY: repr(C), u32 struct_size first, only u32/u64/f32 fields.
unsafe impl Versioned for tern_sampling {
    const MIN_SIZE: usize = size_of::<Self>();
    const NAME: &'static str = "tern_sampling";
    fn set_struct_size(&mut self) {
        self.struct_size = size_of::<Self>() as u32;
    }
}

// SAFETY: repr(C), u32 struct_size first, only u32/f64 fields.
unsafe impl Versioned for tern_generation_stats {
    const MIN_SIZE: usize = size_of::<Self>();
    const NAME: &'static str = "tern_generation_stats";
    fn set_struct_size(&mut self) {
        self.struct_size = size_of::<Self>() as u32;
    }
}

fn check_size<T: Versioned>(size: u32) -> Result<usize> {
    let size = size as usize;
    if size < T::MIN_SIZE {
        return Err(Error::invalid(format!(
            "{}.struct_size is {size}, this library needs at least {}: initialise the struct \
             with its tern_*_default() function (or set struct_size = sizeof({}))",
            T::NAME,
            T::MIN_SIZE,
            T::NAME
        )));
    }
    Ok(size.min(size_of::<T>()))
}

/// Read an options struct from the caller: `default` when `p` is NULL.
///
/// # Safety
/// `p` is NULL or points to `struct_size` readable bytes that start with a `u32` `struct_size`.
pub(crate) unsafe fn read_versioned<T: Versioned>(p: *const T, default: T) -> Result<T> {
    if p.is_null() {
        return Ok(default);
    }
    // SAFETY: `p` points to at least the `u32` struct_size (caller's contract).
    let size = unsafe { std::ptr::read_unaligned(p.cast::<u32>()) };
    let n = check_size::<T>(size)?;
    let mut out = default;
    // SAFETY: `n ≤ size_of::<T>()` bytes are readable at `p` (struct_size says so) and writable
    // in `out`; every bit pattern is a valid `T` (the `Versioned` contract).
    unsafe {
        std::ptr::copy_nonoverlapping(p.cast::<u8>(), (&mut out as *mut T).cast::<u8>(), n);
    }
    out.set_struct_size();
    Ok(out)
}

/// Write a versioned output struct to the caller: at most `(*p).struct_size` bytes.
///
/// # Safety
/// `p` is non-NULL and points to `struct_size` writable bytes that start with a `u32`
/// `struct_size` set by the caller.
pub(crate) unsafe fn write_versioned<T: Versioned>(p: *mut T, mut value: T) -> Result<()> {
    // SAFETY: `p` points to at least the `u32` struct_size (caller's contract).
    let size = unsafe { std::ptr::read_unaligned(p.cast::<u32>()) };
    let n = check_size::<T>(size)?;
    value.set_struct_size();
    // SAFETY: `n ≤ size_of::<T>()` bytes are readable in `value` and writable at `p`.
    unsafe {
        std::ptr::copy_nonoverlapping((&value as *const T).cast::<u8>(), p.cast::<u8>(), n);
    }
    Ok(())
}

impl tern_model_options {
    /// The engine's load options: each number mapped to its typed value (no strings), checked
    /// by the engine when the model is opened.
    pub(crate) fn load_options(&self, extra: &tern_load_options) -> Result<LoadOptions> {
        let device = match self.device {
            TERN_DEVICE_AUTO => Device::Auto,
            TERN_DEVICE_CPU => Device::Cpu,
            TERN_DEVICE_GPU => Device::Gpu,
            other => {
                return Err(Error::invalid(format!(
                    "device {other}: expected TERN_DEVICE_AUTO (0), TERN_DEVICE_CPU (1) or \
                     TERN_DEVICE_GPU (2)"
                )))
            }
        };
        Ok(LoadOptions {
            device,
            max_memory: Some(self.max_memory).filter(|&m| m != 0),
            cpu_threads: match (self.use_threads, extra.cpu_threads) {
                (0, _) => CpuThreads::Caller,
                (_, 0) => CpuThreads::Pool,
                (_, n) => CpuThreads::Count(n as usize),
            },
            progress: extra.progress.map(|cb| {
                let user = extra.progress_user_data as usize;
                LoadProgress(std::sync::Arc::new(move |f: f32, stage: &str| {
                    let c = std::ffi::CString::new(stage).unwrap_or_default();
                    // SAFETY: the caller's callback with its user data, during tern_model_load
                    // (the callback's contract); the string lives for the call.
                    unsafe { cb(f, c.as_ptr(), user as *mut c_void) };
                }))
            }),
            // The one exception to "Auto never takes a software adapter": tests of an app's
            // Auto path on a machine with only lavapipe (CI's GPU job).
            auto_software_gpu: std::env::var("TERN_AUTO_SOFTWARE_GPU").is_ok_and(|v| v == "1"),
            // The GPU knobs are developers' measurement switches (`TERN_GPU_*`); the C ABI is an
            // edge like the CLI, so a bad value is `TERN_INVALID_ARGUMENT` naming the variable.
            gpu: tern_engine::GpuTuning::from_env().map_err(tern_engine::EngineError::from)?,
            ..Default::default()
        })
    }
}

impl tern_session_options {
    /// The engine's session options: each number mapped to its typed value (`kv_format` by
    /// `KvQuant::from_index`, no strings); the engine checks them once, against the model, in
    /// `Session::with_options` (`TERN_INVALID_ARGUMENT` naming the bad value).
    pub(crate) fn session_options(&self) -> Result<SessionOptions> {
        let format = match self.kv_format {
            TERN_KV_DEFAULT if self.llama_cpp_numerics != 0 => Some(KvQuant::F32),
            TERN_KV_DEFAULT => Some(KvQuant::default()),
            i => KvQuant::from_index(i),
        };
        let format = format.ok_or_else(|| {
            Error::invalid(format!(
                "tern_session_options.kv_format {} is not one of TERN_KV_*",
                self.kv_format
            ))
        })?;
        let minicache = match self.minicache {
            TERN_MINICACHE_OFF => MiniCacheMode::Off,
            TERN_MINICACHE_ON => MiniCacheMode::On,
            TERN_MINICACHE_CUSTOM => MiniCacheMode::Custom(MiniCache {
                start_layer: self.minicache_start_layer,
                t: self.minicache_t,
                gamma: self.minicache_gamma,
            }),
            o => {
                return Err(Error::invalid(format!(
                    "tern_session_options.minicache {o} is not one of TERN_MINICACHE_*"
                )))
            }
        };
        let d = Kivi::default();
        let or = |v: u32, d: u32| if v == 0 { d } else { v };
        Ok(SessionOptions {
            n_ctx: self.n_ctx as usize,
            kv: KvOptions {
                format,
                kivi: Kivi {
                    group: or(self.kivi_group, d.group),
                    residual: or(self.kivi_window, d.residual),
                },
                minicache,
            },
            numerics: if self.llama_cpp_numerics != 0 {
                Numerics::LlamaCpp
            } else {
                Numerics::Model
            },
            ..Default::default()
        })
    }
}

/// What a session really uses, read back by `tern_session_get_report`. Set `struct_size` to
/// `sizeof(tern_session_report)` first; fields a newer library appends are not written to an
/// older caller's smaller struct.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct tern_session_report {
    /// `sizeof(tern_session_report)`, set by the caller.
    pub struct_size: u32,
    /// `TERN_DEVICE_CPU` or `TERN_DEVICE_GPU` (`TERN_DEVICE_AUTO` resolved).
    pub device: u32,
    /// Positions the KV cache holds (`n_ctx = 0` resolved).
    pub n_ctx: u32,
    /// One of `TERN_KV_*`.
    pub kv_format: u32,
    /// KIVI group size `G` and window `R` of the cache (the defaults 32 / 128 unless set).
    pub kivi_group: u32,
    pub kivi_window: u32,
    /// `TERN_MINICACHE_OFF`, or `TERN_MINICACHE_CUSTOM` with the three fields below
    /// (`TERN_MINICACHE_ON` is reported with the values it resolved to).
    pub minicache: u32,
    pub minicache_start_layer: u32,
    pub minicache_t: f32,
    pub minicache_gamma: f32,
    /// Non-zero: llama.cpp's CPU numerics.
    pub llama_cpp_numerics: u32,
    /// Unused; keeps the u64 fields 8-aligned on every ABI. 0.
    pub reserved0: u32,
    /// The memory budget of the model and its sessions in bytes (`tern_model_options.max_memory`;
    /// 0: no cap).
    pub max_memory: u64,
    /// Bytes of the KV cache (all positions, keys and values, every layer).
    pub kv_bytes: u64,
}

impl tern_session_report {
    pub(crate) fn from_report(r: &SessionReport) -> Self {
        let (minicache, mc) = match r.kv.minicache {
            None => (
                TERN_MINICACHE_OFF,
                MiniCache {
                    start_layer: 0,
                    t: 0.0,
                    gamma: 0.0,
                },
            ),
            Some(m) => (TERN_MINICACHE_CUSTOM, m),
        };
        tern_session_report {
            struct_size: size_of::<Self>() as u32,
            device: match r.backend {
                BackendKind::Cpu => TERN_DEVICE_CPU,
                BackendKind::Gpu => TERN_DEVICE_GPU,
            },
            n_ctx: u32::try_from(r.n_ctx).unwrap_or(u32::MAX),
            kv_format: r.kv.quant.index(),
            kivi_group: r.kv.kivi.group,
            kivi_window: r.kv.kivi.residual,
            minicache,
            minicache_start_layer: mc.start_layer,
            minicache_t: mc.t,
            minicache_gamma: mc.gamma,
            llama_cpp_numerics: u32::from(r.numerics == Numerics::LlamaCpp),
            reserved0: 0,
            max_memory: r.max_memory.unwrap_or(0),
            kv_bytes: r.kv_bytes,
        }
    }
}

// SAFETY: repr(C), u32 struct_size first, only u32/u64/f32 fields.
unsafe impl Versioned for tern_session_report {
    /// The first version: every field above.
    const MIN_SIZE: usize = size_of::<Self>();
    const NAME: &'static str = "tern_session_report";
    fn set_struct_size(&mut self) {
        self.struct_size = size_of::<Self>() as u32;
    }
}

impl tern_sampling {
    pub(crate) fn to_params(self) -> Result<SamplingParams> {
        let p = SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k as usize,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n as usize,
            seed: self.seed,
        };
        p.validate()?;
        Ok(p)
    }
}

pub(crate) fn stop_reason_code(r: StopReason) -> u32 {
    match r {
        StopReason::MaxTokens => TERN_STOP_MAX_TOKENS,
        StopReason::Token => TERN_STOP_TOKEN,
        StopReason::StopString => TERN_STOP_STRING,
        StopReason::Context => TERN_STOP_CONTEXT,
        StopReason::Callback => TERN_STOP_CALLBACK,
    }
}
