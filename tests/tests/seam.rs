//! The sealed engine seam: a backend's capabilities say which gated verbs it has, and each
//! public verb it lacks answers `EngineError::Unsupported` (kind `Unsupported`, naming the verb
//! and the backend) with nothing run — never a silent default. Checked on the CPU and on the
//! GPU (lavapipe in CI), on a tiny BitNet model (quantized activations, so activation sparsity
//! has something to count).

use std::path::PathBuf;

use tern_engine::{
    BackendKind, Device, EngineError, ErrorKind, ForwardOptions, LoadOptions, Model, NoObserver,
    Sampler, SamplingParams, ScoreOptions, Session, Verb,
};
use tern_import::pack::PackOptions;
use tern_tests::{golden, scratch};

fn tiny_bitnet(name: &str) -> PathBuf {
    let out = scratch(name).join("model.tern");
    tern_import::hf::import_hf_dir(
        &golden("bitnet_hf/tiny_a"),
        &out,
        &PackOptions::default(),
        &mut |_, _, _| {},
    )
    .unwrap();
    out
}

fn open(path: &std::path::Path, device: Device) -> Option<Model> {
    let opts = LoadOptions {
        device,
        ..Default::default()
    };
    match Model::open_with(path, &opts) {
        Ok(m) => Some(m),
        Err(e) if device == Device::Gpu && !tern_tests::gpu_required("seam") => {
            eprintln!("skipping the GPU part: {e}");
            None
        }
        Err(e) => panic!("loading {} on {device:?}: {e}", path.display()),
    }
}

/// The error of a verb the backend lacks.
fn is_unsupported(e: &EngineError, verb: Verb, backend: BackendKind) -> bool {
    e.kind() == ErrorKind::Unsupported
        && matches!(e, EngineError::Unsupported { verb: v, backend: b } if *v == verb && *b == backend)
}

/// Call every public verb `verb` names on `model` (and a fresh session holding a few tokens):
/// `Ok` when it ran, the error otherwise. A call that fails leaves the session's history as it
/// was (nothing ran).
fn call(model: &mut Model, verb: Verb) -> Result<(), EngineError> {
    let prompt = [1u32, 17, 42];
    let check_untouched = |s: &Session<'_>, before: &[u32], r: &Result<(), EngineError>| {
        if r.is_err() {
            assert_eq!(
                s.history(),
                before,
                "{verb:?} failed but changed the session"
            );
        }
    };
    match verb {
        Verb::ForwardOptions => model.set_forward_options(ForwardOptions::default()),
        Verb::ScoreInCache => {
            let hp = model.meta().hparams.clone();
            let mut cache = tern_reference::KvCache::for_hparams(&hp, 8).unwrap();
            model
                .score_in_cache(
                    &mut cache,
                    &[1, 2, 3, 4],
                    &ScoreOptions::default(),
                    &mut NoObserver,
                )
                .map(|lp| assert_eq!(lp.len(), 3))
        }
        Verb::SimulateDeviceLoss => {
            // A test hook that answers with a bool: `false` = nothing to lose (checked against
            // the capabilities by the caller). Run last: it destroys the device.
            if model.simulate_device_loss() {
                Ok(())
            } else {
                Err(EngineError::Unsupported {
                    verb,
                    backend: model.report().backend,
                })
            }
        }
        _ => {
            let mut s = Session::new(model, 32).unwrap();
            s.eval(&prompt).unwrap();
            let before = s.history().to_vec();
            let r = match verb {
                Verb::HostTransfers => s
                    .reset_host_transfers()
                    .and_then(|()| s.host_transfers())
                    .map(|t| assert_eq!(t.steps, 0)),
                Verb::Profile => s
                    .profile_decode_step(5)
                    .map(|p| assert!(!p.is_empty()))
                    .and_then(|()| s.profile_prefill(&[6, 7]).map(|p| assert!(!p.is_empty()))),
                Verb::ActivationSparsity => s
                    .measure_activation_sparsity(&[8, 9])
                    .map(|v| assert!(!v.is_empty())),
                Verb::LlamaCppNumerics => s.set_llama_cpp_numerics(true),
                Verb::DeviceSampling => {
                    // No public call of its own: `eval_next` samples on the device where the
                    // backend can, else from the full logits; the same token either way.
                    let mut picks = Vec::new();
                    for device in [true, false] {
                        s.truncate(before.len());
                        s.set_device_sampling(device);
                        let mut sampler = Sampler::new(SamplingParams::greedy()).unwrap();
                        picks.push(s.eval_next(3, &mut sampler).unwrap());
                    }
                    assert_eq!(picks[0], picks[1]);
                    s.truncate(before.len());
                    if model.capabilities().has(Verb::HostTransfers) {
                        // On the device path a greedy step reads back 4 bytes, not the row.
                        s.set_device_sampling(true);
                        s.reset_host_transfers().unwrap();
                        let mut sampler = Sampler::new(SamplingParams::greedy()).unwrap();
                        s.eval_next(3, &mut sampler).unwrap();
                        assert_eq!(s.host_transfers().unwrap().readback_bytes, 4);
                    }
                    return Ok(());
                }
                _ => panic!("a verb this test does not know: {verb:?}"),
            };
            check_untouched(&s, &before, &r);
            r
        }
    }
}

