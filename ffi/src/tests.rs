//! Unit tests of the boundary machinery, and of scoring and generation on SmolLM2 against the
//! engine called directly. The C test (`tests/c`) covers the ABI from C.

use std::ffi::{CStr, CString};
use std::ptr;

use tern_engine::{EngineError, GenerateOptions, Model, SamplingParams, Session};

use crate::options::{read_versioned, tern_sampling, tern_session_options, tern_session_report};
use crate::status::{boundary, engine_status, Error};
use crate::*;

fn last_error() -> String {
    // SAFETY: tern_last_error never returns NULL and its string is NUL-terminated.
    unsafe { CStr::from_ptr(tern_last_error()) }
        .to_str()
        .unwrap()
        .to_string()
}

#[test]
fn versions_and_status_names() {
    assert_eq!(tern_abi_version(), TERN_ABI_VERSION);
    // SAFETY: static NUL-terminated string.
    let v = unsafe { CStr::from_ptr(tern_version()) };
    assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    for (code, name) in [
        (0, "TERN_OK"),
        (2, "TERN_NULL_ARGUMENT"),
        (8, "TERN_CANCELLED"),
        (13, "TERN_NUMERIC"),
        (14, "TERN_DEVICE_LOST"),
        // The first number that is not a status (15 became TERN_STATE_MISMATCH, issue 32).
        (16, "TERN_UNKNOWN"),
        (-5, "TERN_UNKNOWN"),
    ] {
        // SAFETY: static NUL-terminated strings.
        let s = unsafe { CStr::from_ptr(tern_status_name(code)) };
        assert_eq!(s.to_str().unwrap(), name);
    }
    assert_eq!(tern_status::TERN_NUMERIC as i32, 13);
    assert_eq!(tern_status::TERN_DEVICE_LOST as i32, 14);
}

#[test]
fn panics_become_internal_and_last_error_is_per_thread() {
    let s = boundary("tern_test", || panic!("boom"));
    assert_eq!(s, tern_status::TERN_INTERNAL);
    assert!(last_error().contains("boom"), "{}", last_error());
    // Another thread sees its own (empty) message.
    let other = std::thread::spawn(last_error).join().unwrap();
    assert_eq!(other, "");
    // A success clears it; a failure sets it.
    assert_eq!(boundary("tern_test", || Ok(())), tern_status::TERN_OK);
    assert_eq!(last_error(), "");
    let s = boundary("tern_test", || Err(Error::invalid("bad\0value")));
    assert_eq!(s, tern_status::TERN_INVALID_ARGUMENT);
    assert_eq!(last_error(), "tern_test: bad\\0value");
}

#[test]
fn engine_errors_map_to_stable_statuses() {
    use tern_status::*;
    assert_eq!(engine_status(&EngineError::Cancelled), TERN_CANCELLED);
    // A lost device has its own status, whichever way it arrives.
    assert_eq!(
        engine_status(&EngineError::DeviceLost("destroyed".into())),
        TERN_DEVICE_LOST
    );
    let lost = EngineError::gpu_device_lost_for_tests("reset");
    assert!(matches!(lost, EngineError::DeviceLost(_)));
    assert_eq!(engine_status(&lost), TERN_DEVICE_LOST);
    assert_eq!(
        engine_status(&EngineError::PromptTooLong { prompt: 9, ctx: 8 }),
        TERN_CONTEXT_FULL
    );
    assert_eq!(engine_status(&EngineError::NoTokenizer), TERN_NO_TOKENIZER);
    let io = std::io::Error::new(std::io::ErrorKind::NotFound, "x");
    assert_eq!(engine_status(&EngineError::Io(io)), TERN_IO);
    let f = tern_format::FormatError::UnsupportedVersion {
        found: 2,
        supported: 1,
    };
    assert_eq!(engine_status(&EngineError::Format(f)), TERN_UNSUPPORTED);
}

