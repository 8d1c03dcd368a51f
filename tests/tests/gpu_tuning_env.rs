//! The GPU tuning knobs (`TERN_GPU_*`, `TERN_GEMM_TILE`) are read at the CLI's edge
//! (`GpuTuning::from_env` where it builds `LoadOptions`), not inside tern-gpu: a value outside a
//! knob's set stops `tern run` / `tern bench` before anything loads, naming the variable and the
//! values it takes (such values were silently ignored before `GpuTuning`); an accepted value runs;
//! and a knob set in the environment reaches the kernels (the prefill profile of `tern bench`
//! names the query-tiled attention kernel only with `TERN_GPU_ATTN_PREFILL=1`).

use std::path::PathBuf;
use std::process::Command;

fn bitnet(tag: &str) -> PathBuf {
    let out = tern_tests::scratch(&format!("gpu_tuning_env_{tag}")).join("model.tern");
    tern_import::hf::import_hf_dir(
        &tern_tests::golden("bitnet_hf/tiny_a"),
        &out,
        &tern_import::pack::PackOptions::default(),
        &mut |_, _, _| {},
    )
    .unwrap();
    out
}

/// `tern args…` with the tuning variables unset but `env`: (success, stdout, stderr).
fn tern(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut c = Command::new(tern_tests::tern_bin());
    c.args(args);
    for v in tern_gpu::TUNING_VARS {
        c.env_remove(v);
    }
    c.envs(env.iter().copied());
    let o = c.output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_bad_knob_value_stops_the_cli_naming_the_variable() {
    let path = bitnet("bad");
    let m = path.to_str().unwrap();
    let run = ["run", m, "--tokens", "1,2,3", "-n", "1", "--device", "cpu"];
    let bench = [
        "bench", m, "-p", "4", "-n", "1", "-r", "1", "--device", "cpu",
    ];
    for (args, var, value, accepted) in [
        (
            &run[..],
            "TERN_GPU_FUSE_NORM",
            "yes",
            "0, qkv, attn, all, notopk, 1",
        ),
        (&run[..], "TERN_GPU_LOOKAHEAD", "off", "0, 1"),
        (
            &bench[..],
            "TERN_GEMM_TILE",
            "256",
            "auto, old, 32, 64, 128, 64j8",
        ),
        (
            &bench[..],
            "TERN_GPU_ATTN_SHORT",
            "many",
            "number of positions",
        ),
    ] {
        let (ok, _, err) = tern(args, &[(var, value)]);
        assert!(!ok, "{var}={value} accepted");
        assert!(err.contains(var), "{var}={value}: {err}");
        assert!(err.contains(accepted), "{var}={value}: {err}");
    }
    // accepted values (and an empty one: unset) pass the edge
    for (args, var, value) in [
        (&run[..], "TERN_GPU_FUSE_NORM", "notopk"),
        (&run[..], "TERN_GPU_LOOKAHEAD", ""),
        (&bench[..], "TERN_GEMM_TILE", "64j8"),
    ] {
        let (ok, _, err) = tern(args, &[(var, value)]);
        assert!(ok, "{var}={value}: {err}");
    }
}

#[test]
fn a_knob_in_the_environment_reaches_the_kernels() {
    let path = bitnet("prefill");
    let m = path.to_str().unwrap();
    let args = [
        "bench",
        m,
        "-p",
        "40",
        "-n",
        "1",
        "-r",
        "1",
        "--device",
        "gpu",
        // The tiled prefill attention reads f32/f16 caches (tuning.rs); the default q8 has none.
        "--kv",
        "f16",
        "--json",
        "--profile",
    ];
    let prefill_kernels = |env: &[(&str, &str)]| -> Option<Vec<String>> {
        let (ok, out, err) = tern(&args, env);
        if !ok && err.contains("no GPU adapter") {
            tern_tests::skip_gpu_or_fail("a_knob_in_the_environment_reaches_the_kernels", &err);
            return None;
        }
        assert!(ok, "{env:?}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let Some(pp) = v["profile_prefill_us"].as_array() else {
            // no timestamp queries on this adapter
            eprintln!("no prefill profile: {out}");
            return None;
        };
        Some(
            pp.iter()
                .filter(|k| k["dispatches"].as_u64().unwrap_or(0) > 0)
                .map(|k| k["kernel"].as_str().unwrap_or_default().to_string())
                .collect(),
        )
    };
    let Some(default) = prefill_kernels(&[]) else {
        return;
    };
    let Some(tiled) = prefill_kernels(&[("TERN_GPU_ATTN_PREFILL", "1")]) else {
        return;
    };
    let has = |ks: &[String], name: &str| ks.iter().any(|k| k.starts_with(name));
    assert!(!has(&default, "attention_prefill"), "{default:?}");
    assert!(has(&default, "attention_f16"), "{default:?}");
    assert!(has(&tiled, "attention_prefill"), "{tiled:?}");
}
