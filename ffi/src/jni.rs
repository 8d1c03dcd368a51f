//! JNI glue for the Kotlin wrapper (`android/`, class `dev.tern.Native`), feature `jni`.
//!
//! Every function here calls the C ABI above it, so Kotlin gets exactly the C semantics: a status
//! other than `TERN_OK` becomes a `dev.tern.TernException(status, tern_last_error())`. Handles
//! travel as `long`s (0 = none). On Android, `JNI_OnLoad` routes the `log` crate to logcat (tag
//! `tern`). Builds on Linux too, for the desktop JVM test in `tests/c/run.sh`.

use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use jni::objects::{JByteArray, JClass, JIntArray, JObject, JObjectArray, JString, JValue};
use jni::sys::{
    jboolean, jbyteArray, jdoubleArray, jfloat, jint, jintArray, jlong, jlongArray, jstring,
    JNI_VERSION_1_6,
};
use jni::JNIEnv;

use crate::chat::{tern_chat_apply, tern_chat_message, tern_string_free};
use crate::info::{
    tern_detokenize, tern_model_get_info, tern_model_get_string, tern_model_info, tern_tokenize,
    tern_tokens_free,
};
use crate::model::{tern_model, tern_model_free};
use crate::options::{
    tern_model_options_default, tern_sampling_default, tern_session_options_default,
    tern_session_report,
};
use crate::session::{
    tern_cancel, tern_score, tern_session, tern_session_free, tern_session_get_report,
    tern_session_new, tern_session_reset,
};
use crate::session_ext::{
    tern_bytes_free, tern_generate_ex, tern_generate_options_default, tern_session_restore,
    tern_session_save,
};
use crate::status::{tern_last_error, tern_status};

const EXCEPTION: &str = "dev/tern/TernException";

/// Library load: on Android, send `log` records to logcat (tern's logger, `crate::log`, passes
/// every record to logcat and to the app's `tern_set_log_callback`, if any).
#[no_mangle]
pub extern "system" fn JNI_OnLoad(_vm: *mut jni::sys::JavaVM, _reserved: *mut c_void) -> jint {
    #[cfg(target_os = "android")]
    if crate::log::install() {
        log::set_max_level(log::LevelFilter::Info);
    }
    JNI_VERSION_1_6
}

/// Throw `TernException(status, message)` unless an exception is already pending.
fn throw(env: &mut JNIEnv, status: i32, message: &str) {
    if env.exception_check().unwrap_or(true) {
        return;
    }
    let thrown = (|| -> jni::errors::Result<()> {
        let msg = env.new_string(message)?;
        let obj = env.new_object(
            EXCEPTION,
            "(ILjava/lang/String;)V",
            &[JValue::Int(status), JValue::Object(&msg)],
        )?;
        env.throw(jni::objects::JThrowable::from(obj))
    })();
    if thrown.is_err() && !env.exception_check().unwrap_or(true) {
        let _ = env.throw_new("java/lang/RuntimeException", message);
    }
}

/// Throw for a failed status (with this thread's last error); true when `s` is `TERN_OK`.
fn check(env: &mut JNIEnv, s: tern_status) -> bool {
    if s == tern_status::TERN_OK {
        return true;
    }
    // SAFETY: tern_last_error returns a valid NUL-terminated string.
    let msg = unsafe { CStr::from_ptr(tern_last_error()) }
        .to_string_lossy()
        .into_owned();
    throw(env, s as i32, &msg);
    false
}

/// The panic boundary of a JNI function: a panic becomes a `TernException(TERN_INTERNAL)`.
fn guard<'local, T>(
    env: &mut JNIEnv<'local>,
    default: T,
    f: impl FnOnce(&mut JNIEnv<'local>) -> Option<T>,
) -> T {
    match catch_unwind(AssertUnwindSafe(|| f(env))) {
        Ok(Some(v)) => v,
        Ok(None) => default,
        Err(_) => {
            throw(
                env,
                tern_status::TERN_INTERNAL as i32,
                "internal error in tern's JNI layer (a bug in tern, please report it)",
            );
            default
        }
    }
}

