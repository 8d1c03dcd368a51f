//! Importers into `.tern`: GGUF v3 files and Hugging Face safetensors directories.

pub mod error;
pub mod fetch;
pub mod gguf;
pub mod gguf_meta;

pub use error::{ImportError, Result};
