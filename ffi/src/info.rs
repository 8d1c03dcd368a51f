//! Model metadata, tokenization and custom chat templates.

use std::ffi::{c_char, CString};
use std::mem::size_of;

use tern_engine::BackendKind;

use crate::model::tern_model;
use crate::options::{write_versioned, Versioned, TERN_DEVICE_CPU, TERN_DEVICE_GPU};
use crate::status::{arg_out, arg_ref, arg_str, boundary, boundary_void, Error, Result};

/// What a loaded model is, read by `tern_model_get_info`. Set `struct_size` to
/// `sizeof(tern_model_info)` first; fields a newer library appends are not written to an older
/// caller's smaller struct. Token ids are -1 where the model has no such token.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct tern_model_info {
    /// `sizeof(tern_model_info)`, set by the caller.
    pub struct_size: u32,
    /// `TERN_DEVICE_CPU` or `TERN_DEVICE_GPU`: where the model was loaded (`TERN_DEVICE_AUTO`
    /// resolved).
    pub device: u32,
    /// Vocabulary size.
    pub n_vocab: u32,
    /// The context the model was trained with (from the file).
    pub n_ctx_train: u32,
    pub n_layer: u32,
    pub n_embd: u32,
    pub n_head: u32,
    pub n_head_kv: u32,
    pub head_dim: u32,
    /// Special tokens (-1: none).
    pub bos: i32,
    pub eos: i32,
    /// End of turn (e.g. `<|im_end|>`).
    pub eot: i32,
    pub pad: i32,
    pub unk: i32,
    /// Non-zero: `tern_tokenize` with `add_special` puts BOS first.
    pub add_bos: u32,
    /// Non-zero: the model has a tokenizer (text can be used with it).
    pub has_tokenizer: u32,
    /// Non-zero: the model has its own chat template (`TERN_MODEL_STR_CHAT_TEMPLATE`).
    pub has_chat_template: u32,
    /// Threads the CPU backend runs matrix products on (1: the calling thread); 0 on the GPU.
    pub cpu_threads: u32,
    /// Bytes of the weights as stored in the file.
    pub weight_bytes: u64,
}

// SAFETY: repr(C), u32 struct_size first, only u32/i32/u64 fields.
unsafe impl Versioned for tern_model_info {
    const MIN_SIZE: usize = size_of::<Self>();
    const NAME: &'static str = "tern_model_info";
    fn set_struct_size(&mut self) {
        self.struct_size = size_of::<Self>() as u32;
    }
}

/// `tern_model_get_string`: the model's name (from its source metadata, else the file it was
/// packed from).
pub const TERN_MODEL_STR_NAME: u32 = 0;
/// `tern_model_get_string`: the architecture (`"llama"`, `"bitnet"`, ...).
pub const TERN_MODEL_STR_ARCHITECTURE: u32 = 1;
/// `tern_model_get_string`: the model's own Jinja chat template (NULL when it has none).
pub const TERN_MODEL_STR_CHAT_TEMPLATE: u32 = 2;
/// `tern_model_get_string`: the device, `"cpu"` or `"gpu (adapter, backend)"`.
pub const TERN_MODEL_STR_DEVICE: u32 = 3;

fn id(t: Option<u32>) -> i32 {
    t.and_then(|v| i32::try_from(v).ok()).unwrap_or(-1)
}

