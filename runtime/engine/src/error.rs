//! The one error type of `tern-engine`, and its one classification ([`ErrorKind`]).
//!
//! A backend's own error (`tern_gpu::GpuError`, `tern_reference::ReferenceError`) never appears
//! in [`EngineError`]'s variants: it is classified once, here, when it enters the engine, and
//! kept (for its message and `source()`) inside an opaque [`BackendError`]. A front end (the C
//! ABI, the CLI, the app) reads [`EngineError::kind`] and needs neither backend crate.

use std::fmt;

use thiserror::Error;

use crate::capabilities::{BackendKind, Verb};

/// What kind of failure an [`EngineError`] is: what a caller can do about it. The C ABI maps each
/// kind to one `tern_status` and reads nothing else.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// An argument is out of range or malformed (a token outside the vocabulary, an empty
    /// prompt, a bad option value, nothing to score).
    InvalidArgument,
    /// Reading a file failed (missing, unreadable).
    Io,
    /// The model file is at fault (bad magic, checksum, a missing tensor, a shape or
    /// hyperparameter that does not fit): the same answer whichever backend loaded it.
    BadFile,
    /// Valid but not supported here: a newer format version or feature, an encoding this
    /// backend cannot run, no usable GPU, or a verb this backend does not have
    /// ([`EngineError::Unsupported`], see [`crate::Capabilities`]).
    Unsupported,
    /// Memory could not be allocated, or the memory budget cannot hold what was asked for.
    OutOfMemory,
    /// The prompt (or scored text) does not fit the context.
    ContextFull,
    /// The call was cancelled ([`crate::Session::cancel_handle`]).
    Cancelled,
    /// A bug in tern or a GPU driver problem: an internal invariant failed.
    Internal,
    /// The model has no tokenizer, so text cannot be used with it.
    NoTokenizer,
    /// The tokenizer failed to encode or decode (at load time: the file's tokenizer does not
    /// build).
    Tokenizer,
    /// The model has no chat template, or the template failed to render.
    Template,
    /// The forward pass produced non-finite values.
    Numeric,
    /// The GPU device was lost: the model and its sessions must be recreated
    /// ([`crate::Model::reopen_on`]).
    DeviceLost,
    /// A saved session state was made for another model, KV spec, context or backend
    /// ([`crate::Session::restore_state`]); the session is unchanged.
    StateMismatch,
}

impl ErrorKind {
    /// Every kind, in declaration order (for tables and for tests that map each one).
    pub const ALL: [ErrorKind; 14] = [
        ErrorKind::InvalidArgument,
        ErrorKind::Io,
        ErrorKind::BadFile,
        ErrorKind::Unsupported,
        ErrorKind::OutOfMemory,
        ErrorKind::ContextFull,
        ErrorKind::Cancelled,
        ErrorKind::Internal,
        ErrorKind::NoTokenizer,
        ErrorKind::Tokenizer,
        ErrorKind::Template,
        ErrorKind::Numeric,
        ErrorKind::DeviceLost,
        ErrorKind::StateMismatch,
    ];
}

/// An error of a backend (the CPU reference or the GPU engine), already classified. Its
/// `Display` and `source()` are the backend error's own; [`BackendError::downcast_ref`] reaches
/// the backend's typed error for code that depends on that backend crate anyway (its tests).
pub struct BackendError {
    kind: ErrorKind,
    inner: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl BackendError {
    fn new(kind: ErrorKind, inner: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self {
            kind,
            inner: Box::new(inner),
        }
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The backend's own error, when it is a `T` (`tern_gpu::GpuError`,
    /// `tern_reference::ReferenceError`).
    pub fn downcast_ref<T: std::error::Error + 'static>(&self) -> Option<&T> {
        self.inner.downcast_ref::<T>()
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.inner, f)
    }
}

impl fmt::Debug for BackendError {
    /// The backend error's own `Debug` (e.g. `NoAdapter("...")`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.inner, f)
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner.source()
    }
}

