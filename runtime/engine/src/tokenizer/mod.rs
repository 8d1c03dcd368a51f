//! Tokenizer rebuilt from a model's metadata ([`TokenizerSpec`], i.e. what GGUF stores), token-exact
//! with llama.cpp's `llama_tokenize` (`src/llama-vocab.cpp`, `src/unicode.cpp`).
//!
//! # What comes from where
//!
//! * **Byte-level BPE** (GGUF model `gpt2`): the `tokenizers` crate does the pre-tokenization and the
//!   BPE merges. The pre-tokenizer is a `Sequence` of `Split(regex, Isolated)` stages followed by
//!   `ByteLevel(use_regex = false)`: exactly llama.cpp's `unicode_regex_split`, where every regex
//!   re-splits each piece of the previous stage and the unmatched gaps stay pieces of their own. The
//!   regexes per `tokenizer.ggml.pre` are llama.cpp's ([`PreTokenizer`]). The merge loop of
//!   `tokenizers`' BPE (lowest rank first, then leftmost; stale pairs skipped when the pair no longer
//!   forms the same token) is the one of `llm_tokenizer_bpe_session`.
//! * **Special tokens** are hand-written ([`Tokenizer::encode_with`]), because llama.cpp's
//!   `tokenizer_st_partition` differs from `tokenizers`' `AddedVocabulary`: llama.cpp takes the
//!   special tokens one at a time, longest text first, and splits every remaining text fragment at
//!   each occurrence of that token; `tokenizers` scans once, leftmost-longest over all added tokens,
//!   and applies normalization/stripping flags GGUF does not store. With `parse_special = false`,
//!   llama.cpp still splits at user-defined tokens (type 4) and only leaves control (3) and unknown
//!   (2) tokens to the text tokenizer.
//! * **SentencePiece** (GGUF model `llama`) is hand-written: GGUF stores scores, not merges, and
//!   llama.cpp's `llm_tokenizer_spm` merges adjacent symbols by the *score of the merged token*
//!   (highest first, then leftmost) with `<0xXX>` byte fallback. No `tokenizers` model does that.
//! * **Decoding** is hand-written: a token's piece is raw bytes (a byte-level BPE token can hold half
//!   of a UTF-8 character), which `tokenizers`' decoders (returning `String`) cannot hand out.
//!
//! # Deviations from llama.cpp, all outside the model families tern runs
//! * Per-model `lstrip`/`rstrip` attributes (phi-3, jina, modern-bert) are not applied.
//! * [`Tokenizer::decode`] concatenates token pieces (`llama_token_to_piece` with specials rendered);
//!   it does not apply llama.cpp's `clean_up_tokenization_spaces` pass (on for the `gpt-2`/`default`
//!   pre-types), so that decode is the inverse of encode. For SentencePiece it drops the space that
//!   encode inserts (start of text, after a special token) when `add_space_prefix` is set.
//! * When several tokens carry an auto-detected role (e.g. both `<|im_end|>` and `<|endoftext|>`
//!   look like EOT), llama.cpp picks by `unordered_map` iteration order; tern picks by the order of
//!   llama.cpp's candidate list. The end-of-generation *set* is the same.

use std::collections::{BinaryHeap, HashMap};

use tern_format::{TokenizerKind, TokenizerSpec};

mod bpe;
mod stream;
mod vocab;

use bpe::*;
pub use stream::StreamDecoder;
pub use vocab::*;

/// Errors from building or running a tokenizer.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// Text handed to [`Tokenizer::encode_bytes`] is not UTF-8.
    #[error("input text is not valid UTF-8 (invalid byte at offset {offset})")]
    InvalidUtf8 { offset: usize },
    /// A token id outside the vocabulary.
    #[error("unknown token id {id} (vocabulary has {n_vocab} tokens)")]
    UnknownToken { id: u32, n_vocab: usize },
    /// The tokenizer metadata is inconsistent.
    #[error("invalid tokenizer metadata: {0}")]
    InvalidSpec(String),
    /// A `tokenizer.ggml.pre` value tern does not implement.
    #[error(
        "unsupported pre-tokenizer {0:?} (tern implements default, gpt-2, smollm/starcoder, llama-bpe/llama3, qwen2)"
    )]
    UnsupportedPreTokenizer(String),
    /// The model wants BOS/EOS added but has no such token.
    #[error("the model asks for a {0} token but defines none")]
    MissingSpecial(&'static str),
    /// An error from the `tokenizers` crate.
    #[error("tokenizer backend: {0}")]
    Backend(String),
}