/// Numbers describing `model`: device, vocabulary, training context, shape, special tokens,
/// threads, weight bytes. Set `out->struct_size = sizeof(tern_model_info)` first.
///
/// Thread-safety: any thread, concurrently with any call on the model or its sessions.
///
/// Errors: `TERN_NULL_ARGUMENT`, `TERN_INVALID_ARGUMENT` (`struct_size` too small).
///
/// # Safety
/// `model` is NULL or a live model handle; `out` is NULL or a writable `tern_model_info` whose
/// `struct_size` is set.
#[no_mangle]
pub unsafe extern "C" fn tern_model_get_info(
    model: *const tern_model,
    out: *mut tern_model_info,
) -> crate::status::tern_status {
    boundary("tern_model_get_info", || {
        // SAFETY: the caller's contract.
        let m = &unsafe { arg_ref(model, "model") }?.model;
        let out = arg_out(out, "out")?;
        let hp = &m.meta().hparams;
        let tok = m.tokenizer().ok();
        let backend = m.capabilities().backend();
        let info = tern_model_info {
            struct_size: 0,
            device: match backend {
                BackendKind::Cpu => TERN_DEVICE_CPU,
                BackendKind::Gpu => TERN_DEVICE_GPU,
            },
            n_vocab: hp.n_vocab,
            n_ctx_train: hp.n_ctx_train,
            n_layer: hp.n_layer,
            n_embd: hp.n_embd,
            n_head: hp.n_head,
            n_head_kv: hp.n_head_kv,
            head_dim: hp.head_dim,
            bos: id(tok.and_then(|t| t.bos())),
            eos: id(tok.and_then(|t| t.eos())),
            eot: id(tok.and_then(|t| t.eot())),
            pad: id(tok.and_then(|t| t.pad())),
            unk: id(tok.and_then(|t| t.unk())),
            add_bos: u32::from(tok.is_some_and(|t| t.add_bos())),
            has_tokenizer: u32::from(tok.is_some()),
            has_chat_template: u32::from(tok.and_then(|t| t.chat_template()).is_some()),
            cpu_threads: match backend {
                BackendKind::Cpu => m.load_options().cpu_threads.resolved() as u32,
                BackendKind::Gpu => 0,
            },
            weight_bytes: m.report().memory.weight_bytes,
        };
        // SAFETY: non-NULL, writable, struct_size set (caller's contract).
        unsafe { write_versioned(out, info) }
    })
}

/// One of the model's strings (`TERN_MODEL_STR_*`) into `*out_text`, a NUL-terminated UTF-8
/// string to free with `tern_string_free`, or NULL when the model has none (a model without a
/// chat template: `TERN_OK` and NULL).
///
/// Thread-safety: any thread, concurrently with any call on the model or its sessions.
///
/// Errors: `TERN_NULL_ARGUMENT`, `TERN_INVALID_ARGUMENT` (an unknown `which`).
///
/// # Safety
/// `model` is NULL or a live model handle; `out_text` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tern_model_get_string(
    model: *const tern_model,
    which: u32,
    out_text: *mut *mut c_char,
) -> crate::status::tern_status {
    boundary("tern_model_get_string", || {
        // SAFETY: the caller's contract.
        let m = &unsafe { arg_ref(model, "model") }?.model;
        let out = arg_out(out_text, "out_text")?;
        let meta = m.meta();
        let s: Option<String> = match which {
            TERN_MODEL_STR_NAME => Some(
                meta.provenance
                    .model_name
                    .clone()
                    .filter(|n| !n.is_empty())
                    .unwrap_or_else(|| meta.provenance.source_name.clone()),
            ),
            // The file's metadata spells it in lowercase (serde `rename_all = "lowercase"`).
            TERN_MODEL_STR_ARCHITECTURE => Some(format!("{:?}", meta.arch).to_lowercase()),
            TERN_MODEL_STR_CHAT_TEMPLATE => m
                .tokenizer()
                .ok()
                .and_then(|t| t.chat_template())
                .map(str::to_string),
            TERN_MODEL_STR_DEVICE => Some(m.device_name()),
            o => {
                return Err(Error::invalid(format!(
                    "which = {o}: expected one of TERN_MODEL_STR_*"
                )))
            }
        };
        let p = match s {
            Some(s) => c_string(s)?.into_raw(),
            None => std::ptr::null_mut(),
        };
        // SAFETY: non-NULL and writable (caller's contract).
        unsafe { out.write(p) };
        Ok(())
    })
}

fn c_string(s: String) -> Result<CString> {
    CString::new(s).map_err(|_| Error::invalid("the text contains a NUL byte"))
}

