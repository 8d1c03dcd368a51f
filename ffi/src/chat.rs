//! Chat templates: render a conversation with the model's own template into a prompt.

use std::ffi::{c_char, CString};

use tern_engine::chat::{render_chat, ChatMessage};

use crate::model::tern_model;
use crate::status::{arg_out, arg_ref, arg_str, boundary, boundary_void, tern_status, Error};

/// One turn of a conversation.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct tern_chat_message {
    /// `"system"`, `"user"` or `"assistant"` (NUL-terminated UTF-8).
    pub role: *const c_char,
    /// The message text (NUL-terminated UTF-8).
    pub content: *const c_char,
}

/// Render `messages` with the model's chat template (Hugging Face `apply_chat_template`
/// semantics) into `*out_text`, a NUL-terminated UTF-8 string to free with `tern_string_free`.
/// `add_generation_prompt` non-zero appends the header that opens the assistant's turn. Pass the
/// result to `tern_generate` as the prompt. `messages` may be NULL when `n_messages` is 0.
/// (`tern_chat_apply_template` renders with a template of the app's own.)
///
/// Thread-safety: any thread, concurrently with any call on the model or its sessions.
///
/// Errors: `TERN_NULL_ARGUMENT`, `TERN_INVALID_ARGUMENT` (text not UTF-8), `TERN_NO_TOKENIZER`,
/// `TERN_TEMPLATE` (no template, or the template rejected the conversation).
///
/// # Safety
/// `model` is NULL or a live model handle; `messages` is NULL or points to `n_messages` messages
/// whose strings are NULL or NUL-terminated; `out_text` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn tern_chat_apply(
    model: *mut tern_model,
    messages: *const tern_chat_message,
    n_messages: usize,
    add_generation_prompt: i32,
    out_text: *mut *mut c_char,
) -> tern_status {
    boundary("tern_chat_apply", || {
        // SAFETY: the caller's contract.
        unsafe {
            apply(
                model,
                None,
                messages,
                n_messages,
                add_generation_prompt,
                out_text,
            )
        }
    })
}

/// `tern_chat_apply` with the app's own Jinja `chat_template` instead of the model's (NULL:
/// the model's). The way to chat with a model whose own template the app does not trust (a
/// file from the internet: its template runs in tern's sandboxed renderer either way, but the
/// app decides the prompt format) or that has none. The template sees `messages` (`role`,
/// `content`), `add_generation_prompt`, `bos_token` and `eos_token` (the model's, as text), as
/// in Hugging Face `apply_chat_template`.
///
/// Thread-safety: any thread, concurrently with any call on the model or its sessions.
///
/// Errors: as `tern_chat_apply`; `TERN_TEMPLATE` also for a template that does not parse.
///
/// # Safety
/// As `tern_chat_apply`; `chat_template` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn tern_chat_apply_template(
    model: *mut tern_model,
    chat_template: *const c_char,
    messages: *const tern_chat_message,
    n_messages: usize,
    add_generation_prompt: i32,
    out_text: *mut *mut c_char,
) -> tern_status {
    boundary("tern_chat_apply_template", || {
        // SAFETY: the caller's contract.
        let template = if chat_template.is_null() {
            None
        } else {
            Some(unsafe { arg_str(chat_template, "chat_template") }?)
        };
        // SAFETY: the caller's contract.
        unsafe {
            apply(
                model,
                template,
                messages,
                n_messages,
                add_generation_prompt,
                out_text,
            )
        }
    })
}

/// The body of both: render with `template` (None: the model's).
///
/// # Safety
/// As `tern_chat_apply`.
unsafe fn apply(
    model: *mut tern_model,
    template: Option<&str>,
    messages: *const tern_chat_message,
    n_messages: usize,
    add_generation_prompt: i32,
    out_text: *mut *mut c_char,
) -> Result<(), Error> {
    // SAFETY: the caller's contract.
    let model = unsafe { arg_ref(model.cast_const(), "model") }?;
    let out_text = arg_out(out_text, "out_text")?;
    let msgs: &[tern_chat_message] = if n_messages == 0 {
        &[]
    } else if messages.is_null() {
        return Err(Error::null("messages"));
    } else {
        // SAFETY: `messages` points to `n_messages` messages (caller's contract).
        unsafe { std::slice::from_raw_parts(messages, n_messages) }
    };
    let mut conv = Vec::with_capacity(msgs.len());
    for (i, m) in msgs.iter().enumerate() {
        // SAFETY: the caller's contract.
        let role = unsafe { arg_str(m.role, &format!("messages[{i}].role")) }?;
        let content = unsafe { arg_str(m.content, &format!("messages[{i}].content")) }?;
        conv.push(ChatMessage::new(role, content));
    }
    let m = &model.model;
    let tok = m.tokenizer()?;
    let template = match template {
        Some(t) => t,
        None => m
            .meta()
            .tokenizer
            .as_ref()
            .and_then(|t| t.chat_template.as_deref())
            .ok_or_else(|| {
                Error::new(
                    tern_status::TERN_TEMPLATE,
                    "this model has no chat template: pass your own (tern_chat_apply_template) \
                     or build the prompt yourself",
                )
            })?,
    };
    let text_of = |id: Option<u32>| {
        id.and_then(|i| tok.token_text(i).ok())
            .unwrap_or("")
            .to_string()
    };
    let rendered = render_chat(
        template,
        &conv,
        add_generation_prompt != 0,
        &text_of(tok.bos()),
        &text_of(tok.eos()),
    )
    .map_err(|e| Error::new(tern_status::TERN_TEMPLATE, e.to_string()))?;
    let c = CString::new(rendered)
        .map_err(|_| Error::invalid("the rendered conversation contains a NUL byte"))?;
    // SAFETY: non-NULL and writable (caller's contract).
    unsafe { out_text.write(c.into_raw()) };
    Ok(())
}

/// Free a string returned by tern (NULL is ignored). Thread-safety: any thread, once per string.
///
/// # Safety
/// `s` is NULL or a string tern returned (`tern_chat_apply`, `tern_chat_apply_template`,
/// `tern_detokenize`, `tern_model_get_string`) not yet freed.
#[no_mangle]
pub unsafe extern "C" fn tern_string_free(s: *mut c_char) {
    boundary_void("tern_string_free", || {
        if !s.is_null() {
            // SAFETY: made by CString::into_raw, freed once (caller's contract).
            drop(unsafe { CString::from_raw(s) });
        }
    })
}