pub type Result<T, E = TokenizerError> = std::result::Result<T, E>;

impl From<TokenizerError> for crate::error::EngineError {
    fn from(e: TokenizerError) -> Self {
        crate::error::EngineError::Tokenizer(e.to_string())
    }
}

// llama.cpp token attributes (`llama_token_attr`), derived from GGUF token types.
/// A fragment of the input after special-token partitioning.
enum Fragment<'a> {
    Text(&'a str),
    Token(u32),
}

/// A tokenizer rebuilt from [`TokenizerSpec`], token-exact with llama.cpp.
pub struct Tokenizer {
    kind: TokenizerKind,
    tokens: Vec<String>,
    attrs: Vec<u8>,
    /// Raw bytes of each token's piece (specials rendered as their text).
    pieces: Vec<Box<[u8]>>,
    token_to_id: HashMap<String, u32>,
    /// Tokens split out before text tokenization, longest text first.
    partition: Vec<u32>,
    bpe: Option<tokenizers::Tokenizer>,
    scores: Vec<f32>,
    /// SentencePiece byte fallback `<0xXX>` per byte.
    byte_tokens: Vec<Option<u32>>,
    bos: Option<u32>,
    eos: Option<u32>,
    eot: Option<u32>,
    unk: Option<u32>,
    pad: Option<u32>,
    eog: Vec<u32>,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    pre: Option<PreTokenizer>,
    chat_template: Option<String>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("kind", &self.kind)
            .field("pre", &self.pre)
            .field("n_vocab", &self.tokens.len())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("eot", &self.eot)
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// Builds the tokenizer from GGUF-shaped metadata.
    pub fn from_spec(spec: &TokenizerSpec) -> Result<Self> {
        let n = spec.tokens.len();
        if n == 0 {
            return Err(TokenizerError::InvalidSpec("empty vocabulary".into()));
        }
        if u32::try_from(n).is_err() {
            return Err(TokenizerError::InvalidSpec(format!(
                "vocabulary of {n} tokens is too large"
            )));
        }
        if !spec.token_types.is_empty() && spec.token_types.len() != n {
            return Err(TokenizerError::InvalidSpec(format!(
                "{} token types for {n} tokens",
                spec.token_types.len()
            )));
        }
        if !spec.scores.is_empty() && spec.scores.len() != n {
            return Err(TokenizerError::InvalidSpec(format!(
                "{} scores for {n} tokens",
                spec.scores.len()
            )));
        }
        // Out-of-range special ids are dropped (llama.cpp falls back to its default id with a warning).
        let check = |name: &str, id: Option<u32>| -> Option<u32> {
            match id {
                Some(i) if (i as usize) < n => Some(i),
                Some(i) => {
                    log::warn!("tokenizer: {name} token id {i} out of range ({n} tokens), ignored");
                    None
                }
                None => None,
            }
        };

        let mut attrs: Vec<u8> = if spec.token_types.is_empty() {
            vec![ATTR_NORMAL; n]
        } else {
            spec.token_types
                .iter()
                .map(|&t| attr_from_type(t))
                .collect()
        };
        let mut token_to_id = HashMap::with_capacity(n);
        for (i, t) in spec.tokens.iter().enumerate() {
            // Later ids overwrite earlier ones, like llama.cpp's `token_to_id[word] = i`.
            token_to_id.insert(t.clone(), i as u32);
        }
        let find_first = |list: &[&str]| list.iter().find_map(|t| token_to_id.get(*t).copied());

        // Role detection by text, as llama.cpp does; such tokens become CONTROL.
        for list in [
            EOT_TEXTS,
            EOM_TEXTS,
            FIM_TEXTS,
            FIM_PAD_TEXTS,
            FIM_REP_TEXTS,
            FIM_SEP_TEXTS,
            EOG_TEXTS,
        ] {
            for t in list {
                if let Some(&id) = token_to_id.get(*t) {
                    if let Some(a) = attrs.get_mut(id as usize) {
                        *a |= ATTR_CONTROL;
                    }
                }
            }
        }
        let eot = check("eot", spec.eot).or_else(|| find_first(EOT_TEXTS));
        let eom = find_first(EOM_TEXTS);
        let eos = check("eos", spec.eos);
        let mut eog: Vec<u32> = EOG_TEXTS
            .iter()
            .filter_map(|t| token_to_id.get(*t).copied())
            .collect();
        eog.extend(find_first(FIM_PAD_TEXTS));
        eog.extend(find_first(FIM_REP_TEXTS));
        eog.extend(find_first(FIM_SEP_TEXTS));
        eog.extend(eos);
        eog.extend(eot);
        eog.extend(eom);
        eog.sort_unstable();
        eog.dedup();
        for t in USER_DEFINED_TEXTS {
            if let Some(&id) = token_to_id.get(*t) {
                if let Some(a) = attrs.get_mut(id as usize) {
                    *a = ATTR_USER_DEFINED;
                }
            }
        }

        let mut partition: Vec<u32> = (0..n as u32)
            .filter(|&i| {
                attrs[i as usize] & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN) != 0
                    && !spec.tokens[i as usize].is_empty()
            })
            .collect();
        // Stable: equal lengths keep id order (llama.cpp's std::sort leaves that order unspecified).
        partition.sort_by_key(|&i| std::cmp::Reverse(spec.tokens[i as usize].len()));

