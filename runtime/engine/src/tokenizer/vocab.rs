//! Token attributes, pre-tokenizer regexes, llama.cpp's defaults and the special-token text lists.

use super::*;

pub(super) const ATTR_UNDEFINED: u8 = 0;
pub(super) const ATTR_UNKNOWN: u8 = 1 << 0;
pub(super) const ATTR_UNUSED: u8 = 1 << 1;
pub(super) const ATTR_NORMAL: u8 = 1 << 2;
pub(super) const ATTR_CONTROL: u8 = 1 << 3;
pub(super) const ATTR_USER_DEFINED: u8 = 1 << 4;
pub(super) const ATTR_BYTE: u8 = 1 << 5;

pub(super) fn attr_from_type(t: i32) -> u8 {
    match t {
        1 => ATTR_NORMAL,
        2 => ATTR_UNKNOWN,
        3 => ATTR_CONTROL,
        4 => ATTR_USER_DEFINED,
        5 => ATTR_UNUSED,
        6 => ATTR_BYTE,
        _ => ATTR_UNDEFINED,
    }
}

/// llama.cpp's pre-tokenizer families (`LLAMA_VOCAB_PRE_TYPE_*`) that tern implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreTokenizer {
    /// `LLAMA_VOCAB_PRE_TYPE_DEFAULT` (no or `default` pre key).
    Default,
    /// GPT-2 regex only (`gpt-2`, `phi-2`, `mpt`, `olmo`, ...).
    Gpt2,
    /// Every digit isolated, then the GPT-2 regex (`smollm`, `starcoder`, `refact`, `command-r`, ...).
    Smollm,
    /// Llama 3 regex, merges ignored for whole-word vocab hits (`llama-bpe`, `llama3`, `falcon3`, ...).
    Llama3,
    /// Qwen2 regex (single digits).
    Qwen2,
}

pub(super) const RE_GPT2: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
// llama.cpp's adapted form of the Llama 3 regex: case-insensitive contractions spelled out, so that
// Unicode case folding (e.g. U+017F) does not widen them.
pub(super) const RE_LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
pub(super) const RE_QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

impl PreTokenizer {
    /// Maps a `tokenizer.ggml.pre` value as llama.cpp's `llama_vocab::impl::load` does.
    pub fn from_name(pre: Option<&str>) -> Result<Self> {
        Ok(match pre.unwrap_or("default") {
            "" | "default" => Self::Default,
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es"
            | "jina-v2-de" | "a.x-4.0" | "mellum" | "modern-bert" | "mpt" | "olmo" | "exaone4" => {
                Self::Gpt2
            }
            "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone"
            | "minerva-7b" | "mellum2" => Self::Smollm,
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral"
            | "midm-2.0" | "lfm2" | "jina-v5-nano" => Self::Llama3,
            "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "megrez" => Self::Qwen2,
            other => return Err(TokenizerError::UnsupportedPreTokenizer(other.to_string())),
        })
    }

    /// The regexes llama.cpp applies in sequence (`llm_tokenizer_bpe::regex_exprs`).
    pub fn regexes(self) -> &'static [&'static str] {
        match self {
            Self::Default => &[
                r"[\p{P}\$\+<=>\^~\|]+",
                RE_GPT2,
                r"\p{N}+",
                "[0-9][0-9][0-9]",
            ],
            Self::Gpt2 => &[RE_GPT2],
            Self::Smollm => &[r"\p{N}", RE_GPT2],
            Self::Llama3 => &[RE_LLAMA3],
            Self::Qwen2 => &[RE_QWEN2],
        }
    }

    /// llama.cpp's `ignore_merges`: a pre-token that is itself a vocabulary entry maps to it directly.
    pub fn ignore_merges(self) -> bool {
        self == Self::Llama3
    }
}

/// llama.cpp's default for `tokenizer.ggml.add_bos_token` when the key is missing: `true` for
/// SentencePiece, `true` for byte-level BPE only with the Llama 3 family (and `tekken`,
/// `chameleon`), else `false`. The key, when present, wins.
pub fn llama_cpp_default_add_bos(kind: TokenizerKind, pre: Option<&str>) -> bool {
    match kind {
        TokenizerKind::Llama => true,
        TokenizerKind::Gpt2 => {
            matches!(PreTokenizer::from_name(pre), Ok(PreTokenizer::Llama3))
                || matches!(pre, Some("tekken" | "chameleon"))
        }
    }
}

/// llama.cpp's default for `tokenizer.ggml.add_space_prefix` when the key is missing: `true` for
/// SentencePiece, `false` for byte-level BPE.
pub fn llama_cpp_default_add_space_prefix(kind: TokenizerKind) -> bool {
    kind == TokenizerKind::Llama
}

// Token texts llama.cpp gives a role (and the CONTROL attribute) by text, `llama_vocab::impl::load`.
pub(super) const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
pub(super) const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
pub(super) const FIM_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
pub(super) const FIM_PAD_TEXTS: &[&str] =
    &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
pub(super) const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
pub(super) const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];
pub(super) const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];
pub(super) const USER_DEFINED_TEXTS: &[&str] =
    &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/// GPT-2's byte → printable code point table (`bytes_to_unicode`).
pub(super) fn gpt2_byte_to_char() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
        let cp = if printable {
            u32::from(b)
        } else {
            n += 1;
            255 + n
        };
        // ok: cp <= 255 + 68, always a valid scalar value
        table[usize::from(b)] = char::from_u32(cp).unwrap_or('\0');
    }
    table
}