/// Every verb: the ones in the capabilities run, the others are `Unsupported` naming the verb
/// and the backend.
fn check(model: &mut Model, backend: BackendKind) {
    let caps = model.capabilities();
    assert_eq!(caps.backend(), backend);
    assert_eq!(model.report().backend, backend);
    for v in caps.verbs() {
        assert!(caps.has(*v));
    }
    // The device-loss hook last: it destroys the GPU.
    let mut verbs: Vec<Verb> = Verb::ALL
        .into_iter()
        .filter(|v| *v != Verb::SimulateDeviceLoss)
        .collect();
    verbs.push(Verb::SimulateDeviceLoss);
    for verb in verbs {
        let r = call(model, verb);
        if verb == Verb::DeviceSampling {
            // No public call of its own: both backends generate, one on the device path.
            if let Err(e) = r {
                panic!("{backend:?}: decoding with and without device sampling: {e}");
            }
            continue;
        }
        if caps.has(verb) {
            if let Err(e) = r {
                panic!("{backend:?} has {verb:?} but it failed: {e}");
            }
        } else {
            let e = r.expect_err(&format!("{backend:?} lacks {verb:?} but it ran"));
            assert!(is_unsupported(&e, verb, backend), "{verb:?}: {e:?}");
            assert!(e.to_string().contains(verb.name()), "{e}");
        }
    }
}

#[test]
fn cpu_verbs_follow_the_capabilities() {
    let path = tiny_bitnet("seam_cpu");
    let mut m = open(&path, Device::Cpu).unwrap();
    let caps = m.capabilities();
    for v in [
        Verb::ForwardOptions,
        Verb::LlamaCppNumerics,
        Verb::ScoreInCache,
    ] {
        assert!(caps.has(v), "{v:?}");
    }
    for v in [
        Verb::DeviceSampling,
        Verb::HostTransfers,
        Verb::Profile,
        Verb::ActivationSparsity,
        Verb::SimulateDeviceLoss,
    ] {
        assert!(!caps.has(v), "{v:?}");
    }
    check(&mut m, BackendKind::Cpu);
    // `false`, the model's own numerics, is no CPU-only request.
    let mut s = Session::new(&m, 8).unwrap();
    s.set_llama_cpp_numerics(false).unwrap();
}

#[test]
fn gpu_verbs_follow_the_capabilities() {
    let path = tiny_bitnet("seam_gpu");
    let Some(mut m) = open(&path, Device::Gpu) else {
        return;
    };
    let caps = m.capabilities();
    for v in [
        Verb::DeviceSampling,
        Verb::HostTransfers,
        Verb::ActivationSparsity,
        Verb::SimulateDeviceLoss,
    ] {
        assert!(caps.has(v), "{v:?}");
    }
    for v in [
        Verb::ForwardOptions,
        Verb::LlamaCppNumerics,
        Verb::ScoreInCache,
    ] {
        assert!(!caps.has(v), "{v:?}");
    }
    let mut s = Session::new(&m, 8).unwrap();
    s.set_llama_cpp_numerics(false).unwrap();
    drop(s);
    check(&mut m, BackendKind::Gpu);
}

/// A model reopened on the CPU after a device loss keeps no GPU-only state, and one reopened on
/// the GPU from a CPU model with forward options set drops them (the GPU has none) instead of
/// failing.
#[test]
fn reopen_carries_forward_options_only_where_they_exist() {
    let path = tiny_bitnet("seam_reopen");
    let mut cpu = open(&path, Device::Cpu).unwrap();
    cpu.set_forward_options(ForwardOptions::llama_cpp_like())
        .unwrap();
    let again = cpu.reopen_on(Device::Cpu).unwrap();
    assert!(again.capabilities().has(Verb::ForwardOptions));
    match cpu.reopen_on(Device::Gpu) {
        Ok(g) => assert_eq!(g.capabilities().backend(), BackendKind::Gpu),
        Err(e) if !tern_tests::gpu_required("seam") => eprintln!("skipping the GPU part: {e}"),
        Err(e) => panic!("reopen on the GPU: {e}"),
    }
}
