//! Which verbs a backend has ([`crate::Model::capabilities`]).
//!
//! Most of the engine's verbs run on every backend. The few that do not are named by a [`Verb`];
//! a backend's [`Capabilities`] lists the ones it has, and calling one it lacks returns
//! [`crate::EngineError::Unsupported`] (kind [`crate::ErrorKind::Unsupported`]) with nothing run —
//! never a silent default.

use std::fmt;

/// Which backend a model was loaded for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// The CPU reference (`tern-reference`).
    Cpu,
    /// The GPU engine (`tern-gpu`).
    Gpu,
}

/// A verb that only some backends have.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// Sampling on the device: a decode step of `Session::generate` / `Session::eval_next`
    /// reads back the argmax or the sampling candidates instead of the logits (GPU). Not a
    /// public call of its own: without it the session samples from the full logits (CPU, where
    /// they are in memory anyway), with the same result.
    DeviceSampling,
    /// `Session::host_transfers` and `Session::reset_host_transfers`: what the steps read back
    /// from the GPU.
    HostTransfers,
    /// `Session::profile_decode_step` and `Session::profile_prefill`: per-kernel GPU timestamps
    /// (a GPU whose adapter has `TIMESTAMP_QUERY`).
    Profile,
    /// `Session::measure_activation_sparsity`: the zero codes of the quantized linear inputs,
    /// counted on the GPU.
    ActivationSparsity,
    /// `Model::set_forward_options`: the CPU forward pass's numerical options.
    ForwardOptions,
    /// `Session::set_llama_cpp_numerics(true)`: llama.cpp's CPU numerics (`false`, the model's
    /// own numerics, is accepted everywhere).
    LlamaCppNumerics,
    /// `Model::score_in_cache`: scoring in a caller's CPU KV cache (`tern_reference::KvCache`).
    ScoreInCache,
    /// `Model::simulate_device_loss`: destroy the GPU device (tests of device loss; `false` on
    /// a backend without one).
    SimulateDeviceLoss,
}

impl Verb {
    /// Every verb, in declaration order.
    pub const ALL: [Verb; 8] = [
        Verb::DeviceSampling,
        Verb::HostTransfers,
        Verb::Profile,
        Verb::ActivationSparsity,
        Verb::ForwardOptions,
        Verb::LlamaCppNumerics,
        Verb::ScoreInCache,
        Verb::SimulateDeviceLoss,
    ];

    /// The public call(s) this verb names.
    pub fn name(self) -> &'static str {
        match self {
            Verb::DeviceSampling => "device sampling",
            Verb::HostTransfers => "host_transfers",
            Verb::Profile => "profile_decode_step/profile_prefill",
            Verb::ActivationSparsity => "measure_activation_sparsity",
            Verb::ForwardOptions => "set_forward_options",
            Verb::LlamaCppNumerics => "set_llama_cpp_numerics",
            Verb::ScoreInCache => "score_in_cache",
            Verb::SimulateDeviceLoss => "simulate_device_loss",
        }
    }

    /// What to do instead, for the error message.
    pub(crate) fn hint(self) -> &'static str {
        match self {
            Verb::DeviceSampling | Verb::HostTransfers | Verb::ActivationSparsity => {
                "a GPU verb: load the model on the GPU (--device gpu, TERN_DEVICE_GPU)"
            }
            Verb::Profile => {
                "per-kernel timings need a GPU whose adapter has TIMESTAMP_QUERY (--device gpu)"
            }
            Verb::SimulateDeviceLoss => "there is no GPU device under this model",
            Verb::LlamaCppNumerics => {
                "llama.cpp numerics are a CPU mode: load the model on the CPU (--device cpu, \
                 TERN_DEVICE_CPU) to use them"
            }
            Verb::ForwardOptions | Verb::ScoreInCache => {
                "a CPU verb: load the model on the CPU (--device cpu, TERN_DEVICE_CPU)"
            }
        }
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Cpu => "CPU",
            BackendKind::Gpu => "GPU",
        })
    }
}

/// The verbs one loaded backend has ([`crate::Model::capabilities`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    backend: BackendKind,
    verbs: &'static [Verb],
}

impl Capabilities {
    /// The CPU reference: its forward pass's options and numerics, scoring in a caller's cache.
    pub(crate) const CPU: Capabilities = Capabilities {
        backend: BackendKind::Cpu,
        verbs: &[
            Verb::ForwardOptions,
            Verb::LlamaCppNumerics,
            Verb::ScoreInCache,
        ],
    };

    /// The GPU engine (`timestamps`: the adapter has `TIMESTAMP_QUERY`, for [`Verb::Profile`]).
    pub(crate) fn gpu(timestamps: bool) -> Capabilities {
        const WITH: &[Verb] = &[
            Verb::DeviceSampling,
            Verb::HostTransfers,
            Verb::Profile,
            Verb::ActivationSparsity,
            Verb::SimulateDeviceLoss,
        ];
        const WITHOUT: &[Verb] = &[
            Verb::DeviceSampling,
            Verb::HostTransfers,
            Verb::ActivationSparsity,
            Verb::SimulateDeviceLoss,
        ];
        Capabilities {
            backend: BackendKind::Gpu,
            verbs: if timestamps { WITH } else { WITHOUT },
        }
    }

    pub fn backend(&self) -> BackendKind {
        self.backend
    }

    /// Whether this backend has `verb`.
    pub fn has(&self, verb: Verb) -> bool {
        self.verbs.contains(&verb)
    }

    /// The verbs this backend has.
    pub fn verbs(&self) -> &'static [Verb] {
        self.verbs
    }
}