#[test]
fn versioned_structs() {
    // NULL: the defaults.
    // SAFETY: NULL is allowed.
    let d = unsafe { read_versioned::<tern_sampling>(ptr::null(), tern_sampling_default()) };
    assert_eq!(d.unwrap(), tern_sampling_default());
    // Too small.
    let mut small = tern_session_options_default();
    small.struct_size = 4;
    // SAFETY: a valid struct.
    let e = unsafe { read_versioned(&small, tern_session_options_default()) }.unwrap_err();
    assert_eq!(e.status, tern_status::TERN_INVALID_ARGUMENT);
    // tern_model_options of the first version (12 bytes, before max_memory): accepted, no
    // budget; the current version carries it.
    let old = [
        12u32,
        crate::options::TERN_DEVICE_GPU,
        0,
        0xdead,
        0xbeef,
        0xf00d,
    ];
    // SAFETY: `old` holds 24 readable bytes, struct_size says 12; u32 alignment is enough for
    // an unaligned read.
    let got = unsafe {
        read_versioned(
            old.as_ptr().cast::<crate::options::tern_model_options>(),
            crate::options::tern_model_options_default(),
        )
    }
    .unwrap();
    assert_eq!((got.device, got.use_threads, got.max_memory), (2, 0, 0));
    let mut cur = crate::options::tern_model_options_default();
    assert_eq!(cur.struct_size, 24);
    cur.max_memory = 5 << 20;
    // SAFETY: a valid struct.
    let got = unsafe { read_versioned(&cur, crate::options::tern_model_options_default()) };
    assert_eq!(got.unwrap().max_memory, 5 << 20);
    let mut small = crate::options::tern_model_options_default();
    small.struct_size = 8;
    // SAFETY: a valid struct.
    let e = unsafe { read_versioned(&small, crate::options::tern_model_options_default()) };
    assert_eq!(e.unwrap_err().status, tern_status::TERN_INVALID_ARGUMENT);
    // A caller with a newer, larger struct: the known fields are read, the rest ignored.
    #[repr(C)]
    struct Newer {
        base: tern_session_options,
        extra: u64,
    }
    let newer = Newer {
        base: tern_session_options {
            struct_size: std::mem::size_of::<Newer>() as u32,
            n_ctx: 77,
            llama_cpp_numerics: 1,
            kv_format: crate::options::TERN_KV_Q4,
            ..tern_session_options_default()
        },
        extra: u64::MAX,
    };
    // SAFETY: `newer` holds struct_size readable bytes.
    let got = unsafe { read_versioned(&newer.base, tern_session_options_default()) }.unwrap();
    assert_eq!(got.n_ctx, 77);
    assert_eq!(got.llama_cpp_numerics, 1);
    assert_eq!(got.kv_format, crate::options::TERN_KV_Q4);
    assert_eq!(
        got.struct_size as usize,
        std::mem::size_of::<tern_session_options>()
    );
    // A caller compiled against the first version (struct_size 8: no llama_cpp_numerics): the
    // bytes after its struct are not read, the field keeps its default.
    let older = tern_session_options {
        struct_size: 8,
        n_ctx: 5,
        llama_cpp_numerics: 0xdead,
        kv_format: 0xdead,
        ..tern_session_options_default()
    };
    // SAFETY: `older` holds (more than) struct_size readable bytes.
    let got = unsafe { read_versioned(&older, tern_session_options_default()) }.unwrap();
    assert_eq!((got.n_ctx, got.llama_cpp_numerics), (5, 0));
    // Issue 28: a caller that never set kv_format gets the library's default format.
    assert_eq!(got.kv_format, crate::options::TERN_KV_DEFAULT);
    // A caller compiled before the KV-cache fields (struct ends after llama_cpp_numerics).
    let before_kv = tern_session_options {
        struct_size: std::mem::offset_of!(tern_session_options, kv_format) as u32,
        n_ctx: 9,
        llama_cpp_numerics: 1,
        kv_format: crate::options::TERN_KV_Q2,
        minicache: crate::options::TERN_MINICACHE_ON,
        ..tern_session_options_default()
    };
    // SAFETY: as above.
    let got = unsafe { read_versioned(&before_kv, tern_session_options_default()) }.unwrap();
    assert_eq!((got.n_ctx, got.llama_cpp_numerics), (9, 1));
    assert_eq!(
        (got.kv_format, got.minicache),
        (
            crate::options::TERN_KV_DEFAULT,
            crate::options::TERN_MINICACHE_OFF
        )
    );
}

/// The default model's path (`tern fetch-default`, run once per test process: two tests running
/// it at the same time would race on the cache).
fn default_model_path() -> String {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let out = std::process::Command::new(tern_tests::tern_bin())
            .arg("fetch-default")
            .output()
            .expect("run tern fetch-default");
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    })
    .clone()
}