/// A Java string as a C string; throws (and returns None) when it is null or holds a NUL.
fn c_string(env: &mut JNIEnv, s: &JString, name: &str) -> Option<CString> {
    if s.is_null() {
        throw(
            env,
            tern_status::TERN_NULL_ARGUMENT as i32,
            &format!("{name} is null"),
        );
        return None;
    }
    let text: String = match env.get_string(s) {
        Ok(t) => t.into(),
        Err(_) => return None, // an exception is pending
    };
    match CString::new(text) {
        Ok(c) => Some(c),
        Err(_) => {
            throw(
                env,
                tern_status::TERN_INVALID_ARGUMENT as i32,
                &format!("{name} contains a NUL character"),
            );
            None
        }
    }
}

#[no_mangle]
pub extern "system" fn Java_dev_tern_Native_abiVersion(_env: JNIEnv, _class: JClass) -> jint {
    crate::tern_abi_version() as jint
}

#[no_mangle]
pub extern "system" fn Java_dev_tern_Native_version(mut env: JNIEnv, _class: JClass) -> jstring {
    guard(&mut env, std::ptr::null_mut(), |env| {
        env.new_string(env!("CARGO_PKG_VERSION"))
            .ok()
            .map(|s| s.into_raw())
    })
}

#[no_mangle]
pub extern "system" fn Java_dev_tern_Native_liveHandles(_env: JNIEnv, _class: JClass) -> jlong {
    crate::tern_debug_live_handles() as jlong
}

#[no_mangle]
pub extern "system" fn Java_dev_tern_Native_modelLoad(
    mut env: JNIEnv,
    _class: JClass,
    path: JString,
    device: jint,
    use_threads: jboolean,
    max_memory: jlong,
    cpu_threads: jint,
) -> jlong {
    guard(&mut env, 0, |env| {
        let path = c_string(env, &path, "path")?;
        let mut o = tern_model_options_default();
        o.device = device as u32;
        o.use_threads = u32::from(use_threads != 0);
        // 0 (or a negative value, which is no size): no cap.
        o.max_memory = u64::try_from(max_memory).unwrap_or(0);
        let mut lo = crate::options::tern_load_options_default();
        lo.cpu_threads = cpu_threads.max(0) as u32;
        let mut m: *mut tern_model = std::ptr::null_mut();
        // SAFETY: valid string, options and out-parameter.
        let s = unsafe { crate::model::tern_model_load_ex(path.as_ptr(), &o, &lo, &mut m) };
        check(env, s).then_some(m as jlong)
    })
}

#[no_mangle]
pub extern "system" fn Java_dev_tern_Native_modelFree(_env: JNIEnv, _class: JClass, model: jlong) {
    // SAFETY: the Kotlin wrapper passes a live handle once (or 0).
    unsafe { tern_model_free(model as *mut tern_model) }
}

#[no_mangle]
pub extern "system" fn Java_dev_tern_Native_sessionNew(
    mut env: JNIEnv,
    _class: JClass,
    model: jlong,
    n_ctx: jint,
    kv_format: jint,
    minicache: jint,
    minicache_start_layer: jint,
    minicache_t: jfloat,
    minicache_gamma: jfloat,
    kivi_group: jint,
    kivi_window: jint,
    llama_cpp_numerics: jboolean,
) -> jlong {
    guard(&mut env, 0, |env| {
        let mut o = tern_session_options_default();
        o.n_ctx = n_ctx.max(0) as u32;
        // Java ints are signed: a negative value passes as a large u32, which the C ABI refuses
        // (an unknown format / mode) or reads as a size.
        o.kv_format = kv_format as u32;
        o.minicache = minicache as u32;
        o.minicache_start_layer = minicache_start_layer as u32;
        o.minicache_t = minicache_t;
        o.minicache_gamma = minicache_gamma;
        o.kivi_group = kivi_group as u32;
        o.kivi_window = kivi_window as u32;
        o.llama_cpp_numerics = u32::from(llama_cpp_numerics != 0);
        let mut s: *mut tern_session = std::ptr::null_mut();
        // SAFETY: the wrapper passes a live model handle (or 0, which is a NULL status).
        let st = unsafe { tern_session_new(model as *mut tern_model, &o, &mut s) };
        check(env, st).then_some(s as jlong)
    })
}

