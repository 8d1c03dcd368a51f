//! Saving a session (its token history and KV cache) to bytes or a file, and restoring it into
//! another session of the same model: [`Session::save_state`], [`Session::restore_state`].
//!
//! # The format (version 1)
//!
//! All integers little-endian.
//!
//! 1. Magic `TERNSESS` (8 bytes), format version `u32` (= [`STATE_VERSION`]).
//! 2. Header length `u32`, then the header: UTF-8 JSON naming what the state belongs to —
//!    `model` (xxh3-64 of the model's metadata: hyperparameters, tokenizer, provenance),
//!    `backend` (`"cpu"` / `"gpu"`), `kv` (the session's [`crate::KvSpec`]), `n_ctx`,
//!    `numerics`, `tokens` (the history's length), `sections` and the writing `tern` version.
//! 3. The token history: `tokens` × `u32`.
//! 4. The KV cache, `sections` byte sections of the backend's own storage (CPU: the reference
//!    cache's buffers and lengths; GPU: every KV buffer read back), each as its byte length
//!    `u64`, the number of stored chunks `u32`, then per stored chunk its index `u32` and its
//!    bytes: a section is cut in chunks of [`CHUNK`] bytes and only chunks with a non-zero byte
//!    are stored (the positions a cache does not hold are zero, so a short conversation in a
//!    large context saves small).
//! 5. xxh3-64 of everything before it, `u64`.
//!
//! A restore checks, before touching the session: the magic, the checksum and the lengths
//! ([`StateError::Corrupt`], `TERN_CORRUPT_FILE`), the version ([`StateError::Version`]), then
//! that the header names this session's model, backend, KV spec, context and numerics
//! ([`StateError::Mismatch`], `TERN_STATE_MISMATCH`). A state restores into the backend that
//! saved it (the storage is the backend's own); to move a conversation across devices, feed
//! [`Session::history`] to the new session instead.

use std::path::Path;

use crate::error::{EngineError, Result, StateError};
use crate::options::Numerics;
use crate::report::BackendKind;

use super::Session;

/// The format version this library writes and reads.
pub const STATE_VERSION: u32 = 1;
/// Chunk size of the sparse sections.
pub const CHUNK: usize = 4096;
const MAGIC: &[u8; 8] = b"TERNSESS";

/// What a state belongs to: compared field by field on restore.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Header {
    model: String,
    backend: String,
    kv: String,
    n_ctx: usize,
    numerics: String,
    tokens: usize,
    sections: usize,
    tern: String,
}

impl Header {
    /// The fields that must match (all but the lengths and the writer's version).
    fn identity(&self) -> String {
        format!(
            "model {} on the {} with KV {}, n_ctx {}, {} numerics",
            self.model, self.backend, self.kv, self.n_ctx, self.numerics
        )
    }
}

fn corrupt(what: impl Into<String>) -> EngineError {
    EngineError::State(StateError::Corrupt(what.into()))
}

/// A little reader over the state's bytes; every short read is [`StateError::Corrupt`].
struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if self.b.len() < n {
            return Err(corrupt(format!("truncated in {what}")));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        let s = self.take(4, what)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]])) // ok: take gave 4 bytes
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        let s = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }
}