#[derive(Debug, Error)]
pub enum EngineError {
    /// The file could not be read or is not a valid `.tern` model (from whichever backend
    /// loaded it).
    #[error(transparent)]
    Format(#[from] tern_format::FormatError),
    /// A backend's own error (its message as the backend wrote it); [`EngineError::kind`] says
    /// what kind it is.
    #[error(transparent)]
    Backend(BackendError),
    /// The GPU device was lost (driver reset, GPU hang, the OS reclaiming it): the model and its
    /// sessions cannot be used again. Reopen the model (`Model::reopen_on(Device::Cpu)` runs it
    /// on the CPU) and make a new session; `Session::history` says what to feed it.
    #[error("the GPU device was lost ({0}): this model and its sessions must be recreated (e.g. reopened on the CPU)")]
    DeviceLost(String),
    /// `verb` is not one of `backend`'s verbs ([`crate::Model::capabilities`]); nothing ran.
    #[error("{verb} is not available on the {backend} backend: {}", verb.hint())]
    Unsupported { verb: Verb, backend: BackendKind },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
    #[error("this model has no tokenizer: pass token ids (--tokens) instead of text")]
    NoTokenizer,
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("the prompt has {prompt} tokens but the context holds {ctx}: shorten it or raise the context size")]
    PromptTooLong { prompt: usize, ctx: usize },
    #[error("nothing to score: {0}")]
    NothingToScore(String),
    #[error("{tokens} tokens are too few for perplexity with a context of {n_ctx}: at least {needed} are needed (two windows, as llama-perplexity requires); use a longer text or a smaller -c")]
    TooFewTokens {
        tokens: usize,
        n_ctx: usize,
        needed: usize,
    },
    #[error("a context of {requested} tokens is larger than the model's training context ({n_ctx_train})")]
    ContextTooLarge {
        requested: usize,
        n_ctx_train: usize,
    },
    /// A session larger than the planner's largest context for its format under the memory
    /// budget ([`crate::plan::Plan::check`]); refused before anything is allocated.
    #[error("a context of {requested} positions in KV format {kv} does not fit the {budget}-byte memory budget: the plan's largest context for {kv} is {max_context} ({detail})")]
    ContextOverBudget {
        requested: u64,
        kv: &'static str,
        max_context: u64,
        budget: u64,
        detail: String,
    },
    #[error("numeric problem: {0}")]
    Numeric(String),
    /// A buffer larger than this machine's available memory was refused before any of it was
    /// touched (`tern_format::sysmem`): under memory overcommit it would be granted, then the
    /// OOM killer would end the app as its pages are written.
    #[error("{what} needs {bytes} bytes but this machine has {available} bytes available: use a smaller context (-c / n_ctx) or a compressed KV format")]
    OutOfMemory {
        what: String,
        bytes: u64,
        available: u64,
    },
    #[error("cancelled")]
    Cancelled,
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// A saved session state that cannot be restored ([`crate::Session::restore_state`]).
    #[error("session state: {0}")]
    State(#[from] StateError),
}

/// Why a saved session state ([`crate::Session::save_state`]) cannot be restored.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum StateError {
    /// Not a session state, truncated, or its checksum does not match
    /// ([`ErrorKind::BadFile`]).
    #[error("not a valid tern session state: {0}")]
    Corrupt(String),
    /// A state format this library does not read ([`ErrorKind::Unsupported`]).
    #[error("session state format version {found}; this library reads version {supported}")]
    Version { found: u32, supported: u32 },
    /// Made for another model, KV spec, context size or backend
    /// ([`ErrorKind::StateMismatch`]).
    #[error("the state was saved from {saved}, this session is {here}: restore it into a session of the same model (same file), KV options, context size and device")]
    Mismatch { saved: String, here: String },
}

pub type Result<T, E = EngineError> = std::result::Result<T, E>;

impl From<tern_gpu::GpuError> for EngineError {
    fn from(e: tern_gpu::GpuError) -> Self {
        use tern_gpu::GpuError as G;
        let e = match e {
            G::DeviceLost(why) => return EngineError::DeviceLost(why),
            G::Format(f) => return EngineError::Format(f),
            e => e,
        };
        let kind = match &e {
            // Returned above.
            G::DeviceLost(_) => ErrorKind::DeviceLost,
            G::Format(f) => format_kind(f),
            G::BadModel(_) | G::Corrupt { .. } => ErrorKind::BadFile,
            G::OutOfMemory { .. } | G::OverBudget { .. } => ErrorKind::OutOfMemory,
            G::CpuRequested | G::NoAdapter(_) | G::Unsupported { .. } | G::TooLarge { .. } => {
                ErrorKind::Unsupported
            }
            G::InvalidArgument { .. } => ErrorKind::InvalidArgument,
            // Operands of the wrong shape inside the engine: its own checks ran before.
            G::Shape { .. }
            | G::Internal { .. }
            | G::RequestDevice(_)
            | G::Wgpu { .. }
            | G::Readback { .. } => ErrorKind::Internal,
        };
        EngineError::Backend(BackendError::new(kind, e))
    }
}