/// `tern_session_get_report` as `long[]`: device, n_ctx, kv_format, kivi_group, kivi_window,
/// minicache, minicache_start_layer, minicache_t and minicache_gamma (`Float.floatToRawIntBits`),
/// llama_cpp_numerics, max_memory, kv_bytes.
#[no_mangle]
pub extern "system" fn Java_dev_tern_Native_sessionReport(
    mut env: JNIEnv,
    _class: JClass,
    session: jlong,
) -> jlongArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let mut r = tern_session_report {
            struct_size: std::mem::size_of::<tern_session_report>() as u32,
            ..Default::default()
        };
        // SAFETY: the wrapper passes a live session handle (or 0); `r` is writable, sized.
        let st = unsafe { tern_session_get_report(session as *const tern_session, &mut r) };
        if !check(env, st) {
            return None;
        }
        let v: [jlong; 12] = [
            jlong::from(r.device),
            jlong::from(r.n_ctx),
            jlong::from(r.kv_format),
            jlong::from(r.kivi_group),
            jlong::from(r.kivi_window),
            jlong::from(r.minicache),
            jlong::from(r.minicache_start_layer),
            jlong::from(r.minicache_t.to_bits()),
            jlong::from(r.minicache_gamma.to_bits()),
            jlong::from(r.llama_cpp_numerics),
            r.max_memory as jlong,
            r.kv_bytes as jlong,
        ];
        let arr = env.new_long_array(v.len() as i32).ok()?;
        env.set_long_array_region(&arr, 0, &v).ok()?;
        Some(arr.into_raw())
    })
}

#[no_mangle]
pub extern "system" fn Java_dev_tern_Native_sessionFree(
    _env: JNIEnv,
    _class: JClass,
    session: jlong,
) {
    // SAFETY: the Kotlin wrapper passes a live handle once (or 0), with no call on it running.
    unsafe { tern_session_free(session as *mut tern_session) }
}

#[no_mangle]
pub extern "system" fn Java_dev_tern_Native_sessionReset(
    mut env: JNIEnv,
    _class: JClass,
    session: jlong,
) {
    guard(&mut env, (), |env| {
        // SAFETY: the wrapper passes a live session handle (or 0).
        let s = unsafe { tern_session_reset(session as *mut tern_session) };
        check(env, s).then_some(())
    })
}

#[no_mangle]
pub extern "system" fn Java_dev_tern_Native_cancel(_env: JNIEnv, _class: JClass, session: jlong) {
    // SAFETY: the wrapper passes a live session handle (or 0).
    unsafe { tern_cancel(session as *mut tern_session) }
}

/// What the piece trampoline needs: the JNI environment of the calling thread and the callback.
struct Callback<'a, 'local> {
    env: &'a mut JNIEnv<'local>,
    callback: &'a JObject<'local>,
}

/// Calls `callback.onPiece(String): Boolean`; stops on `false` or on a Java exception (which stays
/// pending and is thrown when `generate` returns to Java).
unsafe extern "C" fn trampoline(piece: *const c_char, len: usize, user_data: *mut c_void) -> i32 {
    // SAFETY: `user_data` is the `Callback` that `generate` passed, alive for the whole call.
    let cb = unsafe { &mut *user_data.cast::<Callback<'_, '_>>() };
    // SAFETY: tern passes `len` bytes of UTF-8 at `piece`.
    let bytes = unsafe { std::slice::from_raw_parts(piece.cast::<u8>(), len) };
    let go_on = catch_unwind(AssertUnwindSafe(|| -> jni::errors::Result<bool> {
        let text = String::from_utf8_lossy(bytes);
        let s = cb.env.new_string(text.as_ref())?;
        let r = cb.env.call_method(
            cb.callback,
            "onPiece",
            "(Ljava/lang/String;)Z",
            &[JValue::Object(&s)],
        );
        let _ = cb.env.delete_local_ref(s);
        r?.z()
    }));
    match go_on {
        Ok(Ok(true)) => 0,
        _ => 1,
    }
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_dev_tern_Native_generate<'local>(
    mut env: JNIEnv<'local>,
    _class: JClass<'local>,
    session: jlong,
    prompt: JString<'local>,
    temperature: jfloat,
    top_k: jint,
    top_p: jfloat,
    min_p: jfloat,
    repeat_penalty: jfloat,
    repeat_last_n: jint,
    seed: jlong,
    max_tokens: jint,
    stop_strings: JObjectArray<'local>,
    stop_tokens: JIntArray<'local>,
    callback: JObject<'local>,
) {
    guard(&mut env, (), |env| {
        let prompt = c_string(env, &prompt, "prompt")?;
        let stops = strings(env, &stop_strings, "stopStrings")?;
        let stop_ptrs: Vec<*const c_char> = stops.iter().map(|c| c.as_ptr()).collect();
        let stop_ids: Vec<u32> = int_array(env, &stop_tokens, "stopTokens")?
            .into_iter()
            .map(|t| t as u32)
            .collect();
        if callback.is_null() {
            throw(
                env,
                tern_status::TERN_NULL_ARGUMENT as i32,
                "callback is null",
            );
            return None;
        }
        let mut p = tern_sampling_default();
        p.temperature = temperature;
        p.top_k = top_k.max(0) as u32;
        p.top_p = top_p;
        p.min_p = min_p;
        p.repeat_penalty = repeat_penalty;
        p.repeat_last_n = repeat_last_n.max(0) as u32;
        p.seed = seed as u64;
        let mut cb = Callback {
            env,
            callback: &callback,
        };
        let mut go = tern_generate_options_default();
        go.max_tokens = max_tokens;
        go.stop_strings = stop_ptrs.as_ptr();
        go.n_stop_strings = stop_ptrs.len();
        go.stop_tokens = stop_ids.as_ptr();
        go.n_stop_tokens = stop_ids.len();
        // SAFETY: live session handle (or 0), valid strings and options (the stop arrays live
        // until the call returns); `cb` outlives the call.
        let s = unsafe {
            tern_generate_ex(
                session as *mut tern_session,
                prompt.as_ptr(),
                &p,
                &go,
                Some(trampoline),
                (&mut cb as *mut Callback<'_, '_>).cast(),
            )
        };
        check(cb.env, s).then_some(())
    })
}

