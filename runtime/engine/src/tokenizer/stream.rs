//! Streaming detokenization: complete UTF-8 pieces from token ids.

use super::*;

/// Streaming detokenizer: push ids as they are generated, get text pieces that are complete UTF-8.
/// Bytes of a character split across tokens are held back until the character is complete.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one token's piece; returns the text that became complete (possibly empty). Bytes
    /// that can never become valid UTF-8 come out as U+FFFD.
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<String> {
        self.pending.extend_from_slice(tok.token_bytes(id)?);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // ok: `valid_up_to` marks a valid UTF-8 prefix
                    out.push_str(
                        std::str::from_utf8(self.pending.get(..valid).unwrap_or_default())
                            .unwrap_or_default(),
                    );
                    match e.error_len() {
                        // Incomplete character at the end: keep it for the next token.
                        None => {
                            self.pending.drain(..valid);
                            break;
                        }
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            self.pending.drain(..(valid + bad).min(self.pending.len()));
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Whatever is still held back (an incomplete character), as U+FFFD; resets the decoder.
    pub fn flush(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}
