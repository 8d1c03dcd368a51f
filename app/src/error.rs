//! The app's one error type: tern's typed errors, with what the app was doing.

use std::path::PathBuf;

use tern_engine::EngineError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum AppError {
    /// The engine refused the file or could not load it (`Model::open_with`, `Session::new`).
    #[error("loading {}: {source}", path.display())]
    Load {
        path: PathBuf,
        #[source]
        source: EngineError,
    },
    #[error("opening {}: {source}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Import(#[from] tern_import::ImportError),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("no model is loaded: open one first")]
    NoModel,
    #[error("the conversation ({tokens} tokens) no longer fits the context ({n_ctx} positions): start a new chat or raise the context size")]
    ContextFull { tokens: usize, n_ctx: usize },
}

impl AppError {
    /// What went wrong, in words, with its kind: what the window shows above the message.
    pub fn kind(&self) -> String {
        use tern_engine::ErrorKind as K;
        match self {
            AppError::Load { source, .. } | AppError::Engine(source) => match source.kind() {
                K::BadFile => "This file is not a usable model: it is damaged or not a tern/GGUF model (bad file)".into(),
                K::Io => "The file could not be read (I/O error)".into(),
                K::Unsupported => "This model or setting is not supported here (unsupported)".into(),
                K::OutOfMemory => "Not enough memory for this model or context (out of memory)".into(),
                K::InvalidArgument => "A setting is out of range (invalid setting)".into(),
                K::ContextFull => "The conversation no longer fits the context (context full)".into(),
                K::Cancelled => "Stopped (cancelled)".into(),
                K::DeviceLost => "The GPU was lost: reload the model (device lost)".into(),
                K::NoTokenizer => "This model has no tokenizer, so it cannot chat (no tokenizer)".into(),
                K::Tokenizer => "The model's tokenizer failed (tokenizer)".into(),
                K::Template => "The model's chat template failed (template)".into(),
                K::Numeric => "The model produced invalid numbers (numeric error)".into(),
                _ => "Something went wrong inside tern: please report it (internal error)".into(),
            },
            AppError::Import(tern_import::ImportError::Fetch(_)) => {
                "The default model could not be downloaded (download failed)".into()
            }
            AppError::Import(_) => {
                "This file could not be converted to a tern model (import failed)".into()
            }
            AppError::Open { .. } | AppError::Io(_) => {
                "The file could not be opened (I/O error)".into()
            }
            AppError::NoModel => "No model is loaded (no model)".into(),
            AppError::ContextFull { .. } => {
                "The conversation no longer fits the context (context full)".into()
            }
        }
    }

    /// tern's typed error as a path of variant names, e.g. `EngineError::Format(BadMagic)`:
    /// for a bug report (the window shows it on hover).
    pub fn type_path(&self) -> String {
        match self {
            AppError::Load { source, .. } | AppError::Engine(source) => {
                format!("EngineError::{}", variant_path(&format!("{source:?}")))
            }
            AppError::Import(e) => format!("ImportError::{}", variant_path(&format!("{e:?}"))),
            AppError::Open { .. } | AppError::Io(_) => "io::Error".into(),
            AppError::NoModel => "AppError::NoModel".into(),
            AppError::ContextFull { .. } => "AppError::ContextFull".into(),
        }
    }
}

/// `Format(BadMagic { found: .. })` → `Format(BadMagic)`: the first two variant names of a
/// `Debug` rendering (an enum wrapping an enum).
fn variant_path(debug: &str) -> String {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let outer = ident(debug);
    let rest = debug.get(outer.len()..).unwrap_or("");
    let inner = rest
        .strip_prefix('(')
        .map(ident)
        .filter(|s| s.chars().next().is_some_and(|c| c.is_ascii_uppercase()));
    match inner {
        Some(i) => format!("{outer}({i})"),
        None => outer,
    }
}

#[cfg(test)]
mod tests {
    use super::variant_path;

    #[test]
    fn variant_paths() {
        assert_eq!(
            variant_path("Format(BadMagic { found: 1 })"),
            "Format(BadMagic)"
        );
        assert_eq!(variant_path("Cancelled"), "Cancelled");
        assert_eq!(variant_path("Tokenizer(\"x\")"), "Tokenizer");
        assert_eq!(
            variant_path("PromptTooLong { prompt: 1, ctx: 2 }"),
            "PromptTooLong"
        );
    }
}