#[no_mangle]
pub extern "system" fn Java_dev_tern_Native_score(
    mut env: JNIEnv,
    _class: JClass,
    session: jlong,
    text: JString,
) -> jdoubleArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let text = c_string(env, &text, "text")?;
        let (mut total, mut n) = (0.0f64, 0usize);
        // SAFETY: live session handle (or 0), valid string and out-parameters.
        let s = unsafe {
            tern_score(
                session as *mut tern_session,
                text.as_ptr(),
                &mut total,
                &mut n,
            )
        };
        if !check(env, s) {
            return None;
        }
        let arr = env.new_double_array(2).ok()?;
        env.set_double_array_region(&arr, 0, &[total, n as f64])
            .ok()?;
        Some(arr.into_raw())
    })
}

fn strings(env: &mut JNIEnv, arr: &JObjectArray, name: &str) -> Option<Vec<CString>> {
    if arr.is_null() {
        throw(
            env,
            tern_status::TERN_NULL_ARGUMENT as i32,
            &format!("{name} is null"),
        );
        return None;
    }
    let n = env.get_array_length(arr).ok()?;
    let mut out = Vec::with_capacity(n.max(0) as usize);
    for i in 0..n {
        let o = env.get_object_array_element(arr, i).ok()?;
        let s = JString::from(o);
        out.push(c_string(env, &s, &format!("{name}[{i}]"))?);
        let _ = env.delete_local_ref(s);
    }
    Some(out)
}

#[no_mangle]
pub extern "system" fn Java_dev_tern_Native_chatApply(
    mut env: JNIEnv,
    _class: JClass,
    model: jlong,
    roles: JObjectArray,
    contents: JObjectArray,
    add_generation_prompt: jboolean,
) -> jstring {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let roles = strings(env, &roles, "roles")?;
        let contents = strings(env, &contents, "contents")?;
        if roles.len() != contents.len() {
            throw(
                env,
                tern_status::TERN_INVALID_ARGUMENT as i32,
                "roles and contents differ in length",
            );
            return None;
        }
        let msgs: Vec<tern_chat_message> = roles
            .iter()
            .zip(&contents)
            .map(|(r, c)| tern_chat_message {
                role: r.as_ptr(),
                content: c.as_ptr(),
            })
            .collect();
        let mut out: *mut c_char = std::ptr::null_mut();
        // SAFETY: live model handle (or 0), `msgs` valid for the call, valid out-parameter.
        let s = unsafe {
            tern_chat_apply(
                model as *mut tern_model,
                msgs.as_ptr(),
                msgs.len(),
                i32::from(add_generation_prompt != 0),
                &mut out,
            )
        };
        if !check(env, s) {
            return None;
        }
        // SAFETY: tern_chat_apply wrote a NUL-terminated string, freed right after the copy.
        let text = unsafe { CStr::from_ptr(out) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: `out` came from tern_chat_apply and is freed once.
        unsafe { tern_string_free(out) };
        env.new_string(text).ok().map(|s| s.into_raw())
    })
}

