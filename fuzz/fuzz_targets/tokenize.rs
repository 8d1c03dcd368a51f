//! Fuzz the tokenizer: arbitrary bytes through encode_bytes / decode / StreamDecoder, on tiny
//! built-in vocabularies (byte-level BPE under every pre-tokenizer, and SentencePiece), no files.
//! Beyond "never panics": on valid UTF-8, decode(encode(text)) must give the text back.
#![no_main]

include!("../bodies/tokenize.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| run(data));