/// `tern_score` (chunked, 64 tokens per forward call) equals the log-softmax of one `eval_all`
/// over the whole text, computed here independently; `tern_generate` equals the engine's greedy
/// generation.
#[test]
fn score_and_generate_match_the_engine() {
    let path = default_model_path();
    let text = "The cat sat on the mat. It was a sunny day, and the children played in the park \
                until their parents called them home for dinner. After dinner they read books, \
                talked about their day and went to bed early, because school started at eight the \
                next morning and nobody wanted to be late again. On Saturday the family drove to \
                the seaside, where the children built a castle of sand and their grandmother told \
                them stories about the old lighthouse on the hill.";

    let model = Model::open(std::path::Path::new(&path)).unwrap();
    let ids = model.tokenize(text, true).unwrap();
    assert!(
        ids.len() > 64 + 10,
        "{} tokens: need more than one chunk",
        ids.len()
    );
    let mut s = Session::new(&model, 256).unwrap();
    let logits = s.eval_all(&ids).unwrap();
    let nv = model.n_vocab();
    let mut want = 0.0f64;
    for p in 0..ids.len() - 1 {
        let row = &logits[p * nv..(p + 1) * nv];
        let max = row.iter().cloned().fold(f32::MIN, f32::max) as f64;
        let lse = max
            + row
                .iter()
                .map(|&x| (x as f64 - max).exp())
                .sum::<f64>()
                .ln();
        want += row[ids[p + 1] as usize] as f64 - lse;
    }
    let mut expected_text = String::new();
    let mut s2 = Session::new(&model, 256).unwrap();
    let opts = GenerateOptions {
        max_tokens: 20,
        ..Default::default()
    };
    s2.generate(
        &model.tokenize("Once upon a time", true).unwrap(),
        &SamplingParams::greedy(),
        &opts,
        &mut |p| {
            expected_text.push_str(p);
            true
        },
    )
    .unwrap();

    let cpath = CString::new(path).unwrap();
    let mut m = ptr::null_mut();
    let mut sess = ptr::null_mut();
    // The f32 reference cache, as `Session::new` (the library's default is q8).
    let so = tern_session_options {
        n_ctx: 256,
        kv_format: TERN_KV_F32,
        ..tern_session_options_default()
    };
    // SAFETY: valid arguments; handles freed below.
    unsafe {
        assert_eq!(
            tern_model_load(cpath.as_ptr(), ptr::null(), &mut m),
            tern_status::TERN_OK
        );
        assert_eq!(tern_session_new(m, &so, &mut sess), tern_status::TERN_OK);
    }
    let (mut total, mut n) = (0.0, 0usize);
    let ctext = CString::new(text).unwrap();
    // SAFETY: live handle, valid outputs.
    let st = unsafe { tern_score(sess, ctext.as_ptr(), &mut total, &mut n) };
    assert_eq!(st, tern_status::TERN_OK);
    assert_eq!(n, ids.len() - 1);
    assert!(
        (total - want).abs() < 1e-6 * want.abs(),
        "tern_score {total} vs eval_all {want}"
    );

    unsafe extern "C" fn collect(
        p: *const std::ffi::c_char,
        len: usize,
        ud: *mut std::ffi::c_void,
    ) -> i32 {
        // SAFETY: tern passes len bytes at p; ud is the String below.
        let (bytes, out) = unsafe {
            (
                std::slice::from_raw_parts(p.cast::<u8>(), len),
                &mut *ud.cast::<String>(),
            )
        };
        out.push_str(std::str::from_utf8(bytes).unwrap());
        0
    }
    let mut got = String::new();
    let prompt = CString::new("Once upon a time").unwrap();
    // SAFETY: live handle, valid callback and user data.
    let st = unsafe {
        tern_generate(
            sess,
            prompt.as_ptr(),
            ptr::null(),
            20,
            Some(collect),
            (&mut got as *mut String).cast(),
        )
    };
    assert_eq!(st, tern_status::TERN_OK);
    assert_eq!(got, expected_text);
    // SAFETY: freed once.
    unsafe {
        tern_session_free(sess);
        tern_model_free(m);
    }
}