impl From<tern_reference::ReferenceError> for EngineError {
    fn from(e: tern_reference::ReferenceError) -> Self {
        use tern_reference::ReferenceError as R;
        let e = match e {
            R::Format(f) => return EngineError::Format(f),
            e => e,
        };
        let kind = match &e {
            R::Format(f) => format_kind(f), // returned above
            R::MissingTensor { .. }
            | R::TensorShape { .. }
            | R::NotTernary { .. }
            | R::BadHParams(_) => ErrorKind::BadFile,
            R::UnsupportedEncoding { .. } => ErrorKind::Unsupported,
            R::TokenOutOfRange { .. } | R::EmptyInput => ErrorKind::InvalidArgument,
            R::ContextOverflow { .. } => ErrorKind::ContextFull,
            R::CacheMismatch { .. } | R::Shape { .. } => ErrorKind::Internal,
        };
        EngineError::Backend(BackendError::new(kind, e))
    }
}

fn io_kind(e: &std::io::Error) -> ErrorKind {
    match e.kind() {
        std::io::ErrorKind::OutOfMemory => ErrorKind::OutOfMemory,
        _ => ErrorKind::Io,
    }
}

fn format_kind(e: &tern_format::FormatError) -> ErrorKind {
    use tern_format::FormatError as F;
    match e {
        F::Io(io) => io_kind(io),
        F::UnsupportedVersion { .. }
        | F::UnsupportedFeatures { .. }
        | F::UnknownEncoding(_)
        | F::UnsupportedModel(_) => ErrorKind::Unsupported,
        F::BadMagic { .. }
        | F::Truncated { .. }
        | F::Checksum { .. }
        | F::OutOfRange { .. }
        | F::BadShape { .. }
        | F::Malformed { .. }
        | F::NonZeroPadding { .. }
        | F::NoSuchTensor(_)
        | F::DuplicateTensor(_)
        | F::Corrupt { .. } => ErrorKind::BadFile,
        F::InvalidArgument(_) => ErrorKind::InvalidArgument,
    }
}

impl EngineError {
    /// What kind of failure this is: tern's one classification of its errors (the C ABI's
    /// status is a function of it). Exhaustive on purpose: a new variant must be given a kind.
    pub fn kind(&self) -> ErrorKind {
        use EngineError as E;
        match self {
            E::Format(f) => format_kind(f),
            E::Backend(b) => b.kind(),
            E::DeviceLost(_) => ErrorKind::DeviceLost,
            E::Unsupported { .. } => ErrorKind::Unsupported,
            E::Tokenizer(_) => ErrorKind::Tokenizer,
            E::InvalidArgument(_)
            | E::NothingToScore(_)
            | E::TooFewTokens { .. }
            | E::ContextTooLarge { .. } => ErrorKind::InvalidArgument,
            E::Template(_) => ErrorKind::Template,
            E::NoTokenizer => ErrorKind::NoTokenizer,
            E::PromptTooLong { .. } => ErrorKind::ContextFull,
            E::ContextOverBudget { .. } => ErrorKind::OutOfMemory,
            E::Numeric(_) => ErrorKind::Numeric,
            E::OutOfMemory { .. } => ErrorKind::OutOfMemory,
            E::Cancelled => ErrorKind::Cancelled,
            E::Io(io) => io_kind(io),
            E::State(StateError::Corrupt(_)) => ErrorKind::BadFile,
            E::State(StateError::Version { .. }) => ErrorKind::Unsupported,
            E::State(StateError::Mismatch { .. }) => ErrorKind::StateMismatch,
        }
    }

