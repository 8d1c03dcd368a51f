//! The log callback: the `log` crate's records (everything tern logs: loading, the device it
//! took, fallbacks, warnings) routed to a C function with a level.

use std::ffi::{c_char, c_void, CString};
use std::sync::RwLock;

use crate::status::{boundary, tern_status, Error};

/// `tern_log_callback` level: errors only. Also `tern_set_log_callback`'s `max_level`.
pub const TERN_LOG_ERROR: i32 = 1;
/// Warnings.
pub const TERN_LOG_WARN: i32 = 2;
/// Information (the model loaded, the device taken, a GPU fallback): the default level.
pub const TERN_LOG_INFO: i32 = 3;
/// Debugging detail (per call).
pub const TERN_LOG_DEBUG: i32 = 4;
/// Everything.
pub const TERN_LOG_TRACE: i32 = 5;
/// `tern_set_log_callback`'s `max_level`: nothing.
pub const TERN_LOG_OFF: i32 = 0;

/// Receives one log record: `level` one of `TERN_LOG_*`, `target` the module that logged
/// (`"tern_engine::backend"`, ...), `message` the text; both NUL-terminated UTF-8, valid only
/// during the call. Called on the thread that logged — any thread, possibly several at once
/// (tern's worker threads, the app's threads calling tern): it must be thread-safe, and must not
/// call `tern_set_log_callback` (it would wait for itself).
#[allow(non_camel_case_types)]
pub type tern_log_callback = Option<
    unsafe extern "C" fn(
        level: i32,
        target: *const c_char,
        message: *const c_char,
        user_data: *mut c_void,
    ),
>;

struct Sink {
    cb: unsafe extern "C" fn(i32, *const c_char, *const c_char, *mut c_void),
    user_data: usize,
}

static SINK: RwLock<Option<Sink>> = RwLock::new(None);

struct CLogger;

static LOGGER: CLogger = CLogger;

fn level_code(l: log::Level) -> i32 {
    match l {
        log::Level::Error => TERN_LOG_ERROR,
        log::Level::Warn => TERN_LOG_WARN,
        log::Level::Info => TERN_LOG_INFO,
        log::Level::Debug => TERN_LOG_DEBUG,
        log::Level::Trace => TERN_LOG_TRACE,
    }
}

impl log::Log for CLogger {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &log::Record) {
        if !self.enabled(r.metadata()) {
            return;
        }
        #[cfg(all(target_os = "android", feature = "jni"))]
        android_log(r);
        let Ok(sink) = SINK.read() else { return };
        let Some(s) = sink.as_ref() else { return };
        let target = CString::new(r.target().replace('\0', " ")).unwrap_or_default();
        let msg = CString::new(r.args().to_string().replace('\0', "\\0")).unwrap_or_default();
        // SAFETY: the callback and its user data were given by the app, which keeps them valid
        // until it replaces them (`tern_set_log_callback`'s contract); the strings live for the
        // call.
        unsafe {
            (s.cb)(
                level_code(r.level()),
                target.as_ptr(),
                msg.as_ptr(),
                s.user_data as _,
            )
        };
    }

    fn flush(&self) {}
}

/// One record to logcat (tag `tern`).
#[cfg(all(target_os = "android", feature = "jni"))]
fn android_log(r: &log::Record) {
    use log::Log;
    static L: std::sync::OnceLock<android_logger::AndroidLogger> = std::sync::OnceLock::new();
    L.get_or_init(|| {
        android_logger::AndroidLogger::new(
            android_logger::Config::default()
                .with_max_level(log::LevelFilter::Trace)
                .with_tag("tern"),
        )
    })
    .log(r);
}

/// Install tern's logger as the process's `log` logger (once). `false` when another logger was
/// installed first (a Rust host app with its own).
pub(crate) fn install() -> bool {
    static INSTALLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *INSTALLED.get_or_init(|| log::set_logger(&LOGGER).is_ok())
}

/// Route tern's log records of `max_level` (`TERN_LOG_*`; `TERN_LOG_OFF` = none) and more
/// severe to `cb` with `user_data`; `cb` NULL stops the routing. Replaces the previous callback:
/// when this returns, the old one is no longer called (calls in flight have finished). Without a
/// callback nothing is logged (on Android with the JNI layer, records also go to logcat, tag
/// `tern`).
///
/// Thread-safety: safe from any thread; not from inside the callback. The callback itself is
/// called on whichever thread logs, possibly concurrently (see `tern_log_callback`).
///
/// Errors: `TERN_INVALID_ARGUMENT` (`max_level` not a `TERN_LOG_*`), `TERN_UNSUPPORTED`
/// (the host process installed another Rust `log` logger first: tern's records go to it).
///
/// # Safety
/// `cb` is NULL or a function safe to call with `user_data` from any thread until it is
/// replaced.
#[no_mangle]
pub unsafe extern "C" fn tern_set_log_callback(
    cb: tern_log_callback,
    max_level: i32,
    user_data: *mut c_void,
) -> tern_status {
    boundary("tern_set_log_callback", || {
        let filter = match max_level {
            TERN_LOG_OFF => log::LevelFilter::Off,
            TERN_LOG_ERROR => log::LevelFilter::Error,
            TERN_LOG_WARN => log::LevelFilter::Warn,
            TERN_LOG_INFO => log::LevelFilter::Info,
            TERN_LOG_DEBUG => log::LevelFilter::Debug,
            TERN_LOG_TRACE => log::LevelFilter::Trace,
            o => {
                return Err(Error::invalid(format!(
                    "max_level {o}: expected TERN_LOG_OFF (0) … TERN_LOG_TRACE (5)"
                )))
            }
        };
        if !install() {
            return Err(Error::new(
                tern_status::TERN_UNSUPPORTED,
                "another `log` logger was installed in this process before tern's: tern's \
                 records go to it",
            ));
        }
        let mut sink = SINK.write().unwrap_or_else(|p| p.into_inner());
        *sink = cb.map(|cb| Sink {
            cb,
            user_data: user_data as usize,
        });
        log::set_max_level(if sink.is_some() {
            filter
        } else {
            log::LevelFilter::Off
        });
        Ok(())
    })
}