/// `tern_score` goes through the engine's fused scorer: its total equals what `tern score`
/// prints for the same tokens (the sum of the candidate's log-probabilities when the context is
/// the text's first token) within 1e-5.
#[test]
fn tern_score_equals_the_cli_score() {
    let path = default_model_path();
    let text = "The cat sat on the mat. It was a sunny day, and the children played in the park \
                until their parents called them home for dinner.";
    let model = Model::open(std::path::Path::new(&path)).unwrap();
    let tok = model.tokenizer().unwrap();
    let ids = model.tokenize(text, true).unwrap();
    // `tern score` scores a candidate after a context: split the text so that the context is
    // exactly the text's first token (BOS when the model adds one, else the first word).
    let (context, candidate) = if tok.add_bos() {
        ("", text)
    } else {
        text.split_at(text.find(' ').unwrap())
    };
    let out = std::process::Command::new(tern_tests::tern_bin())
        .args([
            "score",
            &path,
            "--device",
            "cpu",
            "--context",
            context,
            "--candidates",
            candidate,
        ])
        .output()
        .expect("run tern score");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `tern score` prints pretty JSON; read the three fields needed without a JSON crate.
    let json = String::from_utf8(out.stdout).unwrap();
    let field = |name: &str| -> &str {
        let at = json.find(&format!("\"{name}\": ")).expect(name) + name.len() + 4;
        let rest = &json[at..];
        let end = if rest.starts_with('[') {
            rest.find(']').unwrap() + 1
        } else {
            rest.find([',', '\n']).unwrap()
        };
        &rest[..end]
    };
    assert_eq!(field("context_tokens"), "1", "{json}");
    let cli_ids: Vec<u32> = field("tokens")
        .trim_matches(['[', ']'])
        .split(',')
        .map(|v| v.trim().parse().unwrap())
        .collect();
    assert_eq!(cli_ids, ids[1..], "the split changed the tokenization");
    let cli_total: f64 = field("sum").parse().unwrap();

    let cpath = CString::new(path).unwrap();
    let (mut m, mut sess) = (ptr::null_mut(), ptr::null_mut());
    let so = tern_session_options {
        n_ctx: 256,
        ..tern_session_options_default()
    };
    // SAFETY: valid arguments; handles freed below.
    unsafe {
        assert_eq!(
            tern_model_load(cpath.as_ptr(), ptr::null(), &mut m),
            tern_status::TERN_OK
        );
        assert_eq!(tern_session_new(m, &so, &mut sess), tern_status::TERN_OK);
    }
    let (mut total, mut n) = (0.0, 0usize);
    let ctext = CString::new(text).unwrap();
    // SAFETY: live handle, valid outputs.
    let st = unsafe { tern_score(sess, ctext.as_ptr(), &mut total, &mut n) };
    assert_eq!(st, tern_status::TERN_OK, "{}", last_error());
    assert_eq!(n, ids.len() - 1);
    eprintln!("tern_score {total} vs tern score {cli_total} over {n} tokens");
    assert!(
        (total - cli_total).abs() <= 1e-5,
        "tern_score {total} vs tern score {cli_total}"
    );
    // SAFETY: freed once.
    unsafe {
        tern_session_free(sess);
        tern_model_free(m);
    }
}

