//! Greedy decode steps run ahead on the GPU (issue 15; `runtime/gpu/src/model/session/
//! lookahead.rs`): `GpuSession::step_argmax` submits the next step, fed by this step's argmax on
//! the GPU, before it reads this one back. Checked here on a random BitNet model (lavapipe in CI)
//! against the same session type with the lookahead off (the step-by-step path, itself checked
//! against the CPU reference in gpu_engine.rs and gpu_kv.rs): the same tokens when the argmax is
//! fed back (the step ahead is used), when another token is fed (the step ahead is dropped),
//! across a truncate and a batch eval, and the same logits after all of it; the logits a dropped
//! step replaced are refused, not returned. In the f32 cache, q8, absmax a4, KIVI q4 with a
//! window of 8 (the script crosses several window blocks, whose filling step is not run ahead,
//! and drops steps next to them) and MiniCache over q4.

use std::sync::Arc;

use tern_format::{Kivi, KvQuant, KvSpec, MiniCache};

use tern_import::hf::import_hf_dir;
use tern_import::pack::PackOptions;
use tern_tests::{golden, scratch};

/// The random BitNet model (tied embeddings) packed with `opts`, loaded with `budget` (`Some(0)`:
/// the smallest budget it loads with, which keeps every NeuZip matrix compressed).
fn model_with(
    tag: &str,
    opts: &PackOptions,
    budget: Option<u64>,
) -> Option<(Arc<tern_gpu::GpuModel>, u32)> {
    let path = scratch(&format!("gpu_lookahead_{tag}")).join("model.tern");
    import_hf_dir(&golden("bitnet_hf/tiny_a"), &path, opts, &mut |_, _, _| {}).expect("import");
    let file = tern_format::TernFile::open(&path).unwrap();
    let ctx = match tern_gpu::GpuContext::new(tern_gpu::DevicePreference::Gpu) {
        Ok(c) => c,
        Err(e) if !tern_tests::gpu_required("gpu_lookahead") => {
            eprintln!("skipping: {e}");
            return None;
        }
        Err(e) => panic!("{e}"),
    };
    let vocab = file.meta().hparams.n_vocab;
    let ctx = Arc::new(ctx);
    let max_memory = match budget {
        Some(0) => match tern_gpu::GpuModel::load(ctx.clone(), &file, opts_with(Some(0))) {
            Err(tern_gpu::GpuError::OverBudget { minimum, .. }) => Some(minimum),
            r => panic!("a budget of 0: {:?}", r.map(|_| ())),
        },
        b => b,
    };
    let m = tern_gpu::GpuModel::load(ctx, &file, opts_with(max_memory)).unwrap();
    Some((Arc::new(m), vocab))
}

fn opts_with(max_memory: Option<u64>) -> tern_gpu::GpuModelOptions {
    tern_gpu::GpuModelOptions {
        max_memory,
        kv: KvSpec::f32(),
        ..Default::default()
    }
}