/// A Java `int[]` (null: empty).
fn int_array(env: &mut JNIEnv, arr: &JIntArray, _name: &str) -> Option<Vec<jint>> {
    if arr.is_null() {
        return Some(Vec::new());
    }
    let n = env.get_array_length(arr).ok()?;
    let mut v = vec![0; n.max(0) as usize];
    env.get_int_array_region(arr, 0, &mut v).ok()?;
    Some(v)
}

/// A string tern allocated, as a Java string (NULL: null), freed.
fn take_string(env: &mut JNIEnv, p: *mut c_char) -> Option<jstring> {
    if p.is_null() {
        return Some(std::ptr::null_mut());
    }
    // SAFETY: a NUL-terminated string from tern, freed once below.
    let text = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    // SAFETY: from tern, not yet freed.
    unsafe { tern_string_free(p) };
    env.new_string(text).ok().map(|s| s.into_raw())
}

/// `tern_model_get_info` as `long[]`: device, nVocab, nCtxTrain, nLayer, nEmbd, nHead, nHeadKv,
/// headDim, bos, eos, eot, pad, unk (-1: none), addBos, hasTokenizer, hasChatTemplate,
/// cpuThreads, weightBytes.
#[no_mangle]
pub extern "system" fn Java_dev_tern_Native_modelInfo(
    mut env: JNIEnv,
    _class: JClass,
    model: jlong,
) -> jlongArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let mut i = tern_model_info {
            struct_size: std::mem::size_of::<tern_model_info>() as u32,
            ..Default::default()
        };
        // SAFETY: a live model handle (or 0); `i` writable and sized.
        let st = unsafe { tern_model_get_info(model as *const tern_model, &mut i) };
        if !check(env, st) {
            return None;
        }
        let v: [jlong; 18] = [
            jlong::from(i.device),
            jlong::from(i.n_vocab),
            jlong::from(i.n_ctx_train),
            jlong::from(i.n_layer),
            jlong::from(i.n_embd),
            jlong::from(i.n_head),
            jlong::from(i.n_head_kv),
            jlong::from(i.head_dim),
            jlong::from(i.bos),
            jlong::from(i.eos),
            jlong::from(i.eot),
            jlong::from(i.pad),
            jlong::from(i.unk),
            jlong::from(i.add_bos),
            jlong::from(i.has_tokenizer),
            jlong::from(i.has_chat_template),
            jlong::from(i.cpu_threads),
            i.weight_bytes as jlong,
        ];
        let arr = env.new_long_array(v.len() as i32).ok()?;
        env.set_long_array_region(&arr, 0, &v).ok()?;
        Some(arr.into_raw())
    })
}

/// `tern_model_get_string` (`which`: `TERN_MODEL_STR_*`); null when the model has none.
#[no_mangle]
pub extern "system" fn Java_dev_tern_Native_modelString(
    mut env: JNIEnv,
    _class: JClass,
    model: jlong,
    which: jint,
) -> jstring {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let mut p: *mut c_char = std::ptr::null_mut();
        // SAFETY: a live model handle (or 0); `p` writable.
        let st = unsafe { tern_model_get_string(model as *const tern_model, which as u32, &mut p) };
        if !check(env, st) {
            return None;
        }
        take_string(env, p)
    })
}

#[no_mangle]
pub extern "system" fn Java_dev_tern_Native_tokenize(
    mut env: JNIEnv,
    _class: JClass,
    model: jlong,
    text: JString,
    add_special: jboolean,
    parse_special: jboolean,
) -> jintArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let text = c_string(env, &text, "text")?;
        let (mut p, mut n) = (std::ptr::null_mut::<u32>(), 0usize);
        // SAFETY: a live model handle (or 0), a valid string, writable outputs.
        let st = unsafe {
            tern_tokenize(
                model as *const tern_model,
                text.as_ptr(),
                i32::from(add_special != 0),
                i32::from(parse_special != 0),
                &mut p,
                &mut n,
            )
        };
        if !check(env, st) {
            return None;
        }
        // SAFETY: `n` ids from tern_tokenize, freed once below.
        let ids: Vec<jint> = unsafe { std::slice::from_raw_parts(p, n) }
            .iter()
            .map(|&t| t as jint)
            .collect();
        // SAFETY: from tern_tokenize with its count.
        unsafe { tern_tokens_free(p, n) };
        let arr = env.new_int_array(ids.len() as i32).ok()?;
        env.set_int_array_region(&arr, 0, &ids).ok()?;
        Some(arr.into_raw())
    })
}