/// A model file missing a tensor is `TERN_CORRUPT_FILE` whatever the device (the GPU part is
/// skipped without an adapter unless `TERN_REQUIRE_GPU=1`).
#[test]
fn a_missing_tensor_is_corrupt_file_on_every_device() {
    let dir = tern_tests::scratch("ffi_missing_tensor");
    let full = dir.join("full.tern");
    let out = std::process::Command::new(tern_tests::tern_bin())
        .args(["pack"])
        .arg(tern_tests::golden("bitnet_hf/tiny_a"))
        .arg("-o")
        .arg(&full)
        .output()
        .expect("run tern pack");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let src = tern_format::TernFile::open(&full).unwrap();
    let cut = dir.join("missing.tern");
    let mut w = tern_format::TernWriter::create(&cut, src.meta().clone()).unwrap();
    let dropped = "blk.0.ffn_down.weight";
    for t in src.tensors().iter().filter(|t| t.name != dropped) {
        let v = src.tensor(&t.name).unwrap();
        w.add_tensor(&t.name, &t.shape, t.encoding.clone(), v.bytes)
            .unwrap();
    }
    w.finish().unwrap();

    let load = |device: u32| -> (tern_status, String) {
        let cpath = CString::new(cut.to_str().unwrap()).unwrap();
        let opts = tern_model_options {
            device,
            ..tern_model_options_default()
        };
        let mut m = ptr::null_mut();
        // SAFETY: valid arguments; a handle made by mistake is freed.
        let st = unsafe { tern_model_load(cpath.as_ptr(), &opts, &mut m) };
        let msg = last_error();
        // SAFETY: NULL or a live handle.
        unsafe { tern_model_free(m) };
        (st, msg)
    };
    let (cpu, msg) = load(TERN_DEVICE_CPU);
    eprintln!("cpu: {cpu:?}: {msg}");
    assert_eq!(cpu, tern_status::TERN_CORRUPT_FILE, "{msg}");
    // The engine says the same.
    let e = Model::open(&cut)
        .err()
        .expect("a model missing a tensor loaded");
    assert!(e.is_bad_file(), "{e}");
    let (gpu, msg) = load(TERN_DEVICE_GPU);
    eprintln!("gpu: {gpu:?}: {msg}");
    if gpu == tern_status::TERN_UNSUPPORTED && msg.contains("no GPU adapter") {
        tern_tests::skip_gpu_or_fail(
            "a_missing_tensor_is_corrupt_file_on_every_device",
            "no GPU adapter for the GPU part",
        );
        return;
    }
    assert_eq!(gpu, cpu, "{msg}");
    let e = Model::open_with(
        &cut,
        &tern_engine::LoadOptions {
            device: tern_engine::Device::Gpu,
            max_memory: None,
            ..Default::default()
        },
    )
    .err()
    .expect("a model missing a tensor loaded on the GPU");
    assert!(e.is_bad_file(), "{e}");
}

/// `tern_session_options.llama_cpp_numerics`: accepted on a CPU model (the C test checks its
/// output against `tern run --llama-cpp-numerics`), `TERN_INVALID_ARGUMENT` naming the CPU on a
/// GPU model (no session is made).
#[test]
fn llama_cpp_numerics_is_a_cpu_session_option() {
    let path = CString::new(default_model_path()).unwrap();
    let session = |device: u32| -> (tern_status, String) {
        let mo = tern_model_options {
            device,
            ..tern_model_options_default()
        };
        let mut m = ptr::null_mut();
        // SAFETY: valid arguments.
        let st = unsafe { tern_model_load(path.as_ptr(), &mo, &mut m) };
        if st != tern_status::TERN_OK {
            return (st, last_error());
        }
        let so = tern_session_options {
            n_ctx: 64,
            llama_cpp_numerics: 1,
            ..tern_session_options_default()
        };
        let mut s = ptr::null_mut();
        // SAFETY: a live model handle, valid options.
        let st = unsafe { tern_session_new(m, &so, &mut s) };
        let msg = last_error();
        assert_eq!(st == tern_status::TERN_OK, !s.is_null());
        // SAFETY: NULL or live handles.
        unsafe {
            tern_session_free(s);
            tern_model_free(m);
        }
        (st, msg)
    };
    let (cpu, msg) = session(TERN_DEVICE_CPU);
    assert_eq!(cpu, tern_status::TERN_OK, "{msg}");
    let (gpu, msg) = session(TERN_DEVICE_GPU);
    if gpu == tern_status::TERN_UNSUPPORTED && msg.contains("no GPU adapter") {
        tern_tests::skip_gpu_or_fail(
            "llama_cpp_numerics_is_a_cpu_session_option",
            "no GPU adapter for the GPU part",
        );
        return;
    }
    assert_eq!(gpu, tern_status::TERN_INVALID_ARGUMENT, "{msg}");
    assert!(msg.contains("CPU mode"), "{msg}");
}