    /// The backend's own typed error inside [`EngineError::Backend`], when it is a `T`
    /// (`tern_gpu::GpuError`, `tern_reference::ReferenceError`): for tests and tools that
    /// depend on that backend crate anyway. Front ends classify with [`EngineError::kind`].
    pub fn backend_error<T: std::error::Error + 'static>(&self) -> Option<&T> {
        match self {
            EngineError::Backend(b) => b.downcast_ref::<T>(),
            _ => None,
        }
    }

    /// `verb` is not available on `backend`.
    pub(crate) fn unsupported(verb: Verb, backend: BackendKind) -> Self {
        EngineError::Unsupported { verb, backend }
    }

    /// The error a lost GPU device raises inside the GPU engine, converted as the engine converts
    /// it (for tests of front ends that do not depend on `tern-gpu`).
    #[doc(hidden)]
    pub fn gpu_device_lost_for_tests(why: &str) -> Self {
        tern_gpu::GpuError::DeviceLost(why.into()).into()
    }

    /// The model file is at fault: [`ErrorKind::BadFile`].
    pub fn is_bad_file(&self) -> bool {
        self.kind() == ErrorKind::BadFile
    }

    /// The GPU device was lost (driver reset, hang): the model must be loaded again
    /// ([`ErrorKind::DeviceLost`]).
    pub fn is_device_lost(&self) -> bool {
        self.kind() == ErrorKind::DeviceLost
    }

    /// An internal invariant failed (a bug in tern, or a GPU driver problem), not the caller's
    /// input or the file ([`ErrorKind::Internal`]).
    pub fn is_internal(&self) -> bool {
        self.kind() == ErrorKind::Internal
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_format::FormatError as F;
    use tern_gpu::GpuError as G;
    use tern_reference::ReferenceError as R;

    fn s(x: &str) -> String {
        x.to_string()
    }

    /// Each backend error keeps the class the C ABI gave it before the kinds (its
    /// `gpu_status`/`reference_status` tables, read as kinds), its message, and a lost device
    /// or a format error arrives as the engine's own variant whichever backend raised it.
    #[test]
    fn backend_errors_keep_their_class() {
        let gpu: Vec<(G, ErrorKind)> = vec![
            (G::CpuRequested, ErrorKind::Unsupported),
            (G::NoAdapter(s("")), ErrorKind::Unsupported),
            (
                G::Unsupported {
                    adapter: s("a"),
                    detail: s("d"),
                },
                ErrorKind::Unsupported,
            ),
            (
                G::TooLarge {
                    what: s("w"),
                    detail: s("d"),
                },
                ErrorKind::Unsupported,
            ),
            (G::RequestDevice(s("x")), ErrorKind::Internal),
            (G::DeviceLost(s("x")), ErrorKind::DeviceLost),
            (
                G::OutOfMemory {
                    what: s("w"),
                    bytes: 1,
                },
                ErrorKind::OutOfMemory,
            ),
            (
                G::OverBudget {
                    what: s("w"),
                    budget: 1,
                    minimum: 2,
                    detail: s(""),
                },
                ErrorKind::OutOfMemory,
            ),
            (
                G::Shape {
                    op: "o",
                    detail: s("d"),
                },
                ErrorKind::Internal,
            ),
            (G::BadModel(s("x")), ErrorKind::BadFile),
            (
                G::InvalidArgument {
                    op: "o",
                    detail: s("d"),
                },
                ErrorKind::InvalidArgument,
            ),
            (
                G::Internal {
                    op: "o",
                    detail: s("d"),
                },
                ErrorKind::Internal,
            ),
            (
                G::Wgpu {
                    what: s("w"),
                    detail: s("d"),
                },
                ErrorKind::Internal,
            ),
            (
                G::Corrupt {
                    what: s("w"),
                    detail: s("d"),
                },
                ErrorKind::BadFile,
            ),
            (
                G::Readback {
                    what: s("w"),
                    detail: s("d"),
                },
                ErrorKind::Internal,
            ),
            (G::Format(F::NoSuchTensor(s("t"))), ErrorKind::BadFile),
            (
                G::Format(F::UnsupportedFeatures { bits: 4 }),
                ErrorKind::Unsupported,
            ),
        ];
        for (g, kind) in gpu {
            let msg = g.to_string();
            let lost = matches!(g, G::DeviceLost(_));
            let format = matches!(g, G::Format(_));
            let e: EngineError = g.into();
            assert_eq!(e.kind(), kind, "{e:?}");
            assert_eq!(e.is_bad_file(), kind == ErrorKind::BadFile, "{e:?}");
            assert_eq!(e.is_internal(), kind == ErrorKind::Internal, "{e:?}");
            assert_eq!(e.is_device_lost(), lost, "{e:?}");
            assert_eq!(matches!(e, EngineError::DeviceLost(_)), lost);
            assert_eq!(matches!(e, EngineError::Format(_)), format);
            if !lost {
                assert_eq!(e.to_string(), msg);
            }
            if !lost && !format {
                assert!(e.backend_error::<G>().is_some(), "{e:?}");
                assert!(e.backend_error::<R>().is_none(), "{e:?}");
            }
        }
        let reference: Vec<(R, ErrorKind)> = vec![
            (R::Format(F::BadMagic { remedy: "r" }), ErrorKind::BadFile),
            (
                R::Format(F::UnsupportedVersion {
                    found: 9,
                    supported: 1,
                }),
                ErrorKind::Unsupported,
            ),
            (
                R::Format(F::Io(std::io::Error::new(
                    std::io::ErrorKind::OutOfMemory,
                    "oom",
                ))),
                ErrorKind::OutOfMemory,
            ),
            (R::MissingTensor { name: s("t") }, ErrorKind::BadFile),
            (
                R::TensorShape {
                    name: s("t"),
                    expected: vec![1],
                    found: vec![2],
                },
                ErrorKind::BadFile,
            ),
            (
                R::UnsupportedEncoding {
                    name: s("t"),
                    encoding: s("e"),
                    role: "r",
                },
                ErrorKind::Unsupported,
            ),
            (
                R::NotTernary {
                    name: s("t"),
                    detail: s("d"),
                },
                ErrorKind::BadFile,
            ),
            (R::BadHParams(s("x")), ErrorKind::BadFile),
            (
                R::TokenOutOfRange {
                    token: 5,
                    n_vocab: 4,
                },
                ErrorKind::InvalidArgument,
            ),
            (
                R::ContextOverflow {
                    needed: 5,
                    capacity: 4,
                },
                ErrorKind::ContextFull,
            ),
            (R::CacheMismatch { detail: s("d") }, ErrorKind::Internal),
            (R::EmptyInput, ErrorKind::InvalidArgument),
            (
                R::Shape {
                    what: "w",
                    detail: s("d"),
                },
                ErrorKind::Internal,
            ),
        ];
        for (r, kind) in reference {
            let msg = r.to_string();
            let e: EngineError = r.into();
            assert_eq!(e.kind(), kind, "{e:?}");
            assert_eq!(e.is_bad_file(), kind == ErrorKind::BadFile, "{e:?}");
            assert_eq!(e.to_string(), msg);
        }
        assert_eq!(
            EngineError::gpu_device_lost_for_tests("x").kind(),
            ErrorKind::DeviceLost
        );
    }

    /// The engine's own variants and their kinds.
    #[test]
    fn engine_variants_have_kinds() {
        let io = |k| EngineError::Io(std::io::Error::new(k, "x"));
        let cases = [
            (EngineError::Tokenizer(s("x")), ErrorKind::Tokenizer),
            (EngineError::Template(s("x")), ErrorKind::Template),
            (EngineError::NoTokenizer, ErrorKind::NoTokenizer),
            (
                EngineError::InvalidArgument(s("x")),
                ErrorKind::InvalidArgument,
            ),
            (
                EngineError::PromptTooLong { prompt: 2, ctx: 1 },
                ErrorKind::ContextFull,
            ),
            (
                EngineError::NothingToScore(s("x")),
                ErrorKind::InvalidArgument,
            ),
            (
                EngineError::TooFewTokens {
                    tokens: 1,
                    n_ctx: 2,
                    needed: 4,
                },
                ErrorKind::InvalidArgument,
            ),
            (
                EngineError::ContextTooLarge {
                    requested: 9,
                    n_ctx_train: 8,
                },
                ErrorKind::InvalidArgument,
            ),
            (EngineError::Numeric(s("x")), ErrorKind::Numeric),
            (EngineError::Cancelled, ErrorKind::Cancelled),
            (io(std::io::ErrorKind::NotFound), ErrorKind::Io),
            (io(std::io::ErrorKind::OutOfMemory), ErrorKind::OutOfMemory),
            (EngineError::DeviceLost(s("x")), ErrorKind::DeviceLost),
            (
                EngineError::Unsupported {
                    verb: Verb::Profile,
                    backend: BackendKind::Cpu,
                },
                ErrorKind::Unsupported,
            ),
            (
                EngineError::Format(F::InvalidArgument(s("x"))),
                ErrorKind::InvalidArgument,
            ),
        ];
        for (e, kind) in cases {
            assert_eq!(e.kind(), kind, "{e:?}");
        }
    }
}
