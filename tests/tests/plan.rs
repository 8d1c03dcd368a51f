//! The planner (`tern_engine::plan`, `tern plan`, `-c auto`) on SmolLM2-135M: its numbers
//! against what a load and a session really allocate (CPU, and the GPU on lavapipe), the budget
//! edge (one byte below a context's need flips it), the JSON schema, `-c auto` and the refusal of
//! a context above the plan.

use std::path::{Path, PathBuf};
use std::process::Command;

use tern_engine::{
    plan, BackendKind, Device, ErrorKind, KvQuant, LoadOptions, Model, Plan, Session,
    SessionOptions,
};

fn model_path() -> PathBuf {
    let out = Command::new(tern_tests::tern_bin())
        .arg("fetch-default")
        .output()
        .expect("run tern fetch-default");
    assert!(out.status.success());
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn opts(device: Device, budget: u64) -> LoadOptions {
    LoadOptions {
        device,
        max_memory: Some(budget),
        ..Default::default()
    }
}

fn session(model: &Model, kv: KvQuant, n: u64) -> Session<'_> {
    let mut so = SessionOptions {
        n_ctx: n as usize,
        ..Default::default()
    };
    so.kv.format = kv;
    Session::with_options(model, &so).unwrap()
}

/// One byte below `bytes_needed(kv, n)` the budget no longer holds `n` positions of `kv`; at it,
/// it does (and the plan chooses `kv` for `n` when it is first in the quality order).
fn check_edge(path: &Path, device: Device, base: &Plan, kv: KvQuant, n: u64) {
    let need = base.bytes_needed(kv, n);
    let at = plan(path, &opts(device, need), Some(n)).unwrap();
    let below = plan(path, &opts(device, need - 1), Some(n)).unwrap();
    let c = at.config(kv).unwrap();
    assert!(c.budget_context >= n, "{kv:?} at {need}: {c:?}");
    assert_eq!(at.check(kv, n).map_err(|e| e.kind()), Ok(()));
    let c = below.config(kv).unwrap();
    assert!(c.budget_context < n, "{kv:?} at {}: {c:?}", need - 1);
    let e = below.check(kv, n).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfMemory);
    assert!(e.to_string().contains("the plan's largest context"), "{e}");
    if Plan::order().first() == Some(&kv) {
        assert_eq!(at.chosen.map(|c| c.kv), Some(kv));
        assert_ne!(below.chosen.map(|c| c.kv), Some(kv));
    }
}

#[test]
fn cpu_plan_equals_the_load() {
    let path = model_path();
    let budget = 200u64 << 20;
    let p = plan(&path, &opts(Device::Cpu, budget), Some(1000)).unwrap();
    assert_eq!(p.backend, BackendKind::Cpu);
    assert_eq!(p.configs.len(), KvQuant::ALL.len());
    let model = Model::open_with(&path, &opts(Device::Cpu, budget)).unwrap();
    assert_eq!(
        Some(p.weights_bytes),
        model.report().memory.host_resident_bytes,
        "resident weights"
    );
    // The KV cache as allocated, for every format, at a context that is not a multiple of
    // KIVI's window.
    for kv in KvQuant::ALL {
        let n = 300;
        let mut s = session(&model, kv, n);
        assert_eq!(s.report().unwrap().kv_bytes, p.kv_bytes(kv, n), "{kv:?}");
    }
    // Formats in the quality order; the chosen one fits; a larger context fits fewer formats.
    let chosen = p.chosen.unwrap();
    assert_eq!(chosen.context, 1000);
    assert!(p.max_context(chosen.kv) >= 1000);
    for c in &p.configs {
        assert!(c.max_context <= p.context_cap.min(c.budget_context));
        assert!(p.bytes_needed(c.kv, c.budget_context) <= budget, "{c:?}");
        assert!(p.bytes_needed(c.kv, c.budget_context + 1) > budget, "{c:?}");
    }
    check_edge(&path, Device::Cpu, &p, KvQuant::F16, 1000);
    check_edge(&path, Device::Cpu, &p, KvQuant::Kivi4, 777);
}