/// The `TERN_KV_*` values are the engine's format index (`KvQuant::index`), in the order of
/// `KvQuant::ALL`; the device and MiniCache constants are distinct.
#[test]
fn kv_constants_are_the_engine_index() {
    use tern_engine::KvQuant;
    let abi = [
        (TERN_KV_F32, KvQuant::F32),
        (TERN_KV_F16, KvQuant::F16),
        (TERN_KV_Q8, KvQuant::Q8),
        (TERN_KV_Q4, KvQuant::Kivi4),
        (TERN_KV_Q3, KvQuant::Kivi3),
        (TERN_KV_Q2, KvQuant::Kivi2),
        (TERN_KV_A4, KvQuant::Absmax4),
        (TERN_KV_A3, KvQuant::Absmax3),
        (TERN_KV_Q4R, KvQuant::Rot4),
        (TERN_KV_Q3R, KvQuant::Rot3),
        (TERN_KV_Q2R, KvQuant::Rot2),
    ];
    assert_eq!(abi.len(), KvQuant::ALL.len());
    // The default sentinel is no format's index.
    assert_eq!(KvQuant::from_index(crate::options::TERN_KV_DEFAULT), None);
    for (c, q) in abi {
        assert_eq!(c, q.index(), "{q:?}");
        assert_eq!(KvQuant::from_index(c), Some(q));
    }
    assert_eq!(
        (TERN_DEVICE_AUTO, TERN_DEVICE_CPU, TERN_DEVICE_GPU),
        (0, 1, 2)
    );
    assert_eq!(
        (TERN_MINICACHE_OFF, TERN_MINICACHE_ON, TERN_MINICACHE_CUSTOM),
        (0, 1, 2)
    );
}

/// Load a model with `mo` and make a session with `so`; the report, or the status and message.
fn report_of(
    mo: &tern_model_options,
    so: &tern_session_options,
) -> Result<tern_session_report, (tern_status, String)> {
    let path = CString::new(default_model_path()).unwrap();
    let mut m = ptr::null_mut();
    // SAFETY: valid arguments.
    let st = unsafe { tern_model_load(path.as_ptr(), mo, &mut m) };
    if st != tern_status::TERN_OK {
        return Err((st, last_error()));
    }
    let mut s = ptr::null_mut();
    // SAFETY: a live model handle, valid options.
    let st = unsafe { tern_session_new(m, so, &mut s) };
    let r = if st == tern_status::TERN_OK {
        let mut r = tern_session_report {
            struct_size: std::mem::size_of::<tern_session_report>() as u32,
            ..Default::default()
        };
        // SAFETY: a live session, a writable report with struct_size set.
        let st = unsafe { tern_session_get_report(s, &mut r) };
        assert_eq!(st, tern_status::TERN_OK, "{}", last_error());
        // A struct_size below the first version is refused.
        let mut small = tern_session_report {
            struct_size: 8,
            ..Default::default()
        };
        // SAFETY: as above.
        let st = unsafe { tern_session_get_report(s, &mut small) };
        assert_eq!(st, tern_status::TERN_INVALID_ARGUMENT);
        Ok(r)
    } else {
        Err((st, last_error()))
    };
    // SAFETY: NULL or live handles.
    unsafe {
        tern_session_free(s);
        tern_model_free(m);
    }
    r
}