fn model() -> Option<(Arc<tern_gpu::GpuModel>, u32)> {
    model_with("tiny_a", &PackOptions::default(), None)
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// What one session does, with the lookahead `on` or off: (tokens, final logits, len).
fn script(
    model: &Arc<tern_gpu::GpuModel>,
    vocab: u32,
    kv: &KvSpec,
    on: bool,
) -> (Vec<u32>, Vec<f32>, u64) {
    let mut s = tern_gpu::GpuSession::new(model.clone(), 48, 16, kv).unwrap();
    s.set_lookahead(on).unwrap();
    let prompt: Vec<u32> = (0..5u32).map(|i| (i * 37 + 1) % vocab).collect();
    let mut out = Vec::new();
    let mut t = argmax(&s.eval(&prompt).unwrap());
    // greedy: every step after the first finds its work run ahead
    for _ in 0..12 {
        t = s.step_argmax(t).unwrap();
        out.push(t);
    }
    // the logits of the last step: replaced by the step run ahead, so refused (on), or returned
    assert_eq!(
        s.last_logits().is_err(),
        on,
        "last_logits after a step run ahead"
    );
    // another token than the argmax: the step ahead is dropped, this one runs (9 in a row:
    // across a KIVI window block)
    for k in 0..9 {
        t = s.step_argmax((t + 1 + k) % vocab).unwrap();
        out.push(t);
    }
    for _ in 0..4 {
        t = s.step_argmax(t).unwrap();
        out.push(t);
    }
    // back two positions, then greedy again
    let kept = s.truncate(s.len() - 2);
    out.push(kept as u32);
    for _ in 0..5 {
        t = s.step_argmax(t).unwrap();
        out.push(t);
    }
    // a batch after a step run ahead: it waits for it and runs at len()
    let logits = s.eval(&[3 % vocab, 4 % vocab, t]).unwrap();
    assert!(
        s.last_logits().is_ok(),
        "an eval leaves its logits readable"
    );
    t = argmax(&logits);
    for _ in 0..3 {
        t = s.step_argmax(t).unwrap();
        out.push(t);
    }
    let last = s.eval(&[t]).unwrap();
    (out, last, s.len())
}

#[test]
fn greedy_steps_run_ahead_match_step_by_step() {
    let Some((model, vocab)) = model() else {
        return;
    };
    let kivi = Kivi {
        group: 4,
        residual: 8,
    };
    let mc = MiniCache {
        start_layer: 0,
        t: 0.5,
        gamma: 0.25,
    };
    let spec = |quant, minicache| KvSpec {
        quant,
        kivi,
        minicache,
    };
    for kv in [
        KvSpec::f32(),
        spec(KvQuant::Q8, None),
        spec(KvQuant::Absmax4, None),
        spec(KvQuant::Kivi4, None),
        spec(KvQuant::Kivi4, Some(mc)),
    ] {
        let (t_on, l_on, n_on) = script(&model, vocab, &kv, true);
        let (t_off, l_off, n_off) = script(&model, vocab, &kv, false);
        assert_eq!(t_on, t_off, "{kv:?}: tokens with and without the lookahead");
        assert_eq!(n_on, n_off, "{kv:?}: positions held");
        assert_eq!(l_on, l_off, "{kv:?}: the final logits, bit for bit");
    }
    // the session ran at positions up to its context: the step ahead never ran past it
    let mut s = tern_gpu::GpuSession::new(model.clone(), 8, 8, &KvSpec::f32()).unwrap();
    let mut t = argmax(&s.eval(&[1, 2]).unwrap());
    for _ in 0..6 {
        t = s.step_argmax(t).unwrap();
    }
    assert_eq!(s.len(), 8);
    assert!(s.step_argmax(t).is_err(), "a full cache is an error");
    assert_eq!(s.len(), 8);
}

/// The tied head kept NeuZip-compressed (lossless and lossy-3, the smallest budget): token rows
/// are decoded on the GPU (`neuzip_embed.wgsl`), so greedy steps run ahead here too (the script
/// checks that the step ahead was used: `last_logits` is refused) with the same tokens and
/// logits as step by step; the head is reported kept compressed (`jit`).
#[test]
fn kept_neuzip_head_steps_run_ahead() {
    for (tag, floats) in [
        ("nz", tern_import::pack::FloatMode::NeuZip),
        ("nz3", tern_import::pack::FloatMode::NeuZipLossy(3)),
    ] {
        let opts = PackOptions {
            floats,
            ..PackOptions::default()
        };
        let Some((model, vocab)) = model_with(tag, &opts, Some(0)) else {
            return;
        };
        assert!(
            model
                .memory_plan()
                .tensors
                .iter()
                .any(|t| t.name == "token_embd.weight" && t.placement == "jit"),
            "{tag}: the tied head is kept compressed: {:?}",
            model.memory_plan().tensors
        );
        let kv = KvSpec::f32();
        let (t_on, l_on, n_on) = script(&model, vocab, &kv, true);
        let (t_off, l_off, n_off) = script(&model, vocab, &kv, false);
        assert_eq!(t_on, t_off, "{tag}: tokens with and without the lookahead");
        assert_eq!(n_on, n_off, "{tag}: positions held");
        assert_eq!(l_on, l_off, "{tag}: the final logits, bit for bit");
    }
}
