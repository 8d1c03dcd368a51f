//! JNI glue for the Kotlin wrapper (`android/`, class `dev.tern.Native`), feature `jni`.
//!
//! Every function here calls the C ABI above it, so Kotlin gets exactly the C semantics: a status
//! other than `TERN_OK` becomes a `dev.tern.TernException(status, tern_last_error())`. Handles
//! travel as `long`s (0 = none). On Android, `JNI_OnLoad` routes the `log` crate to logcat (tag
//! `tern`). Builds on Linux too, for the desktop JVM test in `tests/c/run.sh`.

use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use jni::objects::{JClass, JObject, JObjectArray, JString, JValue};
use jni::sys::{jboolean, jdoubleArray, jfloat, jint, jlong, jlongArray, jstring, JNI_VERSION_1_6};
use jni::JNIEnv;

use crate::chat::{tern_chat_apply, tern_chat_message, tern_string_free};
use crate::model::{tern_model, tern_model_free, tern_model_load};
use crate::options::{
    tern_model_options_default, tern_sampling_default, tern_session_options_default,
    tern_session_report,
};
use crate::session::{
    tern_cancel, tern_generate, tern_score, tern_session, tern_session_free,
    tern_session_get_report, tern_session_new, tern_session_reset,
};
use crate::status::{tern_last_error, tern_status};

const EXCEPTION: &str = "dev/tern/TernException";

/// Library load: on Android, send `log` records to logcat.
#[no_mangle]
pub extern "system" fn JNI_OnLoad(_vm: *mut jni::sys::JavaVM, _reserved: *mut c_void) -> jint {
    #[cfg(target_os = "android")]
    android_logger::init_once(
        android_logger::Config::default()
            .with_max_level(log::LevelFilter::Info)
            .with_tag("tern"),
    );
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
) -> jlong {
    guard(&mut env, 0, |env| {
        let path = c_string(env, &path, "path")?;
        let mut o = tern_model_options_default();
        o.device = device as u32;
        o.use_threads = u32::from(use_threads != 0);
        // 0 (or a negative value, which is no size): no cap.
        o.max_memory = u64::try_from(max_memory).unwrap_or(0);
        let mut m: *mut tern_model = std::ptr::null_mut();
        // SAFETY: valid string, options and out-parameter.
        let s = unsafe { tern_model_load(path.as_ptr(), &o, &mut m) };
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
    callback: JObject<'local>,
) {
    guard(&mut env, (), |env| {
        let prompt = c_string(env, &prompt, "prompt")?;
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
        // SAFETY: live session handle (or 0), valid strings and options; `cb` outlives the call.
        let s = unsafe {
            tern_generate(
                session as *mut tern_session,
                prompt.as_ptr(),
                &p,
                max_tokens,
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
