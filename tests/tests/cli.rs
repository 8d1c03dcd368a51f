//! The `tern` command line on the real default model: `run` (streamed text, `--tokens`,
//! `--dump-logits` .npy, `--llama-cpp-numerics` against llama.cpp's greedy tokens), `tokenize`,
//! `inspect --json`, and errors on bad input.

use std::process::Command;
use std::sync::OnceLock;

fn model() -> &'static std::path::Path {
    static P: OnceLock<std::path::PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let out = tern_tests::scratch("cli").join("smol.tern");
        tern_import::import_path(
            &tern_tests::smollm2_gguf(),
            &out,
            &Default::default(),
            &mut |_, _, _| {},
        )
        .unwrap();
        out
    })
}

fn tern(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(tern_tests::tern_bin())
        .args(args)
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn run_streams_only_generated_text_and_matches_the_engine() {
    let m = model().to_str().unwrap();
    let (ok, out, err) = tern(&[
        "run",
        m,
        "-p",
        "The capital of France is",
        "-n",
        "8",
        "--device",
        "cpu",
        "--temp",
        "0",
    ]);
    assert!(ok, "{err}");
    // stdout holds exactly the generated text (plus a final newline); timings went to stderr.
    let model = tern_engine::Model::open(model()).unwrap();
    let mut s = tern_engine::Session::new(&model, 64).unwrap();
    let ids = model.tokenize("The capital of France is", true).unwrap();
    let opts = tern_engine::GenerateOptions {
        max_tokens: 8,
        ..Default::default()
    };
    let r = s
        .generate(
            &ids,
            &tern_engine::SamplingParams::greedy(),
            &opts,
            &mut |_| true,
        )
        .unwrap();
    assert_eq!(out, format!("{}\n", r.text));
    assert!(err.contains("t/s"), "{err}");
    // --tokens gives the same.
    let toks: Vec<String> = ids.iter().map(|t| t.to_string()).collect();
    let (ok, out2, _) = tern(&[
        "run",
        m,
        "--tokens",
        &toks.join(","),
        "-n",
        "8",
        "--temp",
        "0",
    ]);
    assert!(ok);
    assert_eq!(out, out2);
}

/// `tern run --llama-cpp-numerics` prints llama.cpp's own greedy continuation (32 tokens, from
/// tests/golden/llamacpp_agreement/smollm2_greedy32.json, made by llama.cpp's libllama on this
/// model) on three of the golden prompts — plain text, code, and a chat-template prompt with
/// special tokens — and the same text on a second run. `auto` runs it on the CPU; `chat`, `bench`
/// and `score` accept the flag too.
#[test]
fn run_llama_cpp_numerics_prints_llama_cpp_greedy_output() {
    let m = model().to_str().unwrap();
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(tern_tests::golden(
            "llamacpp_agreement/smollm2_greedy32.json",
        ))
        .unwrap(),
    )
    .unwrap();
    let model = tern_engine::Model::open(model()).unwrap();
    let tok = model.tokenizer().unwrap();
    let cases = golden["cases"].as_array().unwrap();
    for i in [0, 2, 5] {
        let case = &cases[i];
        let prompt = case["prompt"].as_str().unwrap();
        let want: Vec<u32> = case["greedy_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let args = [
            "run",
            m,
            "-p",
            prompt,
            "-n",
            "32",
            "--llama-cpp-numerics",
            "--temp",
            "0",
        ];
        let (ok, out, err) = tern(&args);
        assert!(ok, "{err}");
        assert_eq!(
            out,
            format!("{}\n", tok.decode(&want).unwrap()),
            "prompt {prompt:?}: tern run --llama-cpp-numerics differs from llama.cpp"
        );
        if i == 0 {
            let (ok, again, _) = tern(&args);
            assert!(ok);
            assert_eq!(out, again, "not deterministic");
            // Without the flag the f32 reference continues differently on this prompt.
            let (ok, plain, _) = tern(&[
                "run", m, "-p", prompt, "-n", "32", "--device", "cpu", "--temp", "0",
            ]);
            assert!(ok);
            assert_ne!(plain, out, "the flag made no difference");
        }
    }
    let (ok, out, err) = tern(&[
        "score",
        m,
        "--context",
        "The capital of France is",
        "--candidates",
        " Paris",
        "--llama-cpp-numerics",
    ]);
    assert!(ok && out.contains("\"best\""), "{err}");
    let (ok, out, err) = tern(&[
        "bench",
        m,
        "-p",
        "8",
        "-n",
        "2",
        "-r",
        "1",
        "--device",
        "auto",
        "--llama-cpp-numerics",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("cpu"), "{out}");
    let mut chat = Command::new(tern_tests::tern_bin())
        .args(["chat", m, "-n", "4", "--llama-cpp-numerics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = chat.stdin.take().unwrap();
        stdin.write_all(b"Hello\n").unwrap();
    }
    let o = chat.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!o.stdout.is_empty());
}

#[test]
fn dump_logits_writes_prompt_logits_as_npy() {
    let m = model().to_str().unwrap();
    let dir = tern_tests::scratch("cli_npy");
    let npy = dir.join("l.npy");
    let (ok, out, err) = tern(&[
        "run",
        m,
        "-p",
        "Hello world",
        "-n",
        "0",
        "--dump-logits",
        npy.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.trim().is_empty(), "-n 0 generates nothing: {out:?}");
    let b = std::fs::read(&npy).unwrap();
    assert_eq!(&b[..8], b"\x93NUMPY\x01\x00");
    let hl = u16::from_le_bytes([b[8], b[9]]) as usize;
    let header = std::str::from_utf8(&b[10..10 + hl]).unwrap();
    assert_eq!((10 + hl) % 64, 0);
    let model = tern_engine::Model::open(model()).unwrap();
    let ids = model.tokenize("Hello world", true).unwrap();
    assert!(
        header.contains(&format!("'shape': ({}, 49152)", ids.len())),
        "{header}"
    );
    let vals: Vec<f32> = b[10 + hl..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(vals.len(), ids.len() * 49152);
    // Same numbers as the engine, with the CLI's default options (the q8 KV cache).
    let mut s = tern_engine::Session::with_options(
        &model,
        &tern_engine::SessionOptions {
            n_ctx: 64,
            ..Default::default()
        },
    )
    .unwrap();
    let want = s.eval_all(&ids).unwrap();
    assert!(vals
        .iter()
        .zip(&want)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
}

#[test]
fn tokenize_prints_json_ids() {
    let m = model().to_str().unwrap();
    let (ok, out, err) = tern(&["tokenize", m, "-p", "Hello world! 123"]);
    assert!(ok, "{err}");
    let ids: Vec<u32> = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(ids, vec![19556, 905, 17, 216, 33, 34, 35]);
    let (_, special, _) = tern(&["tokenize", m, "-p", "<|im_start|>"]);
    let (_, plain, _) = tern(&["tokenize", m, "-p", "<|im_start|>", "--no-special"]);
    assert_eq!(
        serde_json::from_str::<Vec<u32>>(special.trim())
            .unwrap()
            .len(),
        1
    );
    assert!(
        serde_json::from_str::<Vec<u32>>(plain.trim())
            .unwrap()
            .len()
            > 1
    );
}

#[test]
fn bad_arguments_fail_cleanly() {
    let m = model().to_str().unwrap();
    for (args, needle) in [
        (
            vec!["run", m, "--tokens", "1,99999999", "-n", "1"],
            "vocabulary",
        ),
        (vec!["run", m, "-p", "hi", "--device", "tpu"], "--device"),
        (vec!["run", m, "-p", "hi", "--temp=-2"], "temperature"),
        (vec!["run", "/nonexistent.tern", "-p", "hi"], "nonexistent"),
        (
            vec!["run", m, "-p", "hello there my dear friend", "-c", "2"],
            "context",
        ),
        (
            vec!["pack", "/nonexistent.gguf", "-o", "/tmp/x.tern"],
            "nonexistent",
        ),
        (
            vec![
                "run",
                m,
                "-p",
                "hi",
                "--device",
                "gpu",
                "--llama-cpp-numerics",
            ],
            "CPU mode",
        ),
        (
            vec![
                "score",
                m,
                "--context",
                "a",
                "--candidates",
                " b",
                "--device",
                "gpu",
                "--llama-cpp-numerics",
            ],
            "CPU mode",
        ),
    ] {
        let (ok, _, err) = tern(&args);
        assert!(!ok, "{args:?} should fail");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// A tiny random BitNet model packed with the given activation scheme.
fn bitnet(tag: &str, activations: Option<tern_format::ActivationScheme>) -> std::path::PathBuf {
    let out = tern_tests::scratch(&format!("cli_plan_{tag}")).join("model.tern");
    tern_import::hf::import_hf_dir(
        &tern_tests::golden("bitnet_hf/tiny_a"),
        &out,
        &tern_import::pack::PackOptions {
            activations,
            ..Default::default()
        },
        &mut |_, _, _| {},
    )
    .unwrap();
    out
}

/// `tern run -v` prints the activation plan: each linear layer's input scheme and what produces
/// it (the reference's quantizer on the CPU, the kernel on the GPU).
#[test]
fn run_verbose_prints_the_activation_plan() {
    let b158 = bitnet("a8", None);
    let a48 = bitnet("a4_8", Some(tern_format::ActivationScheme::A4_8));
    let run = |path: &std::path::Path, device: &str| {
        tern(&[
            "run",
            path.to_str().unwrap(),
            "--tokens",
            "1,2,3",
            "-n",
            "1",
            "--device",
            device,
            "-v",
        ])
    };
    let (ok, _, err) = run(&b158, "cpu");
    assert!(ok, "{err}");
    assert!(err.contains("activation plan on cpu"), "{err}");
    for want in [
        "layers",
        "qkv",
        "gate_up",
        "int8 absmax",
        "quantize_act_int8",
        "head",
    ] {
        assert!(err.contains(want), "b1.58 plan lacks {want:?}:\n{err}");
    }
    let (ok, _, err) = run(&a48, "cpu");
    assert!(ok, "{err}");
    for want in [
        "int4 absmean",
        "quantize_act_int4",
        "topk50% + int8 absmax",
        "topk50_int8",
    ] {
        assert!(err.contains(want), "a4.8 plan lacks {want:?}:\n{err}");
    }
    // On the GPU the b1.58 plan names its kernels.
    let (ok, _, err) = run(&b158, "gpu");
    if !ok && err.contains("no GPU adapter") {
        tern_tests::skip_gpu_or_fail(
            "run_verbose_prints_the_activation_plan",
            "no GPU adapter for the GPU part",
        );
        return;
    }
    assert!(ok, "{err}");
    assert!(err.contains("activation plan on gpu"), "{err}");
    assert!(err.contains("rmsnorm_quant_int8 (fused)"), "{err}");
}

/// `tern run` survives a GPU device loss in the middle of the output (simulated with the hidden
/// `--debug-lose-device-after`, which then behaves as `--device auto`): a warning on stderr, and the
/// text goes on on the CPU — the whole output equals a CPU-only run's. Needs a GPU adapter
/// (lavapipe counts); skipped without one unless `TERN_REQUIRE_GPU=1`.
#[test]
fn run_continues_on_the_cpu_after_a_device_loss() {
    let m = model().to_str().unwrap();
    let args = |device: &'static str| {
        let mut v = vec![
            "run",
            m,
            "-p",
            "The capital of France is",
            "-n",
            "4",
            "-c",
            "64",
            "--temp",
            "0",
        ];
        v.extend(["--device", device]);
        v
    };
    let (ok, want, err) = tern(&args("cpu"));
    assert!(ok, "{err}");
    let mut lossy = args("gpu");
    lossy.extend(["--debug-lose-device-after", "2"]);
    let (ok, got, err) = tern(&lossy);
    if !ok
        && err.contains("no GPU adapter")
        && std::env::var("TERN_REQUIRE_GPU").as_deref() != Ok("1")
    {
        return eprintln!("skipping: {err}");
    }
    assert!(ok, "{err}");
    assert!(
        err.contains("warning: the GPU device was lost") && err.contains("continuing on the CPU"),
        "{err}"
    );
    assert_eq!(got, want);
}

/// `tern bench --activations a8|a4.8` runs the same weights with either scheme, says so in the
/// text and the JSON (scheme that ran, the file's, whether it was overridden), and reports the
/// measured sparsity of each linear kind's quantized inputs on the GPU: TopK keeps exactly half
/// of the attention output's inputs under a4.8, and not under a8.
#[test]
fn bench_overrides_the_activation_scheme_and_measures_sparsity() {
    let a48 = bitnet("bench_a4_8", Some(tern_format::ActivationScheme::A4_8));
    let m = a48.to_str().unwrap();
    let bench = |device: &str, acts: Option<&str>, json: bool| {
        let mut args = vec![
            "bench", m, "-p", "8", "-n", "2", "-r", "1", "--device", device,
        ];
        if let Some(a) = acts {
            args.extend(["--activations", a]);
        }
        if json {
            args.push("--json");
        }
        tern(&args)
    };
    // CPU: labelled, sparsity not measured there.
    let (ok, out, err) = bench("cpu", Some("a8"), false);
    assert!(ok, "{err}");
    assert!(
        out.contains("activations: a8 (--activations, overriding the file's a4.8)"),
        "{out}"
    );
    assert!(out.contains("not measured on this backend"), "{out}");
    let (ok, _, err) = bench("cpu", Some("a5"), false);
    assert!(!ok && err.contains("expected a8 or a4.8"), "{err}");
    let (ok, out, err) = bench("gpu", None, true);
    if !ok && err.contains("no GPU adapter") {
        tern_tests::skip_gpu_or_fail(
            "bench_overrides_the_activation_scheme_and_measures_sparsity",
            "no GPU adapter",
        );
        return;
    }
    assert!(ok, "{err}");
    let zero_fraction = |out: &str, want_scheme: &str, overridden: bool| -> Vec<(String, f64)> {
        let v: serde_json::Value = serde_json::from_str(out).unwrap();
        assert_eq!(v["activations"]["scheme"], want_scheme, "{out}");
        assert_eq!(v["activations"]["file_scheme"], "a4.8", "{out}");
        assert_eq!(v["activations"]["overridden"], overridden, "{out}");
        v["activation_sparsity"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| {
                (
                    x["linear"].as_str().unwrap().to_string(),
                    x["zero_fraction"].as_f64().unwrap(),
                )
            })
            .collect()
    };
    let s48 = zero_fraction(&out, "a4.8", false);
    // tg decodes greedily through the GPU's argmax: one round trip and 4 bytes per token.
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["host_round_trips_per_token"].as_f64(), Some(1.0), "{out}");
    assert_eq!(v["readback_bytes_per_token"].as_f64(), Some(4.0), "{out}");
    let attn = |s: &[(String, f64)]| s.iter().find(|x| x.0 == "attn_out").unwrap().1;
    assert_eq!(s48.len(), 4, "{s48:?}");
    assert!((attn(&s48) - 0.5).abs() < 1e-12, "{s48:?}");
    let (ok, out, err) = bench("gpu", Some("a8"), true);
    assert!(ok, "{err}");
    let s8 = zero_fraction(&out, "a8", true);
    assert!(attn(&s8) < 0.2, "{s8:?}");
    let (ok, out, err) = bench("gpu", Some("a8"), false);
    assert!(ok, "{err}");
    assert!(out.contains("| a8 | q8 | pp8 |"), "{out}");
    assert!(out.contains("activation sparsity (zero codes"), "{out}");
}

/// `--kv` / `--minicache` (issue 14): `perplexity --json` reports `kv_bytes_per_token` for the
/// format asked for (q8 by default), `score` and `run` take the flags, bad values are clean errors.
#[test]
fn kv_flags_reach_the_cache_and_perplexity_reports_its_bytes() {
    let m = model().to_str().unwrap();
    let text = tern_tests::scratch("cli_kv").join("kv_text.txt");
    let gpl = std::fs::read_to_string("/usr/share/common-licenses/GPL-3").unwrap();
    std::fs::write(&text, &gpl[..3000]).unwrap();
    let t = text.to_str().unwrap();
    let ppl = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "perplexity",
            m,
            "-f",
            t,
            "-c",
            "64",
            "--chunks",
            "2",
            "--json",
        ];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--device", "cpu"]);
        let (ok, out, err) = tern(&args);
        assert!(ok, "{args:?}: {err}");
        serde_json::from_str(out.trim()).unwrap()
    };
    // The default: q8, 30 layers × 2 × 3 KV heads × (64 codes + a 2-byte f16 scale) bytes.
    let q8 = ppl(&[]);
    assert_eq!(q8["kv_bytes_per_token"].as_f64(), Some(11880.0));
    let f32j = ppl(&["--kv", "f32"]);
    // 30 layers × 2 × 192 values × 4 bytes.
    assert_eq!(f32j["kv_bytes_per_token"].as_f64(), Some(46080.0));
    let f16j = ppl(&["--kv", "f16"]);
    assert_eq!(f16j["kv_bytes_per_token"].as_f64(), Some(23040.0));
    let q4 = ppl(&["--kv", "q4", "--kv-group", "16", "--kv-window", "32"]);
    let b = q4["kv_bytes_per_token"].as_f64().unwrap();
    // 63 positions: 32 quantized, 31 in the f16 window (measured 15 725.7).
    assert!(b < 0.75 * 23040.0, "{b}");
    let a = f16j["ppl_second_half"].as_f64().unwrap();
    let q = q4["ppl_second_half"].as_f64().unwrap();
    assert!(q != a && (q / a - 1.0).abs() < 0.2, "{q} vs {a}");
    let mc = ppl(&["--kv", "q4", "--minicache", "26,0.5,1"]);
    assert!(mc["kv_bytes_per_token"].as_f64().unwrap() < 23040.0);
    assert_eq!(mc["minicache"].as_str(), Some("26,0.5,1"));
    let (ok, out, err) = tern(&[
        "run",
        m,
        "-p",
        "Hello",
        "-n",
        "3",
        "--kv",
        "a3",
        "--minicache",
        "on",
        "--device",
        "cpu",
    ]);
    assert!(ok && !out.is_empty(), "{err}");
    for (args, needle) in [
        (vec!["run", m, "-p", "hi", "--kv", "q5"], "q5"),
        (
            vec!["run", m, "-p", "hi", "--minicache", "40,0.5,0.1"],
            "start layer",
        ),
        (
            vec!["run", m, "-p", "hi", "--kv", "q4", "--kv-window", "40"],
            "window",
        ),
    ] {
        let (ok, _, err) = tern(&args);
        assert!(!ok, "{args:?} should fail");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// `tern bench --profile --json` gives per-kernel GPU timestamps of one decode step
/// (`profile_us_per_token`: the ternary GEMV) and of one pp<P> prefill (`profile_prefill_us`:
/// the tiled ternary GEMM from 4 tokens on).
#[test]
fn bench_profiles_a_decode_step_and_a_prefill() {
    let a48 = bitnet("bench_profile", Some(tern_format::ActivationScheme::A4_8));
    let m = a48.to_str().unwrap();
    let args = [
        "bench",
        m,
        "-p",
        "8",
        "-n",
        "2",
        "-r",
        "1",
        "--device",
        "gpu",
        "--json",
        "--profile",
    ];
    let (ok, out, err) = tern(&args);
    if !ok && err.contains("no GPU adapter") {
        tern_tests::skip_gpu_or_fail(
            "bench_profiles_a_decode_step_and_a_prefill",
            "no GPU adapter",
        );
        return;
    }
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let kernels = |key: &str| -> Vec<(String, u64, f64)> {
        v[key]
            .as_array()
            .unwrap_or_else(|| panic!("no {key} in {out}"))
            .iter()
            .map(|k| {
                (
                    k["kernel"].as_str().unwrap().to_string(),
                    k["dispatches"].as_u64().unwrap(),
                    k["us"].as_f64().unwrap(),
                )
            })
            .collect()
    };
    let step = kernels("profile_us_per_token");
    let pp = kernels("profile_prefill_us");
    assert!(
        step.iter()
            .any(|k| k.0.starts_with("ternary_gemv") && k.1 > 0),
        "{step:?}"
    );
    assert!(
        pp.iter()
            .any(|k| k.0.starts_with("ternary_gemm") && k.1 > 0),
        "{pp:?}"
    );
    assert!(
        !pp.iter().any(|k| k.0.starts_with("ternary_gemv")),
        "{pp:?}"
    );
    assert!(pp.iter().all(|k| k.2.is_finite() && k.2 >= 0.0), "{pp:?}");
}