#[test]
fn gpu_plan_equals_the_load() {
    let path = model_path();
    let budget = 140u64 << 20;
    let p = match plan(&path, &opts(Device::Gpu, budget), None) {
        Ok(p) => p,
        Err(e) if e.kind() == ErrorKind::Unsupported && !tern_tests::gpu_required("plan") => {
            eprintln!("skipping: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    assert_eq!(p.backend, BackendKind::Gpu);
    let model = Model::open_with(&path, &opts(Device::Gpu, budget)).unwrap();
    let m = model.report().memory;
    assert_eq!(
        p.weights_bytes,
        m.weight_bytes + m.jit_scratch_bytes,
        "weights"
    );
    eprintln!(
        "GPU plan: weights {} reserve {} scratch {}; live after load {:?}",
        p.weights_bytes, p.reserve_bytes, p.scratch_bytes, m.gpu_allocated_now
    );
    // A session of the budget's largest context is made under the budget; its KV cache is the
    // plan's, and all that is live stays within the plan's total and within 5 % of it (the
    // allowances for buffer granularity and the recorded plans' parameter buffers, which a new
    // session has not used yet: 96.0 % measured at f32 on lavapipe).
    for kv in [KvQuant::F32, KvQuant::Q8, KvQuant::Kivi4] {
        let n = p.config(kv).unwrap().budget_context;
        assert!(n > 128, "{kv:?}: {n}");
        let mut s = session(&model, kv, n);
        let r = s.report().unwrap();
        assert_eq!(r.kv_bytes, p.kv_bytes(kv, n), "{kv:?}");
        let live = model.report().memory.gpu_allocated_now.unwrap();
        let planned = p.bytes_needed(kv, n);
        eprintln!("{kv:?} at {n}: live {live}, planned {planned}");
        assert!(live <= planned, "{kv:?}: live {live} > planned {planned}");
        assert!(
            live as f64 >= 0.95 * planned as f64,
            "{kv:?}: live {live} vs planned {planned}"
        );
        let peak = model.report().memory.gpu_allocated_peak.unwrap();
        assert!(peak <= budget, "{kv:?}: peak {peak}");
        drop(s);
    }
    // (Above the smallest budget the model loads with, which keeps room for 512 f32 positions.)
    check_edge(&path, Device::Gpu, &p, KvQuant::F16, 2000);
}

fn tern(args: &[&str]) -> std::process::Output {
    Command::new(tern_tests::tern_bin())
        .args(args)
        .output()
        .expect("run tern")
}

#[test]
fn cli_plan_json_auto_and_refusal() {
    let path = model_path();
    let ps = path.to_str().unwrap();
    let out = tern(&[
        "plan",
        ps,
        "--device",
        "cpu",
        "--max-memory",
        "200M",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let want = plan(&path, &opts(Device::Cpu, 200 << 20), None).unwrap();
    assert_eq!(j["budget_bytes"], 200u64 << 20);
    assert_eq!(j["weights_bytes"], want.weights_bytes);
    assert_eq!(j["scratch_bytes"], want.scratch_bytes);
    assert!(j["chosen"].is_null());
    let configs = j["configs"].as_array().unwrap();
    assert_eq!(configs.len(), KvQuant::ALL.len());
    for (c, w) in configs.iter().zip(&want.configs) {
        assert_eq!(c["kv"], w.kv.name());
        assert_eq!(c["kv_bytes_per_token"], w.kv_bytes_per_token);
        assert_eq!(c["max_context"], w.max_context);
    }
    // With a context: the first format of the quality order that fits it.
    let out = tern(&[
        "plan",
        ps,
        "--device",
        "cpu",
        "--max-memory",
        "200M",
        "--context",
        "2048",
        "--json",
    ]);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let want = plan(&path, &opts(Device::Cpu, 200 << 20), Some(2048)).unwrap();
    let chosen = want.chosen.unwrap();
    assert_eq!(j["chosen"]["kv"], chosen.kv.name());
    assert_eq!(j["chosen"]["context"], 2048);
    // More than fits: chosen null.
    let out = tern(&[
        "plan",
        ps,
        "--device",
        "cpu",
        "--max-memory",
        "120M",
        "--context",
        "8000",
        "--json",
    ]);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(j["chosen"].is_null(), "{j}");

    // `-c auto` takes the plan's largest context of the session's format.
    let kv = "q8";
    let out = tern(&[
        "run",
        ps,
        "--device",
        "cpu",
        "--max-memory",
        "200M",
        "-c",
        "auto",
        "--kv",
        kv,
        "-p",
        "Hi",
        "-n",
        "1",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let n = want.max_context(KvQuant::Q8);
    assert!(
        err.contains(&format!("-c auto = {n} positions of KV format {kv}")),
        "{err}"
    );
    // A context above the plan's is refused before loading, naming the plan.
    let over = (want.config(KvQuant::Q8).unwrap().budget_context + 1).to_string();
    let out = tern(&[
        "run",
        ps,
        "--device",
        "cpu",
        "--max-memory",
        "200M",
        "-c",
        &over,
        "--kv",
        kv,
        "-p",
        "Hi",
        "-n",
        "1",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("the plan's largest context for q8"), "{err}");
    let depth = want.config(KvQuant::Q8).unwrap().budget_context.to_string();
    let out = tern(&[
        "bench",
        ps,
        "--device",
        "cpu",
        "--max-memory",
        "200M",
        "--kv",
        kv,
        "-d",
        &depth,
        "-p",
        "0",
        "-n",
        "4",
        "-r",
        "1",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("does not fit"), "{err}");
    // `-c auto` needs a budget.
    let out = tern(&["run", ps, "-c", "auto", "-p", "Hi", "-n", "1"]);
    assert!(!out.status.success());
}
