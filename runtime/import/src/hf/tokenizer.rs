//! tokenizer.json + tokenizer_config.json → tern's tokenizer spec.

use super::*;

// ------------------------------------------------------------------------------------------------
// Tokenizer

/// Llama 3's pre-tokenizer regex (also bitnet-b1.58-2B-4T's): llama.cpp pre id "llama-bpe".
pub(super) const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's: the same with single digits: llama.cpp pre id "qwen2".
pub(super) const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

pub(super) fn ty(v: &Value) -> &str {
    v.get("type").and_then(Value::as_str).unwrap_or("")
}

pub(super) fn is_byte_level(v: &Value) -> bool {
    ty(v) == "ByteLevel"
        || (ty(v) == "Sequence"
            && v.get("pretokenizers")
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().any(is_byte_level)))
}

/// `ByteLevel` with its default regex on (GPT-2's split).
pub(super) fn byte_level_with_regex(v: &Value) -> bool {
    ty(v) == "ByteLevel" && v.get("use_regex").and_then(Value::as_bool).unwrap_or(true)
}

/// Map a HF pre-tokenizer to the llama.cpp pre-tokenizer id that splits the same way.
pub(super) fn pre_id(pre: &Value) -> Option<&'static str> {
    if byte_level_with_regex(pre) {
        return Some("gpt-2");
    }
    if ty(pre) != "Sequence" {
        return None;
    }
    let parts = pre.get("pretokenizers")?.as_array()?;
    match parts.as_slice() {
        [d, b]
            if ty(d) == "Digits"
                && d.get("individual_digits").and_then(Value::as_bool) == Some(true)
                && byte_level_with_regex(b) =>
        {
            Some("smollm")
        }
        [s, b]
            if ty(s) == "Split"
                && ty(b) == "ByteLevel"
                && b.get("use_regex").and_then(Value::as_bool) == Some(false) =>
        {
            let pat = s.get("pattern")?;
            let re = pat.get("Regex").or_else(|| pat.get("String"))?.as_str()?;
            match re {
                LLAMA3_REGEX => Some("llama-bpe"),
                QWEN2_REGEX => Some("qwen2"),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The text of a special-token entry of tokenizer_config.json (a string or `{"content": ...}`).
pub(super) fn token_text(v: Option<&Value>) -> Option<&str> {
    let v = v?;
    v.as_str()
        .or_else(|| v.get("content").and_then(Value::as_str))
}

/// `(add_bos, add_eos, bos, eos)` as a `TemplateProcessing` post-processor (possibly inside a
/// `Sequence`) adds them to a single sequence.
pub(super) fn template_bos_eos(pp: &Value) -> (bool, bool, Option<u32>, Option<u32>) {
    let tp = if ty(pp) == "Sequence" {
        pp.get("processors")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|p| ty(p) == "TemplateProcessing"))
    } else if ty(pp) == "TemplateProcessing" {
        Some(pp)
    } else {
        None
    };
    let Some(tp) = tp else {
        return (false, false, None, None);
    };
    let single = tp
        .get("single")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let special_id = |item: Option<&Value>| -> Option<Option<u32>> {
        let name = item?.get("SpecialToken")?.get("id")?.as_str()?;
        let ids = tp
            .get("special_tokens")?
            .get(name)?
            .get("ids")?
            .as_array()?;
        Some(
            ids.first()
                .and_then(Value::as_u64)
                .and_then(|x| u32::try_from(x).ok()),
        )
    };
    let bos = special_id(single.first());
    let eos = special_id(single.last());
    (bos.is_some(), eos.is_some(), bos.flatten(), eos.flatten())
}

pub(super) fn tokenizer_spec(dir: &Path, cfg: &HfConfig) -> Result<Option<TokenizerSpec>> {
    let path = dir.join("tokenizer.json");
    if !path.is_file() {
        return Ok(None);
    }
    let tj = read_json(&path)?;
    let tc_path = dir.join("tokenizer_config.json");
    let tc = if tc_path.is_file() {
        read_json(&tc_path)?
    } else {
        Value::Null
    };
    let terr = |m: String| hf_err(format!("tokenizer.json: {m}"));

    let model = tj.get("model").ok_or_else(|| terr("no `model`".into()))?;
    let mtype = ty(model);
    if !(mtype == "BPE" || (mtype.is_empty() && model.get("merges").is_some())) {
        return Err(terr(format!(
            "model type {mtype:?} is not supported (tern reads byte-level BPE)"
        )));
    }
    let pre = tj.get("pre_tokenizer").unwrap_or(&Value::Null);
    let decoder = tj.get("decoder").unwrap_or(&Value::Null);
    if !(is_byte_level(pre) || ty(decoder) == "ByteLevel") {
        return Err(terr(
            "BPE without a ByteLevel pre-tokenizer is not supported (tern reads byte-level BPE)"
                .into(),
        ));
    }

    // Token table: model.vocab, then added_tokens on top; holes and the rest up to vocab_size are
    // padding tokens, as llama.cpp's converter writes them.
    let n_vocab = cfg.hparams.n_vocab as usize;
    let mut tokens: Vec<Option<String>> = vec![None; n_vocab];
    let mut types = vec![1i32; n_vocab];
    let vocab = model
        .get("vocab")
        .and_then(Value::as_object)
        .ok_or_else(|| terr("`model.vocab` is not an object".into()))?;
    let slot = |id: Option<u64>, what: &str| -> Result<usize> {
        let id = id.ok_or_else(|| terr(format!("{what}: id is not an integer")))?;
        usize::try_from(id)
            .ok()
            .filter(|&i| i < n_vocab)
            .ok_or_else(|| terr(format!("{what}: id {id} is not below vocab_size {n_vocab}")))
    };
    for (text, id) in vocab {
        let i = slot(id.as_u64(), &format!("vocab entry {text:?}"))?;
        if let Some(prev) = tokens.get(i).and_then(|t| t.as_ref()) {
            return Err(terr(format!("tokens {prev:?} and {text:?} share id {i}")));
        }
        tokens[i] = Some(text.clone()); // ok: i < n_vocab = tokens.len()
    }
    let mut by_text: HashMap<String, u32> = HashMap::new();
    for at in tj
        .get("added_tokens")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
    {
        let text = at
            .get("content")
            .and_then(Value::as_str)
            .ok_or_else(|| terr("added token without `content`".into()))?;
        let i = slot(
            at.get("id").and_then(Value::as_u64),
            &format!("added token {text:?}"),
        )?;
        let special = at.get("special").and_then(Value::as_bool).unwrap_or(false);
        let looks_special = text.starts_with("<|") && text.ends_with("|>") && text.len() > 4;
        tokens[i] = Some(text.to_string()); // ok: i < n_vocab
        types[i] = if special || looks_special { 3 } else { 4 }; // ok: i < n_vocab
        by_text.insert(text.to_string(), i as u32);
    }
    let tokens: Vec<String> = tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            t.unwrap_or_else(|| {
                if let Some(ty) = types.get_mut(i) {
                    *ty = 5;
                }
                format!("[PAD{i}]")
            })
        })
        .collect();
    let lookup = |text: &str| -> Option<u32> {
        by_text.get(text).copied().or_else(|| {
            vocab
                .get(text)
                .and_then(Value::as_u64)
                .and_then(|x| u32::try_from(x).ok())
        })
    };

    let mut merges = Vec::new();
    for m in model
        .get("merges")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
    {
        let s = match m {
            Value::String(s) => {
                // A space after the first symbol (which may be multi-byte: "Ġ t"), as llama.cpp
                // and the engine's BPE model split it.
                if !s.char_indices().skip(1).any(|(_, c)| c == ' ') {
                    return Err(terr(format!("merge {s:?} is not \"A B\"")));
                }
                s.clone()
            }
            Value::Array(p) => match p.as_slice() {
                [Value::String(a), Value::String(b)] if !a.contains(' ') && !b.contains(' ') => {
                    format!("{a} {b}")
                }
                _ => {
                    return Err(terr(format!(
                        "merge {m} is not a pair of space-free strings"
                    )))
                }
            },
            _ => return Err(terr(format!("merge {m} is neither \"A B\" nor [A, B]"))),
        };
        merges.push(s);
    }

    let (tpl_bos_added, tpl_eos_added, tpl_bos, tpl_eos) =
        template_bos_eos(tj.get("post_processor").unwrap_or(&Value::Null));
    let add_bos = tc
        .get("add_bos_token")
        .and_then(Value::as_bool)
        .unwrap_or(tpl_bos_added);
    let add_eos = tc
        .get("add_eos_token")
        .and_then(Value::as_bool)
        .unwrap_or(tpl_eos_added);
    let id_of = |key: &str| token_text(tc.get(key)).and_then(lookup);
    let bos = id_of("bos_token").or(cfg.bos).or(tpl_bos);
    let eos = id_of("eos_token").or(cfg.eos).or(tpl_eos);
    let unk = id_of("unk_token").or_else(|| {
        model
            .get("unk_token")
            .and_then(Value::as_str)
            .and_then(lookup)
    });
    let pad = id_of("pad_token").or(cfg.pad);
    let eot = ["<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>"]
        .into_iter()
        .find_map(lookup);
    for (what, id) in [("bos", bos), ("eos", eos), ("unk", unk), ("pad", pad)] {
        if let Some(id) = id {
            if id as usize >= n_vocab {
                return Err(hf_err(format!(
                    "{what} token id {id} is not below vocab_size {n_vocab}"
                )));
            }
        }
    }

    let chat_template = match tc.get("chat_template") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(list)) => list
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .and_then(|t| t.get("template").and_then(Value::as_str))
            .map(str::to_string),
        _ => {
            let jinja = dir.join("chat_template.jinja");
            if jinja.is_file() {
                Some(std::fs::read_to_string(&jinja)?)
            } else {
                None
            }
        }
    };
    let pre_name = pre_id(pre);
    if pre_name.is_none() {
        log::warn!("tokenizer.json: pre-tokenizer {pre} has no llama.cpp equivalent tern knows; tokenization may differ");
    }
    Ok(Some(TokenizerSpec {
        kind: TokenizerKind::Gpt2,
        pre: pre_name.map(str::to_string),
        tokens,
        token_types: types,
        merges,
        scores: Vec::new(),
        bos,
        eos,
        unk,
        pad,
        eot,
        add_bos,
        add_eos,
        add_space_prefix: false,
        chat_template,
    }))
}
