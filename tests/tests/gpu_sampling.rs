//! Sampling on the GPU (`Session::eval_next`, `Session::generate`): the GPU sends back its argmax
//! or the sampling candidates (top-64 after setting the repetition-penalized tokens aside, the
//! log-sum-exp of the rest) and the host finishes; the full row of logits is read only when the
//! candidates cannot decide exactly. The oracle is the CPU sampler on the full row of the same
//! GPU logits (`Session::set_device_sampling(false)`): the same tokens for the same seed, over
//! greedy, temperature, top-k, top-p, min-p and repetition-penalty settings, on SmolLM2-135M
//! (vocabulary 49152) and a random BitNet model (vocabulary 256) on lavapipe; and what a step
//! reads back (784 bytes, or 4 for greedy, instead of the row).

use std::path::Path;

use tern_engine::{Device, GenerateOptions, LoadOptions, Model, Sampler, SamplingParams, Session};
use tern_import::pack::PackOptions;
use tern_tests::{golden, scratch};

fn open_gpu(path: &Path) -> Option<Model> {
    let opts = LoadOptions {
        device: Device::Gpu,
        max_memory: None,
        ..Default::default()
    };
    match Model::open_with(path, &opts) {
        Ok(m) => Some(m),
        Err(e) if !tern_tests::gpu_required("gpu_sampling") => {
            eprintln!("skipping: {e}");
            None
        }
        Err(e) => panic!("loading {} on the GPU: {e}", path.display()),
    }
}

fn settings() -> Vec<(&'static str, SamplingParams)> {
    let p = |temperature, top_k, top_p, min_p, repeat_penalty| SamplingParams {
        temperature,
        top_k,
        top_p,
        min_p,
        repeat_penalty,
        repeat_last_n: 64,
        seed: 1234,
    };
    vec![
        ("greedy", p(0.0, 0, 1.0, 0.0, 1.0)),
        ("greedy + penalty", p(0.0, 0, 1.0, 0.0, 1.3)),
        ("temperature", p(0.9, 0, 1.0, 0.0, 1.0)),
        ("top-k 40", p(0.8, 40, 1.0, 0.0, 1.0)),
        ("top-p 0.9", p(0.8, 0, 0.9, 0.0, 1.0)),
        ("min-p 0.05", p(1.0, 0, 1.0, 0.05, 1.0)),
        ("penalty + all", p(0.7, 50, 0.95, 0.02, 1.2)),
    ]
}

/// `n` tokens after `prompt` by `eval_next`, sampled on the device or on the host; and the
/// session's readback counters over the decode steps.
fn decode(
    model: &Model,
    prompt: &[u32],
    p: &SamplingParams,
    n: usize,
    device: bool,
) -> (Vec<u32>, tern_engine::HostTransfers) {
    let mut s = Session::new(model, prompt.len() + n + 1).unwrap();
    s.set_device_sampling(device);
    let mut sampler = Sampler::new(p.clone()).unwrap();
    let logits = s.eval(prompt).unwrap();
    let mut history = prompt.to_vec();
    let mut t = sampler.sample(&logits, &history).unwrap();
    s.reset_host_transfers().unwrap();
    let mut out = vec![t];
    for _ in 1..n {
        t = s.eval_next(t, &mut sampler).unwrap();
        history.push(t);
        out.push(t);
    }
    (out, s.host_transfers().unwrap())
}

/// Every setting (`only`: those named) over `n` tokens.
fn check_model(model: &Model, prompt: &[u32], n: usize, only: Option<&[&str]>) {
    let vocab = model.n_vocab() as u64;
    let chosen = settings()
        .into_iter()
        .filter(|(name, _)| only.is_none_or(|o| o.contains(name)));
    for (name, p) in chosen {
        let (host, hx) = decode(model, prompt, &p, n, false);
        let (dev, dx) = decode(model, prompt, &p, n, true);
        eprintln!("{name}: {dev:?}; device {dx:?}, host {hx:?}");
        assert_eq!(
            dev, host,
            "{name}: GPU-sampled tokens differ from the CPU sampler's"
        );
        let steps = (n - 1) as u64;
        assert_eq!(hx.readback_bytes, steps * vocab * 4, "{name}");
        assert_eq!(dx.steps, steps, "{name}");
        assert_eq!(dx.round_trips, steps + dx.full_rows, "{name}");
        let per_step = if p.temperature == 0.0 && p.repeat_penalty == 1.0 {
            4
        } else {
            784
        };
        assert_eq!(
            dx.readback_bytes,
            steps * per_step + dx.full_rows * vocab * 4,
            "{name}"
        );
        if p.temperature == 0.0 || (1..=64).contains(&p.top_k) {
            assert_eq!(dx.full_rows, 0, "{name}: exact from the candidates");
        }
    }
}

#[test]
fn gpu_sampling_equals_cpu_sampler_smollm2() {
    let path = scratch("gpu_sampling_smollm2").join("smollm2.tern");
    tern_import::gguf_import::import_gguf(
        &tern_tests::smollm2_gguf(),
        &path,
        &PackOptions::default(),
        &mut |_, _, _| {},
    )
    .unwrap();
    let Some(model) = open_gpu(&path) else {
        return;
    };
    let prompt = model
        .tokenizer()
        .unwrap()
        .encode("Once upon a time, in a small village,", true)
        .unwrap();
    // Four settings (lavapipe runs SmolLM2 at a few tokens/s on CI's two cores).
    let four = [
        "greedy + penalty",
        "temperature",
        "top-p 0.9",
        "penalty + all",
    ];
    check_model(&model, &prompt, 8, Some(&four));
    // `generate` takes the same path: the same text sampled on the device and on the host.
    let p = &settings()[4].1;
    let opts = GenerateOptions {
        max_tokens: 4,
        stop_tokens: Vec::new(),
        stop_strings: Vec::new(),
    };
    let mut outs = Vec::new();
    for device in [true, false] {
        let mut s = Session::new(&model, 64).unwrap();
        s.set_device_sampling(device);
        outs.push(s.generate(&prompt, p, &opts, &mut |_| true).unwrap().tokens);
    }
    assert_eq!(outs[0], outs[1]);
}

#[test]
fn gpu_sampling_equals_cpu_sampler_random_bitnet() {
    let out = scratch("gpu_sampling_tiny").join("model.tern");
    tern_import::hf::import_hf_dir(
        &golden("bitnet_hf/tiny_a"),
        &out,
        &PackOptions::default(),
        &mut |_, _, _| {},
    )
    .unwrap();
    let Some(model) = open_gpu(&out) else {
        return;
    };
    check_model(&model, &[1, 17, 42, 5, 99, 3], 40, None);
}
