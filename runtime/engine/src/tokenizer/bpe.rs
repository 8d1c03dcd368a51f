//! Token pieces as llama.cpp renders them, and the BPE model built with the `tokenizers` crate.

use super::*;

/// A token's piece as llama.cpp's `token_to_piece(special = true)` renders it.
pub(super) fn piece_bytes(
    kind: TokenizerKind,
    text: &str,
    attr: u8,
    char_to_byte: &HashMap<char, u8>,
) -> Vec<u8> {
    if attr & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN) != 0 {
        return text.as_bytes().to_vec();
    }
    if attr & ATTR_NORMAL != 0 {
        return match kind {
            // Characters outside the byte map (never in real vocabularies) pass through as UTF-8.
            TokenizerKind::Gpt2 => {
                let mut v = Vec::with_capacity(text.len());
                for c in text.chars() {
                    match char_to_byte.get(&c) {
                        Some(&b) => v.push(b),
                        None => v.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                    }
                }
                v
            }
            TokenizerKind::Llama => text.replace('\u{2581}', " ").into_bytes(),
        };
    }
    if attr & ATTR_BYTE != 0 {
        // `<0xXX>`
        return text
            .get(3..5)
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .map(|b| vec![b])
            .unwrap_or_default();
    }
    Vec::new()
}

/// The `tokenizers` pipeline for byte-level BPE: `Sequence[Split(re, Isolated)..., ByteLevel]` + BPE.
pub(super) fn build_bpe(spec: &TokenizerSpec, pre: PreTokenizer) -> Result<tokenizers::Tokenizer> {
    use tokenizers::models::bpe::BPE;
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    use tokenizers::pre_tokenizers::sequence::Sequence;
    use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
    use tokenizers::pre_tokenizers::PreTokenizerWrapper;
    use tokenizers::SplitDelimiterBehavior;

    let backend = |e: tokenizers::Error| TokenizerError::Backend(e.to_string());
    let vocab: tokenizers::models::bpe::Vocab = spec
        .tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    // Merges "A B" split at the first space at position >= 1 (llama.cpp). `tokenizers` rejects merges
    // whose parts or result are not in the vocabulary; llama.cpp could never apply those anyway, except
    // for a result missing from the vocabulary, which it emits as raw bytes: a malformed vocabulary.
    let mut seen = std::collections::HashSet::new();
    let mut merges = Vec::with_capacity(spec.merges.len());
    for m in &spec.merges {
        let Some((pos, _)) = m.char_indices().skip(1).find(|&(_, c)| c == ' ') else {
            continue;
        };
        let (Some(a), Some(b)) = (m.get(..pos), m.get(pos + 1..)) else {
            continue;
        };
        if !vocab.contains_key(a)
            || !vocab.contains_key(b)
            || !vocab.contains_key(&format!("{a}{b}"))
        {
            continue;
        }
        // First rank wins (llama.cpp's `bpe_ranks.emplace`).
        if seen.insert((a, b)) {
            merges.push((a.to_string(), b.to_string()));
        }
    }
    let model = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(pre.ignore_merges())
        .build()
        .map_err(backend)?;
    let mut stages: Vec<PreTokenizerWrapper> = Vec::new();
    for re in pre.regexes() {
        let split = Split::new(
            SplitPattern::Regex((*re).to_string()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(backend)?;
        stages.push(split.into());
    }
    stages.push(ByteLevel::new(false, false, false).into());
    let mut tok = tokenizers::Tokenizer::new(model);
    tok.with_pre_tokenizer(Some(Sequence::new(stages)));
    Ok(tok)
}

// A tokenizer is shared across sessions and threads.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Tokenizer>();
};