impl Session<'_> {
    /// The model, backend, KV spec, context and numerics this session's state belongs to.
    fn state_header(&self, tokens: usize, sections: usize) -> Result<Header> {
        let meta = serde_json::to_vec(self.model.meta())
            .map_err(|e| EngineError::InvalidArgument(format!("model metadata: {e}")))?;
        Ok(Header {
            model: format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&meta)),
            backend: match self.model.capabilities().backend() {
                BackendKind::Cpu => "cpu".into(),
                BackendKind::Gpu => "gpu".into(),
            },
            kv: format!("{:?}", self.opts.kv()),
            n_ctx: self.n_ctx(),
            numerics: match self.opts.numerics() {
                Numerics::Model => "model".into(),
                Numerics::LlamaCpp => "llama.cpp".into(),
            },
            tokens,
            sections,
            tern: env!("CARGO_PKG_VERSION").into(),
        })
    }

    /// The session's state — its token history and its KV cache, exactly — as bytes (the
    /// format: this module's doc). [`Session::restore_state`] on a session of the same model,
    /// KV options, context and device makes it continue exactly as this one would: the same
    /// logits, the same greedy tokens. On the GPU the cache is read back from the device.
    pub fn save_state(&mut self) -> Result<Vec<u8>> {
        let history = self.history.clone();
        let mut header = self.state_header(history.len(), 0)?;
        let sections = self.state.kv_state()?;
        header.sections = sections.len();
        let header = serde_json::to_vec(&header)
            .map_err(|e| EngineError::InvalidArgument(format!("state header: {e}")))?;
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&STATE_VERSION.to_le_bytes());
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
        out.extend_from_slice(&header);
        for t in &history {
            out.extend_from_slice(&t.to_le_bytes());
        }
        for s in &sections {
            out.extend_from_slice(&(s.len() as u64).to_le_bytes());
            let stored: Vec<(usize, &[u8])> = s
                .chunks(CHUNK)
                .enumerate()
                .filter(|(_, c)| c.iter().any(|&b| b != 0))
                .collect();
            out.extend_from_slice(&(stored.len() as u32).to_le_bytes());
            for (i, c) in stored {
                out.extend_from_slice(&(i as u32).to_le_bytes());
                out.extend_from_slice(c);
            }
        }
        let sum = xxhash_rust::xxh3::xxh3_64(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        Ok(out)
    }

    /// Make this session hold what `bytes` (from [`Session::save_state`]) holds: its history
    /// and KV cache. Refused before anything changes when the bytes are not a valid state
    /// ([`StateError::Corrupt`]: `ErrorKind::BadFile`), of another format version
    /// ([`StateError::Version`]: `ErrorKind::Unsupported`), or of another model, backend, KV
    /// spec, context size or numerics ([`StateError::Mismatch`]: `ErrorKind::StateMismatch`).
    /// A failure after the checks (the GPU device lost while writing) leaves the session empty.
    pub fn restore_state(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.len() < MAGIC.len() + 16 || bytes.get(..MAGIC.len()) != Some(&MAGIC[..]) {
            return Err(corrupt("no TERNSESS magic"));
        }
        let (body, sum) = bytes.split_at(bytes.len() - 8);
        let mut s8 = [0u8; 8];
        s8.copy_from_slice(sum);
        if xxhash_rust::xxh3::xxh3_64(body) != u64::from_le_bytes(s8) {
            return Err(corrupt("checksum mismatch"));
        }
        let mut r = Reader {
            b: body.get(MAGIC.len()..).unwrap_or_default(),
        };
        let version = r.u32("the version")?;
        if version != STATE_VERSION {
            return Err(EngineError::State(StateError::Version {
                found: version,
                supported: STATE_VERSION,
            }));
        }
        let hlen = r.u32("the header length")? as usize;
        let saved: Header = serde_json::from_slice(r.take(hlen, "the header")?)
            .map_err(|e| corrupt(format!("header: {e}")))?;
        let here = self.state_header(saved.tokens, saved.sections)?;
        if saved.identity() != here.identity() {
            return Err(EngineError::State(StateError::Mismatch {
                saved: saved.identity(),
                here: here.identity(),
            }));
        }
        if saved.tokens > self.n_ctx() {
            return Err(corrupt("more tokens than the context holds"));
        }
        let tokens: Vec<u32> = r
            .take(saved.tokens.saturating_mul(4), "the history")?
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])) // ok: chunks of 4
            .collect();
        self.model.check_tokens(&tokens)?;
        let mut sections: Vec<Vec<u8>> = Vec::new();
        for i in 0..saved.sections {
            let len = usize::try_from(r.u64("a section length")?)
                .map_err(|_| corrupt("section length"))?;
            // The stored chunks must be in the remaining bytes: this bounds the allocation.
            let chunks = r.u32("a chunk count")? as usize;
            if chunks > len.div_ceil(CHUNK) || len > bytes.len().saturating_mul(CHUNK).max(1 << 20)
            {
                return Err(corrupt(format!(
                    "section {i}: {chunks} chunks of {len} bytes"
                )));
            }
            let mut buf = Vec::new();
            buf.try_reserve_exact(len)
                .map_err(|_| corrupt(format!("section {i} of {len} bytes")))?;
            buf.resize(len, 0u8);
            for _ in 0..chunks {
                let at = r.u32("a chunk index")? as usize * CHUNK;
                let n = len.saturating_sub(at).min(CHUNK);
                if n == 0 {
                    return Err(corrupt(format!("section {i}: chunk beyond its end")));
                }
                let src = r.take(n, "a chunk")?;
                buf.get_mut(at..at + n)
                    .ok_or_else(|| corrupt("chunk"))?
                    .copy_from_slice(src);
            }
            sections.push(buf);
        }
        if !r.b.is_empty() {
            return Err(corrupt("trailing bytes"));
        }
        let slices: Vec<&[u8]> = sections.iter().map(Vec::as_slice).collect();
        self.history.clear();
        self.unevaluated.clear();
        let r = self.state.restore_kv_state(&tokens, &slices);
        match r {
            Ok(()) => {
                self.history = tokens;
                Ok(())
            }
            Err(e) => {
                self.state.truncate(0);
                Err(e)
            }
        }
    }

    /// [`Session::save_state`] into the file `path` (written to `path` + `.tmp` and renamed,
    /// so an interrupted save never leaves a partial file under `path`).
    pub fn save_state_file(&mut self, path: &Path) -> Result<()> {
        let bytes = self.save_state()?;
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        std::fs::write(&tmp, &bytes)?;
        std::fs::rename(&tmp, path)?;
        Ok(())
    }

    /// [`Session::restore_state`] from the file `path`.
    pub fn restore_state_file(&mut self, path: &Path) -> Result<()> {
        let bytes = std::fs::read(path)?;
        self.restore_state(&bytes)
    }
}