        let byte_map = gpt2_byte_to_char();
        let char_to_byte: HashMap<char, u8> =
            (0..=255u8).map(|b| (byte_map[usize::from(b)], b)).collect();
        let pieces = spec
            .tokens
            .iter()
            .zip(&attrs)
            .map(|(text, &attr)| {
                piece_bytes(spec.kind, text, attr, &char_to_byte).into_boxed_slice()
            })
            .collect();

        let mut byte_tokens = vec![None; 256];
        let mut pre = None;
        let bpe = match spec.kind {
            TokenizerKind::Gpt2 => {
                let p = PreTokenizer::from_name(spec.pre.as_deref())?;
                pre = Some(p);
                Some(build_bpe(spec, p)?)
            }
            TokenizerKind::Llama => {
                for (b, slot) in byte_tokens.iter_mut().enumerate() {
                    *slot = token_to_id
                        .get(&format!("<0x{b:02X}>"))
                        .or_else(|| {
                            if b < 0x80 {
                                token_to_id.get(&(b as u8 as char).to_string())
                            } else {
                                None
                            }
                        })
                        .copied();
                }
                None
            }
        };

        Ok(Self {
            kind: spec.kind,
            tokens: spec.tokens.clone(),
            attrs,
            pieces,
            token_to_id,
            partition,
            bpe,
            scores: spec.scores.clone(),
            byte_tokens,
            bos: check("bos", spec.bos),
            eos,
            eot,
            unk: check("unk", spec.unk),
            pad: check("pad", spec.pad),
            eog,
            add_bos: spec.add_bos,
            add_eos: spec.add_eos,
            add_space_prefix: spec.add_space_prefix,
            pre,
            chat_template: spec.chat_template.clone(),
        })
    }

    /// Tokenizes `text` like llama.cpp's `llama_tokenize(text, add_special = true, parse_special)`:
    /// BOS/EOS are added when the model asks for them (`add_bos`/`add_eos`).
    pub fn encode(&self, text: &str, parse_special: bool) -> Result<Vec<u32>> {
        self.encode_with(text, true, parse_special)
    }

    /// Like [`Tokenizer::encode`], for text that may not be UTF-8 (a typed error then).
    pub fn encode_bytes(&self, text: &[u8], parse_special: bool) -> Result<Vec<u32>> {
        let s = std::str::from_utf8(text).map_err(|e| TokenizerError::InvalidUtf8 {
            offset: e.valid_up_to(),
        })?;
        self.encode(s, parse_special)
    }

    /// Tokenizes `text`. `add_special` adds BOS/EOS per the model's flags; `parse_special` maps the
    /// text of control tokens (e.g. `<|im_start|>`) to their ids (user-defined tokens always are).
    pub fn encode_with(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>> {
        let fragments = self.partition(text, parse_special);
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.push(self.bos.ok_or(TokenizerError::MissingSpecial("BOS"))?);
        }
        match &self.bpe {
            Some(bpe) => {
                for f in &fragments {
                    match f {
                        Fragment::Text(t) => {
                            let enc = bpe
                                .encode_fast(*t, false)
                                .map_err(|e| TokenizerError::Backend(e.to_string()))?;
                            out.extend_from_slice(enc.get_ids());
                        }
                        Fragment::Token(id) => out.push(*id),
                    }
                }
            }
            None => {
                let mut prev_special = true;
                for f in &fragments {
                    match f {
                        Fragment::Text(t) => {
                            let mut s = String::with_capacity(t.len() + 3);
                            if self.add_space_prefix && prev_special {
                                s.push(' ');
                            }
                            s.push_str(t);
                            self.spm_tokenize(&s.replace(' ', "\u{2581}"), &mut out);
                            prev_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(*id);
                            prev_special = true;
                        }
                    }
                }
            }
        }
        if add_special && self.add_eos {
            out.push(self.eos.ok_or(TokenizerError::MissingSpecial("EOS"))?);
        }
        Ok(out)
    }

    /// llama.cpp's `tokenizer_st_partition`: for each special token, longest text first, split every
    /// remaining text fragment at each occurrence.
    fn partition<'a>(&self, text: &'a str, parse_special: bool) -> Vec<Fragment<'a>> {
        let mut frags = Vec::new();
        if text.is_empty() {
            return frags;
        }
        frags.push(Fragment::Text(text));
        for &id in &self.partition {
            let attr = self
                .attrs
                .get(id as usize)
                .copied()
                .unwrap_or(ATTR_UNDEFINED);
            if !parse_special && attr & (ATTR_CONTROL | ATTR_UNKNOWN) != 0 {
                continue;
            }
            let Some(needle) = self.tokens.get(id as usize) else {
                continue;
            };
            if !frags
                .iter()
                .any(|f| matches!(f, Fragment::Text(t) if t.contains(needle.as_str())))
            {
                continue;
            }
            let mut next = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                match f {
                    Fragment::Text(mut t) => {
                        while let Some(pos) = t.find(needle.as_str()) {
                            // `find` returns a char boundary; `get` keeps this panic-free regardless.
                            let (Some(left), Some(right)) =
                                (t.get(..pos), t.get(pos + needle.len()..))
                            else {
                                break;
                            };
                            if !left.is_empty() {
                                next.push(Fragment::Text(left));
                            }
                            next.push(Fragment::Token(id));
                            t = right;
                        }
                        if !t.is_empty() {
                            next.push(Fragment::Text(t));
                        }
                    }
                    tok => next.push(tok),
                }
            }
            frags = next;
        }
        frags
    }

    /// llama.cpp's `llm_tokenizer_spm_session::tokenize` on whitespace-escaped text.
    fn spm_tokenize(&self, text: &str, out: &mut Vec<u32>) {
        #[derive(Clone, Copy)]
        struct Sym {
            prev: isize,
            next: isize,
            start: usize,
            n: usize,
        }
        struct Bigram {
            left: usize,
            right: usize,
            score: f32,
            size: usize,
        }
        impl PartialEq for Bigram {
            fn eq(&self, o: &Self) -> bool {
                self.cmp(o) == std::cmp::Ordering::Equal
            }
        }
        impl Eq for Bigram {}
        impl PartialOrd for Bigram {
            fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(o))
            }
        }
        impl Ord for Bigram {
            // Max-heap: highest score first, then leftmost.
            fn cmp(&self, o: &Self) -> std::cmp::Ordering {
                self.score
                    .total_cmp(&o.score)
                    .then_with(|| o.left.cmp(&self.left))
            }
        }

        let mut syms: Vec<Sym> = Vec::with_capacity(text.len());
        for (i, (start, ch)) in text.char_indices().enumerate() {
            let n = ch.len_utf8();
            let next = if start + n == text.len() {
                -1
            } else {
                i as isize + 1
            };
            syms.push(Sym {
                prev: i as isize - 1,
                next,
                start,
                n,
            });
        }
        let mut heap = BinaryHeap::new();
        let mut rev_merge: HashMap<String, (usize, usize)> = HashMap::new();
        let try_add = |l: isize,
                       r: isize,
                       syms: &[Sym],
                       heap: &mut BinaryHeap<Bigram>,
                       rev: &mut HashMap<String, (usize, usize)>| {
            if l < 0 || r < 0 {
                return;
            }
            let (l, r) = (l as usize, r as usize);
            let (Some(ls), Some(rs)) = (syms.get(l), syms.get(r)) else {
                return;
            };
            let Some(s) = text.get(ls.start..ls.start + ls.n + rs.n) else {
                return;
            };
            let Some(&id) = self.token_to_id.get(s) else {
                return;
            };
            let score = self.scores.get(id as usize).copied().unwrap_or(0.0);
            heap.push(Bigram {
                left: l,
                right: r,
                score,
                size: s.len(),
            });
            rev.insert(s.to_string(), (l, r));
        };
        for i in 1..syms.len() {
            try_add(i as isize - 1, i as isize, &syms, &mut heap, &mut rev_merge);
        }
        while let Some(b) = heap.pop() {
            let (Some(&ls), Some(&rs)) = (syms.get(b.left), syms.get(b.right)) else {
                continue;
            };
            if ls.n == 0 || rs.n == 0 || ls.n + rs.n != b.size {
                continue;
            }
            let merged = Sym {
                prev: ls.prev,
                next: rs.next,
                start: ls.start,
                n: ls.n + rs.n,
            };
            if let Some(l) = syms.get_mut(b.left) {
                *l = merged;
            }
            if let Some(r) = syms.get_mut(b.right) {
                r.n = 0;
            }
            if rs.next >= 0 {
                if let Some(s) = syms.get_mut(rs.next as usize) {
                    s.prev = b.left as isize;
                }
            }
            try_add(
                merged.prev,
                b.left as isize,
                &syms,
                &mut heap,
                &mut rev_merge,
            );
            try_add(
                b.left as isize,
                merged.next,
                &syms,
                &mut heap,
                &mut rev_merge,
            );
        }
        let spans: Vec<(usize, usize)> = syms.iter().map(|s| (s.start, s.n)).collect();
        let mut i: isize = if syms.is_empty() { -1 } else { 0 };
        while i >= 0 {
            let Some(&s) = syms.get(i as usize) else {
                break;
            };
            self.spm_resegment(text, &spans, s.start, s.n, &rev_merge, out, 0);
            i = s.next;
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn spm_resegment(
        &self,
        text: &str,
        syms: &[(usize, usize)],
        start: usize,
        n: usize,
        rev_merge: &HashMap<String, (usize, usize)>,
        out: &mut Vec<u32>,
        depth: u32,
    ) {
        let Some(s) = text.get(start..start + n) else {
            return;
        };
        if let Some(&id) = self.token_to_id.get(s) {
            out.push(id);
            return;
        }
        if let (Some(&(l, r)), true) = (rev_merge.get(s), depth < 64) {
            if let (Some(&(ls, ln)), Some(&(rs, rn))) = (syms.get(l), syms.get(r)) {
                self.spm_resegment(text, syms, ls, ln, rev_merge, out, depth + 1);
                self.spm_resegment(text, syms, rs, rn, rev_merge, out, depth + 1);
                return;
            }
        }
        // Byte fallback; a byte the vocabulary cannot spell maps to UNK (llama.cpp would throw).
        for b in s.bytes() {
            if let Some(id) = self
                .byte_tokens
                .get(usize::from(b))
                .copied()
                .flatten()
                .or(self.unk)
            {
                out.push(id);
            }
        }
    }

    /// Raw bytes of one token's piece (control and user-defined tokens render as their text). A
    /// byte-level token may hold part of a UTF-8 character: accumulate, or use [`StreamDecoder`].
    pub fn token_bytes(&self, id: u32) -> Result<&[u8]> {
        self.pieces
            .get(id as usize)
            .map(|p| &p[..])
            .ok_or(TokenizerError::UnknownToken {
                id,
                n_vocab: self.n_vocab(),
            })
    }

    /// Concatenated bytes of the pieces of `ids` (see [`Tokenizer::decode`]).
    pub fn decode_bytes(&self, ids: &[u32]) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        let mut after_special = true;
        for &id in ids {
            let piece = self.token_bytes(id)?;
            let attr = self
                .attrs
                .get(id as usize)
                .copied()
                .unwrap_or(ATTR_UNDEFINED);
            let special = attr & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN) != 0;
            let piece = if self.kind == TokenizerKind::Llama
                && self.add_space_prefix
                && after_special
                && !special
                && piece.first() == Some(&b' ')
            {
                piece.get(1..).unwrap_or_default()
            } else {
                piece
            };
            out.extend_from_slice(piece);
            after_special = special;
        }
        Ok(out)
    }

    /// Text of `ids`: the pieces concatenated, special tokens rendered as their text, invalid UTF-8
    /// (ids that split a character) replaced by U+FFFD. For SentencePiece with `add_space_prefix`,
    /// the space encode inserts (at the start and after each special token) is removed, so that
    /// `decode(encode(s)) == s`.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        let bytes = self.decode_bytes(ids)?;
        Ok(match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    /// Number of tokens in the vocabulary.
    pub fn n_vocab(&self) -> usize {
        self.tokens.len()
    }
    pub fn kind(&self) -> TokenizerKind {
        self.kind
    }
    /// The BPE pre-tokenizer family (None for SentencePiece).
    pub fn pre_tokenizer(&self) -> Option<PreTokenizer> {
        self.pre
    }
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }
    /// End-of-turn token (metadata, else detected by text like llama.cpp, e.g. `<|im_end|>`).
    pub fn eot(&self) -> Option<u32> {
        self.eot
    }
    pub fn unk(&self) -> Option<u32> {
        self.unk
    }
    pub fn pad(&self) -> Option<u32> {
        self.pad
    }
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }
    /// End of generation: EOS, EOT, EOM and the tokens llama.cpp marks so by text.
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }
    /// All end-of-generation ids, ascending.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }
    /// Control (or unknown) token: rendered only when specials are shown.
    pub fn is_control(&self, id: u32) -> bool {
        self.attrs
            .get(id as usize)
            .is_some_and(|a| a & (ATTR_CONTROL | ATTR_UNKNOWN) != 0)
    }
    /// The vocabulary entry of `id` as stored (byte-level or `▁`-escaped form).
    pub fn token_text(&self, id: u32) -> Result<&str> {
        self.tokens
            .get(id as usize)
            .map(String::as_str)
            .ok_or(TokenizerError::UnknownToken {
                id,
                n_vocab: self.n_vocab(),
            })
    }
    /// The id of a vocabulary entry, by its stored text.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.token_to_id.get(text).copied()
    }
    /// Text of `id` for use in a chat template (`bos_token`, `eos_token`): its piece as a string.
    pub fn token_string(&self, id: u32) -> Result<String> {
        Ok(String::from_utf8_lossy(self.token_bytes(id)?).into_owned())
    }
    /// The model's Jinja chat template, if any.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }
}