#[no_mangle]
pub extern "system" fn Java_dev_tern_Native_detokenize(
    mut env: JNIEnv,
    _class: JClass,
    model: jlong,
    tokens: JIntArray,
) -> jstring {
    guard(&mut env, std::ptr::null_mut(), |env| {
        if tokens.is_null() {
            throw(
                env,
                tern_status::TERN_NULL_ARGUMENT as i32,
                "tokens is null",
            );
            return None;
        }
        let ids: Vec<u32> = int_array(env, &tokens, "tokens")?
            .into_iter()
            .map(|t| t as u32)
            .collect();
        let mut p: *mut c_char = std::ptr::null_mut();
        // SAFETY: a live model handle (or 0), `ids` readable, `p` writable.
        let st =
            unsafe { tern_detokenize(model as *const tern_model, ids.as_ptr(), ids.len(), &mut p) };
        if !check(env, st) {
            return None;
        }
        take_string(env, p)
    })
}

/// `tern_chat_apply_template`: `template` null = the model's own.
#[no_mangle]
pub extern "system" fn Java_dev_tern_Native_chatApplyTemplate(
    mut env: JNIEnv,
    _class: JClass,
    model: jlong,
    template: JString,
    roles: JObjectArray,
    contents: JObjectArray,
    add_generation_prompt: jboolean,
) -> jstring {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let tpl = if template.is_null() {
            None
        } else {
            Some(c_string(env, &template, "template")?)
        };
        let roles = strings(env, &roles, "roles")?;
        let contents = strings(env, &contents, "contents")?;
        if roles.len() != contents.len() {
            throw(
                env,
                tern_status::TERN_INVALID_ARGUMENT as i32,
                "roles and contents differ in length",
            );
            return None;
        }
        let msgs: Vec<tern_chat_message> = roles
            .iter()
            .zip(&contents)
            .map(|(r, c)| tern_chat_message {
                role: r.as_ptr(),
                content: c.as_ptr(),
            })
            .collect();
        let mut out: *mut c_char = std::ptr::null_mut();
        // SAFETY: a live model handle (or 0); the strings live until the call returns.
        let st = unsafe {
            crate::chat::tern_chat_apply_template(
                model as *mut tern_model,
                tpl.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
                msgs.as_ptr(),
                msgs.len(),
                i32::from(add_generation_prompt != 0),
                &mut out,
            )
        };
        if !check(env, st) {
            return None;
        }
        take_string(env, out)
    })
}

/// `tern_session_save`: the state as a `byte[]`.
#[no_mangle]
pub extern "system" fn Java_dev_tern_Native_sessionSave(
    mut env: JNIEnv,
    _class: JClass,
    session: jlong,
) -> jbyteArray {
    guard(&mut env, std::ptr::null_mut(), |env| {
        let (mut p, mut n) = (std::ptr::null_mut::<u8>(), 0usize);
        // SAFETY: a live session handle (or 0); writable outputs.
        let st = unsafe { tern_session_save(session as *mut tern_session, &mut p, &mut n) };
        if !check(env, st) {
            return None;
        }
        // SAFETY: `n` bytes from tern_session_save, freed once below.
        let arr = env
            .byte_array_from_slice(unsafe { std::slice::from_raw_parts(p, n) })
            .ok();
        // SAFETY: from tern_session_save with its length.
        unsafe { tern_bytes_free(p, n) };
        Some(arr?.into_raw())
    })
}

/// `tern_session_restore` from a `byte[]`.
#[no_mangle]
pub extern "system" fn Java_dev_tern_Native_sessionRestore(
    mut env: JNIEnv,
    _class: JClass,
    session: jlong,
    state: JByteArray,
) {
    guard(&mut env, (), |env| {
        if state.is_null() {
            throw(env, tern_status::TERN_NULL_ARGUMENT as i32, "state is null");
            return None;
        }
        let bytes = env.convert_byte_array(&state).ok()?;
        // SAFETY: a live session handle (or 0); `bytes` readable.
        let st = unsafe {
            tern_session_restore(session as *mut tern_session, bytes.as_ptr(), bytes.len())
        };
        check(env, st).then_some(())
    })
}