/// Tokenize `text` into `*out_tokens` (`*out_n` ids; free with `tern_tokens_free`).
/// `add_special` non-zero adds BOS/EOS as the model's tokenizer says (`tern_model_info.add_bos`);
/// `parse_special` non-zero maps the text of control tokens (`<|im_start|>`) to their ids.
/// `tern_generate` tokenizes its prompt with both on. An empty text gives 0 tokens (or just
/// BOS).
///
/// Thread-safety: any thread, concurrently with any call on the model or its sessions.
///
/// Errors: `TERN_NULL_ARGUMENT`, `TERN_INVALID_ARGUMENT` (not UTF-8), `TERN_NO_TOKENIZER`.
///
/// # Safety
/// `model` is NULL or a live model handle; `text` is NULL or NUL-terminated; the outputs are
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tern_tokenize(
    model: *const tern_model,
    text: *const c_char,
    add_special: i32,
    parse_special: i32,
    out_tokens: *mut *mut u32,
    out_n: *mut usize,
) -> crate::status::tern_status {
    boundary("tern_tokenize", || {
        // SAFETY: the caller's contract.
        let m = &unsafe { arg_ref(model, "model") }?.model;
        let text = unsafe { arg_str(text, "text") }?;
        let out_tokens = arg_out(out_tokens, "out_tokens")?;
        let out_n = arg_out(out_n, "out_n")?;
        let ids = m
            .tokenizer()?
            .encode_with(text, add_special != 0, parse_special != 0)
            .map_err(|e| Error::from(tern_engine::EngineError::Tokenizer(e.to_string())))?;
        let n = ids.len();
        let p = Box::into_raw(ids.into_boxed_slice()).cast::<u32>();
        // SAFETY: non-NULL and writable (caller's contract).
        unsafe {
            out_tokens.write(p);
            out_n.write(n);
        }
        Ok(())
    })
}

/// Free tokens from `tern_tokenize` (`n`: the count it gave; NULL is ignored). Thread-safety: any
/// thread, once per array.
///
/// # Safety
/// `tokens` is NULL or a pointer from `tern_tokenize` with its count `n`, not yet freed.
#[no_mangle]
pub unsafe extern "C" fn tern_tokens_free(tokens: *mut u32, n: usize) {
    boundary_void("tern_tokens_free", || {
        if !tokens.is_null() {
            // SAFETY: made by Box::into_raw of a boxed slice of `n` ids (caller's contract).
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(tokens, n)) });
        }
    })
}

/// The text of `n` token ids into `*out_text` (NUL-terminated UTF-8; free with
/// `tern_string_free`): the pieces concatenated, special tokens rendered as their text, bytes
/// that do not form UTF-8 (ids that split a character) as U+FFFD. `tern_tokenize` then
/// `tern_detokenize` gives the text back (without the BOS text when `add_special` was 0).
///
/// Thread-safety: any thread, concurrently with any call on the model or its sessions.
///
/// Errors: `TERN_NULL_ARGUMENT` (`tokens` NULL with `n > 0`), `TERN_INVALID_ARGUMENT` (an id
/// outside the vocabulary), `TERN_NO_TOKENIZER`.
///
/// # Safety
/// `model` is NULL or a live model handle; `tokens` is NULL or points to `n` ids; `out_text` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tern_detokenize(
    model: *const tern_model,
    tokens: *const u32,
    n: usize,
    out_text: *mut *mut c_char,
) -> crate::status::tern_status {
    boundary("tern_detokenize", || {
        // SAFETY: the caller's contract.
        let m = &unsafe { arg_ref(model, "model") }?.model;
        let out = arg_out(out_text, "out_text")?;
        let ids: &[u32] = if n == 0 {
            &[]
        } else if tokens.is_null() {
            return Err(Error::null("tokens"));
        } else {
            // SAFETY: `tokens` points to `n` ids (caller's contract).
            unsafe { std::slice::from_raw_parts(tokens, n) }
        };
        m.check_tokens(ids)?;
        let text = m
            .tokenizer()?
            .decode(ids)
            .map_err(|e| Error::from(tern_engine::EngineError::Tokenizer(e.to_string())))?;
        let c = CString::new(text.replace('\0', "\u{FFFD}"))
            .map_err(|_| Error::invalid("the text contains a NUL byte"))?;
        // SAFETY: non-NULL and writable (caller's contract).
        unsafe { out.write(c.into_raw()) };
        Ok(())
    })
}