/// Every `TERN_KV_*` value, the KIVI and MiniCache fields, a memory budget and each device go
/// through the ABI as numbers (no strings) and read back from `tern_session_get_report` as the
/// session really uses them.
#[test]
fn every_option_reads_back_from_the_session_report() {
    let mo = tern_model_options {
        device: TERN_DEVICE_CPU,
        max_memory: 3 << 30,
        ..tern_model_options_default()
    };
    for kv in [
        TERN_KV_F32,
        TERN_KV_F16,
        TERN_KV_Q8,
        TERN_KV_Q4,
        TERN_KV_Q3,
        TERN_KV_Q2,
        TERN_KV_A4,
        TERN_KV_A3,
        TERN_KV_Q4R,
        TERN_KV_Q3R,
        TERN_KV_Q2R,
    ] {
        let so = tern_session_options {
            n_ctx: 64,
            kv_format: kv,
            kivi_group: 16,
            kivi_window: 32,
            ..tern_session_options_default()
        };
        let r = report_of(&mo, &so).unwrap();
        assert_eq!(r.kv_format, kv);
        assert_eq!((r.kivi_group, r.kivi_window), (16, 32));
        assert_eq!(
            (r.device, r.n_ctx, r.max_memory),
            (TERN_DEVICE_CPU, 64, 3 << 30)
        );
        assert_eq!((r.minicache, r.llama_cpp_numerics), (TERN_MINICACHE_OFF, 0));
        assert!(r.kv_bytes > 0);
    }
    // Defaults: KIVI 32 / 128, n_ctx 0 = the training context capped at 4096, no budget.
    let r = report_of(
        &tern_model_options {
            device: TERN_DEVICE_CPU,
            ..tern_model_options_default()
        },
        &tern_session_options_default(),
    )
    .unwrap();
    assert_eq!((r.kivi_group, r.kivi_window, r.max_memory), (32, 128, 0));
    assert_eq!(r.n_ctx, 4096);
    // Issue 28: the default format is q8; with llama.cpp's numerics it is f32; an explicit
    // TERN_KV_F32 (also a zeroed field) stays f32.
    assert_eq!(r.kv_format, TERN_KV_Q8);
    for (llama, kv, want) in [
        (1, crate::options::TERN_KV_DEFAULT, TERN_KV_F32),
        (0, TERN_KV_F32, TERN_KV_F32),
    ] {
        let so = tern_session_options {
            n_ctx: 64,
            llama_cpp_numerics: llama,
            kv_format: kv,
            ..tern_session_options_default()
        };
        assert_eq!(report_of(&mo, &so).unwrap().kv_format, want);
    }
    // MiniCache: custom values read back; `on` reads back as the values it resolved to.
    let custom = tern_session_options {
        n_ctx: 64,
        minicache: TERN_MINICACHE_CUSTOM,
        minicache_start_layer: 26,
        minicache_t: 0.25,
        minicache_gamma: 0.75,
        llama_cpp_numerics: 1,
        ..tern_session_options_default()
    };
    let r = report_of(&mo, &custom).unwrap();
    assert_eq!(r.minicache, TERN_MINICACHE_CUSTOM);
    assert_eq!(
        (r.minicache_start_layer, r.minicache_t, r.minicache_gamma),
        (26, 0.25, 0.75)
    );
    assert_eq!(r.llama_cpp_numerics, 1);
    let on = tern_session_options {
        minicache: TERN_MINICACHE_ON,
        ..custom
    };
    let r = report_of(&mo, &on).unwrap();
    let d = tern_engine::minicache_on(30);
    assert_eq!(
        (
            r.minicache,
            r.minicache_start_layer,
            r.minicache_t,
            r.minicache_gamma
        ),
        (TERN_MINICACHE_CUSTOM, d.start_layer, d.t, d.gamma)
    );
    // Values outside the enums and a bad KIVI window: TERN_INVALID_ARGUMENT naming them.
    for (so, needle) in [
        (
            tern_session_options {
                kv_format: 99,
                ..tern_session_options_default()
            },
            "kv_format 99",
        ),
        (
            tern_session_options {
                minicache: 3,
                ..tern_session_options_default()
            },
            "minicache 3",
        ),
        (
            tern_session_options {
                kv_format: TERN_KV_Q4,
                kivi_window: 40,
                ..tern_session_options_default()
            },
            "window",
        ),
    ] {
        let (st, msg) = report_of(&mo, &so).err().unwrap();
        assert_eq!(st, tern_status::TERN_INVALID_ARGUMENT, "{msg}");
        assert!(msg.contains(needle), "{needle}: {msg}");
    }
    let (st, msg) = report_of(
        &tern_model_options {
            device: 3,
            ..tern_model_options_default()
        },
        &tern_session_options_default(),
    )
    .err()
    .unwrap();
    assert_eq!(st, tern_status::TERN_INVALID_ARGUMENT, "{msg}");
    // TERN_DEVICE_AUTO is the engine's Device::Auto: the same backend.
    let so = tern_session_options {
        n_ctx: 32,
        ..tern_session_options_default()
    };
    let auto = report_of(&tern_model_options_default(), &so).unwrap();
    let engine = Model::open_with(
        std::path::Path::new(&default_model_path()),
        &tern_engine::LoadOptions {
            device: tern_engine::Device::Auto,
            ..Default::default()
        },
    )
    .unwrap();
    let want = match engine.report().backend {
        tern_engine::BackendKind::Cpu => TERN_DEVICE_CPU,
        tern_engine::BackendKind::Gpu => TERN_DEVICE_GPU,
    };
    assert_eq!(auto.device, want);
    // TERN_DEVICE_GPU with a budget, where an adapter exists.
    match report_of(
        &tern_model_options {
            device: TERN_DEVICE_GPU,
            max_memory: 3 << 30,
            ..tern_model_options_default()
        },
        &tern_session_options {
            kv_format: TERN_KV_F16,
            ..so
        },
    ) {
        Ok(r) => {
            assert_eq!(
                (r.device, r.max_memory, r.kv_format),
                (TERN_DEVICE_GPU, 3 << 30, TERN_KV_F16)
            );
        }
        Err((st, msg)) if st == tern_status::TERN_UNSUPPORTED && msg.contains("no GPU adapter") => {
            tern_tests::skip_gpu_or_fail(
                "every_option_reads_back_from_the_session_report",
                "no GPU adapter for the GPU part",
            );
        }
        Err((st, msg)) => panic!("GPU: {st:?}: {msg}"),
    }
}

