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
    /// tern's typed error as a path of variant names, e.g. `EngineError::Format(BadMagic)`:
    /// what the window shows above the message.
    pub fn kind(&self) -> String {
        match self {
            AppError::Load { source, .. } | AppError::Engine(source) => {
                let what = if source.is_bad_file() {
                    " — the file is at fault"
                } else if source.is_device_lost() {
                    " — the GPU was lost"
                } else {
                    ""
                };
                format!(
                    "EngineError::{}{what}",
                    variant_path(&format!("{source:?}"))
                )
            }
            AppError::Import(e) => format!("ImportError::{}", variant_path(&format!("{e:?}"))),
            AppError::Open { .. } | AppError::Io(_) => "I/O error".into(),
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