/// `tern_model_plan` (CPU): the engine's plan through the C struct — every format in `TERN_KV_*`
/// order with the engine's numbers, the chosen format for a context, `TERN_PLAN_NONE` when
/// nothing fits; the typed refusals (no budget, NULL, a short `struct_size`).
#[test]
fn model_plan_is_the_engines_plan() {
    let path = default_model_path();
    let cpath = CString::new(path.clone()).unwrap();
    let budget = 200u64 << 20;
    let mo = tern_model_options {
        device: TERN_DEVICE_CPU,
        max_memory: budget,
        ..tern_model_options_default()
    };
    let new_plan = || tern_plan {
        struct_size: std::mem::size_of::<tern_plan>() as u32,
        ..tern_plan::from_plan(
            &tern_engine::plan(
                std::path::Path::new(&path),
                &tern_engine::LoadOptions {
                    device: tern_engine::Device::Cpu,
                    max_memory: Some(1 << 40),
                    ..Default::default()
                },
                None,
            )
            .unwrap(),
        )
    };
    let mut out = new_plan();
    // SAFETY: valid arguments.
    let st = unsafe { tern_model_plan(cpath.as_ptr(), &mo, 2048, &mut out) };
    assert_eq!(st, tern_status::TERN_OK, "{}", last_error());
    let want = tern_engine::plan(
        std::path::Path::new(&path),
        &mo.load_options(&crate::options::tern_load_options_default())
            .unwrap(),
        Some(2048),
    )
    .unwrap();
    assert_eq!(out, tern_plan::from_plan(&want));
    assert_eq!(out.device, TERN_DEVICE_CPU);
    assert_eq!(out.budget_bytes, budget);
    assert_eq!(out.n_configs as usize, tern_engine::KvQuant::ALL.len());
    for (i, c) in out.configs[..out.n_configs as usize].iter().enumerate() {
        assert_eq!(c.kv_format, i as u32);
        assert!(c.kv_bytes_per_token > 0);
    }
    let chosen = want.chosen.unwrap();
    assert_eq!(out.chosen_kv_format, chosen.kv.index());
    assert_eq!(out.chosen_context, 2048);
    // A budget of the weights alone: no format fits a context of 2048.
    let tight = tern_model_options {
        max_memory: out.weights_bytes + out.scratch_bytes,
        ..mo
    };
    // SAFETY: valid arguments.
    let st = unsafe { tern_model_plan(cpath.as_ptr(), &tight, 2048, &mut out) };
    assert_eq!(st, tern_status::TERN_OK, "{}", last_error());
    assert_eq!(out.chosen_kv_format, TERN_PLAN_NONE);
    assert_eq!(out.chosen_context, 0);
    // No context asked: nothing chosen.
    // SAFETY: valid arguments.
    let st = unsafe { tern_model_plan(cpath.as_ptr(), &mo, 0, &mut out) };
    assert_eq!(st, tern_status::TERN_OK);
    assert_eq!(out.chosen_kv_format, TERN_PLAN_NONE);
    // No budget, NULL out, a short struct: typed refusals.
    let none = tern_model_options {
        max_memory: 0,
        ..mo
    };
    // SAFETY: valid arguments.
    let st = unsafe { tern_model_plan(cpath.as_ptr(), &none, 0, &mut out) };
    assert_eq!(st, tern_status::TERN_INVALID_ARGUMENT);
    assert!(last_error().contains("max_memory"), "{}", last_error());
    // SAFETY: NULL out is checked.
    let st = unsafe { tern_model_plan(cpath.as_ptr(), &mo, 0, ptr::null_mut()) };
    assert_eq!(st, tern_status::TERN_NULL_ARGUMENT);
    let mut short = new_plan();
    short.struct_size = 8;
    // SAFETY: valid arguments (the short size is refused before anything is written).
    let st = unsafe { tern_model_plan(cpath.as_ptr(), &mo, 0, &mut short) };
    assert_eq!(st, tern_status::TERN_INVALID_ARGUMENT);
}
