//! Chat templates: the Jinja template a model ships (GGUF `tokenizer.chat_template`), rendered with
//! `minijinja` the way Hugging Face `transformers` renders it (`apply_chat_template`):
//! `trim_blocks` and `lstrip_blocks` on, loop controls (`break`/`continue`) enabled, lenient
//! undefined values, and the globals/filters HF adds: `raise_exception(msg)`, `strftime_now(fmt)`,
//! and a `tojson` that matches Python's `json.dumps(x, ensure_ascii=False, indent=...)` (minijinja's
//! own `tojson` HTML-escapes `<`, `>`, `&` and `'`, which would change prompts).
//!
//! Python string/dict methods that templates call (`content.strip()`, `message.items()`, ...) are
//! provided by a small unknown-method callback here rather than by `minijinja-contrib`, to keep the
//! dependency set (and the lock file) unchanged; it covers the methods HF chat templates use.
//!
//! `strftime_now` formats the time in UTC (HF and llama.cpp use the local time zone); the clock can
//! be fixed through [`ChatOptions::now`] for reproducible prompts.

use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};
use serde::{Deserialize, Serialize};

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` (or whatever the template knows).
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// Errors from rendering a chat template.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// The template does not parse.
    #[error("chat template does not parse: {0}")]
    Syntax(String),
    /// The template called `raise_exception(message)` (e.g. roles that do not alternate).
    #[error("chat template rejected the conversation: {0}")]
    Raised(String),
    /// Any other failure while rendering.
    #[error("chat template failed to render: {0}")]
    Render(String),
    /// The template ran past a limit (instructions executed, template or output size): an
    /// endless or runaway template from a file must not hang or exhaust the app.
    #[error("chat template exceeded a limit: {0}")]
    Limit(String),
}

/// Instructions a template may execute for one rendering. SmolLM2's and Llama 3's templates use
/// about 30 per message, so this is ~10,000 messages of headroom and a few tens of milliseconds of
/// CPU at most.
pub const TEMPLATE_FUEL: u64 = 2_000_000;
/// Largest template accepted (the largest templates on the Hugging Face hub are ~10 KB).
pub const TEMPLATE_MAX_BYTES: usize = 1 << 20;
/// Output allowed beyond the messages' own text (role markers, system prompts, tool schemas).
pub const TEMPLATE_OUTPUT_SLACK: usize = 4 << 20;
/// Memory one rendering may use beyond [`TEMPLATE_MEMORY_PER_TEXT_BYTE`] per byte of the
/// messages: every string the template creates or formats, every iteration step (16 bytes) and
/// every size an operation is asked for (`indent(n)`, `batch(n)`, printf widths, `tojson(indent=n)`,
/// repetition) is charged to it before or as it is allocated (`minijinja::limits`, a patched
/// minijinja: third_party/minijinja/PATCHES.md). Real templates use well under 1 MiB.
pub const TEMPLATE_MEMORY_BYTES: u64 = 64 << 20;
/// Memory per byte of the messages' text (a template copies the text a few times).
pub const TEMPLATE_MEMORY_PER_TEXT_BYTE: u64 = 16;
/// Longest lazily repeated, concatenated or sliced sequence a template may build.
pub const TEMPLATE_MAX_ITEMS: u64 = 1_000_000;
/// Wall-clock time one rendering may take (real templates: milliseconds).
pub const TEMPLATE_MAX_TIME: std::time::Duration = std::time::Duration::from_secs(2);

impl From<ChatError> for crate::error::EngineError {
    fn from(e: ChatError) -> Self {
        crate::error::EngineError::Template(e.to_string())
    }
}

/// Everything besides the messages that a template sees.
#[derive(Debug, Clone, Default)]
pub struct ChatOptions {
    /// Append the header that opens the assistant's turn.
    pub add_generation_prompt: bool,
    /// Value of `bos_token` (the BOS token's text, e.g. `<|begin_of_text|>`).
    pub bos_token: String,
    /// Value of `eos_token`.
    pub eos_token: String,
    /// Clock for `strftime_now` (default: now).
    pub now: Option<SystemTime>,
    /// Extra variables (e.g. `date_string`, `tools`), as JSON.
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// Renders `template` for `messages` (HF `apply_chat_template(messages, tokenize=False)`).
pub fn render_chat(
    template: &str,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
    bos: &str,
    eos: &str,
) -> Result<String, ChatError> {
    let opts = ChatOptions {
        add_generation_prompt,
        bos_token: bos.into(),
        eos_token: eos.into(),
        ..Default::default()
    };
    render_chat_with(template, messages, &opts)
}

const RAISED: &str = "raise_exception: ";

/// Renders `template` for `messages` with full control over the context.
pub fn render_chat_with(
    template: &str,
    messages: &[ChatMessage],
    opts: &ChatOptions,
) -> Result<String, ChatError> {
    let now = opts.now.unwrap_or_else(SystemTime::now);
    let secs = match now.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    };
    if template.len() > TEMPLATE_MAX_BYTES {
        return Err(ChatError::Limit(format!(
            "template is {} bytes (most {TEMPLATE_MAX_BYTES})",
            template.len()
        )));
    }
    let text_bytes: usize = messages
        .iter()
        .map(|m| m.content.len() + m.role.len())
        .sum();
    let output_limit = text_bytes
        .saturating_mul(2)
        .saturating_add(TEMPLATE_OUTPUT_SLACK);
    // The caller's extra variables (tool schemas, dates) are the template's input too.
    let extra_bytes = serde_json::to_string(&opts.extra).map_or(0, |s| s.len());
    let text_bytes = text_bytes.saturating_add(extra_bytes);
    let limits = minijinja::limits::Limits {
        max_bytes: TEMPLATE_MEMORY_BYTES
            .saturating_add((text_bytes as u64).saturating_mul(TEMPLATE_MEMORY_PER_TEXT_BYTE)),
        max_items: TEMPLATE_MAX_ITEMS,
        deadline: Some(std::time::Instant::now() + TEMPLATE_MAX_TIME),
    };
    let (rendered, exceeded) = minijinja::limits::with_limits(limits, || {
        render_limited(template, messages, opts, secs, output_limit)
    });
    match exceeded {
        Some(e) => Err(ChatError::Limit(match e {
            minijinja::limits::Exceeded::Memory => {
                format!("used more than {} bytes of memory", limits.max_bytes)
            }
            minijinja::limits::Exceeded::Items => {
                format!("built a sequence of more than {TEMPLATE_MAX_ITEMS} items")
            }
            minijinja::limits::Exceeded::Time => {
                format!("ran longer than {:?}", TEMPLATE_MAX_TIME)
            }
        })),
        None => rendered,
    }
}

/// The rendering itself, run under [`minijinja::limits::with_limits`].
fn render_limited(
    template: &str,
    messages: &[ChatMessage],
    opts: &ChatOptions,
    secs: i64,
    output_limit: usize,
) -> Result<String, ChatError> {
    let mut env = Environment::new();
    env.set_fuel(Some(TEMPLATE_FUEL));
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.add_function("raise_exception", |msg: String| -> Result<Value, Error> {
        Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("{RAISED}{msg}"),
        ))
    });
    env.add_function("strftime_now", move |fmt: String| -> Result<Value, Error> {
        // A directive expands to at most 9 bytes ("September").
        minijinja::limits::reserve((fmt.len() as u64).saturating_mul(9))?;
        Ok(Value::from(strftime(&fmt, secs)))
    });
    env.add_filter(
        "tojson",
        move |value: &Value, indent: Option<Value>, kwargs: Kwargs| {
            tojson(value, indent, kwargs, output_limit)
        },
    );
    env.set_unknown_method_callback(python_method);

    let tmpl = env
        .template_from_named_str("chat_template", template)
        .map_err(|e| ChatError::Syntax(describe(&e)))?;
    let mut ctx = opts.extra.clone();
    ctx.insert(
        "messages".into(),
        serde_json::to_value(messages).map_err(|e| ChatError::Render(e.to_string()))?,
    );
    ctx.insert(
        "add_generation_prompt".into(),
        opts.add_generation_prompt.into(),
    );
    ctx.insert("bos_token".into(), opts.bos_token.clone().into());
    ctx.insert("eos_token".into(), opts.eos_token.clone().into());
    let mut out = BoundedOutput {
        buf: Vec::new(),
        limit: output_limit,
    };
    let rendered = tmpl
        .render_captured_to(Value::from_serialize(&ctx), &mut out)
        .map(drop);
    match rendered {
        Ok(()) => String::from_utf8(out.buf).map_err(|e| ChatError::Render(e.to_string())),
        Err(e) => Err(classify(&e, out.limit)),
    }
}

/// An output sink that refuses to grow past `limit` bytes.
struct BoundedOutput {
    buf: Vec<u8>,
    limit: usize,
}

impl std::io::Write for BoundedOutput {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len().saturating_add(data.len()) > self.limit {
            return Err(std::io::Error::other("output limit"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn classify(e: &Error, limit: usize) -> ChatError {
    if e.kind() == ErrorKind::OutOfFuel {
        return ChatError::Limit(format!(
            "ran more than {TEMPLATE_FUEL} instructions (an endless loop?)"
        ));
    }
    if e.kind() == ErrorKind::WriteFailure {
        return ChatError::Limit(format!("output longer than {limit} bytes"));
    }
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(detail) = err.downcast_ref::<Error>().and_then(Error::detail) {
            if let Some(msg) = detail.strip_prefix(RAISED) {
                return ChatError::Raised(msg.to_string());
            }
        }
        cur = err.source();
    }
    ChatError::Render(describe(e))
}

fn describe(e: &Error) -> String {
    let mut s = e.to_string();
    let mut cur = std::error::Error::source(e);
    while let Some(err) = cur {
        s.push_str(": ");
        s.push_str(&err.to_string());
        cur = err.source();
    }
    s
}

/// A sink that charges what is written to the rendering's memory budget and keeps nothing: sizes
/// a serialization before it is materialized.
struct ChargedSink;

impl std::io::Write for ChargedSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if !minijinja::limits::try_charge(buf.len() as u64) {
            return Err(std::io::Error::other("template memory limit"));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn too_long(limit: usize) -> Error {
    // Asking the budget for everything marks this rendering as over its limit, so the error is
    // reported as `ChatError::Limit` whatever the template does with it.
    let _ = minijinja::limits::reserve(u64::MAX);
    Error::new(
        ErrorKind::InvalidOperation,
        format!("tojson output longer than {limit} bytes"),
    )
}

/// HF's `tojson`: `json.dumps(x, ensure_ascii=False, indent=indent)` (Python separators). The
/// value's JSON is sized (and charged) before it is copied, and the indented text may not grow
/// past `limit` (the rendering's output limit): `indent` is checked as the text grows.
fn tojson(
    value: &Value,
    indent: Option<Value>,
    kwargs: Kwargs,
    limit: usize,
) -> Result<Value, Error> {
    let indent = match indent {
        Some(v) => v.as_usize(),
        None => kwargs.get::<Option<usize>>("indent")?,
    };
    let _ = kwargs.get::<Option<Value>>("ensure_ascii")?;
    let _ = kwargs.get::<Option<Value>>("sort_keys")?;
    let _ = kwargs.get::<Option<Value>>("separators")?;
    kwargs.assert_all_used()?;
    if indent.is_some_and(|n| n > limit) {
        return Err(too_long(limit));
    }
    serde_json::to_writer(ChargedSink, value)
        .map_err(|e| Error::new(ErrorKind::BadSerialization, e.to_string()))?;
    let json = serde_json::to_value(value)
        .map_err(|e| Error::new(ErrorKind::BadSerialization, e.to_string()))?;
    let mut out = String::new();
    write_py_json(&json, indent, 0, &mut out, limit)?;
    Ok(Value::from_safe_string(out))
}

fn write_py_json(
    v: &serde_json::Value,
    indent: Option<usize>,
    depth: usize,
    out: &mut String,
    limit: usize,
) -> Result<(), Error> {
    use serde_json::Value as J;
    let newline = |out: &mut String, d: usize| -> Result<(), Error> {
        if let Some(n) = indent {
            let pad = n.saturating_mul(d);
            if out.len().saturating_add(pad).saturating_add(1) > limit {
                return Err(too_long(limit));
            }
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', pad));
        }
        Ok(())
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    match v {
        J::Array(a) if !a.is_empty() => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1)?;
                write_py_json(x, indent, depth + 1, out, limit)?;
            }
            newline(out, depth)?;
            out.push(']');
        }
        J::Object(m) if !m.is_empty() => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1)?;
                out.push_str(&serde_json::Value::String(k.clone()).to_string());
                out.push_str(": ");
                write_py_json(x, indent, depth + 1, out, limit)?;
            }
            newline(out, depth)?;
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
    if out.len() > limit {
        return Err(too_long(limit));
    }
    Ok(())
}

/// The Python `str`/`dict`/`list` methods HF chat templates call.
fn python_method(
    _state: &State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    let unknown = || {
        Error::new(
            ErrorKind::UnknownMethod,
            format!("{} has no method {method}", value.kind()),
        )
    };
    let arg_str = |i: usize| -> Option<&str> { args.get(i).and_then(Value::as_str) };
    match value.kind() {
        ValueKind::String => {
            let s = value.as_str().unwrap_or_default();
            let chars: Option<Vec<char>> = arg_str(0).map(|c| c.chars().collect());
            let strip_set = |c: char| match &chars {
                Some(set) => set.contains(&c),
                None => c.is_whitespace(),
            };
            Ok(match method {
                "strip" => Value::from(s.trim_matches(strip_set)),
                "lstrip" => Value::from(s.trim_start_matches(strip_set)),
                "rstrip" => Value::from(s.trim_end_matches(strip_set)),
                // Case mappings grow a string at most 3× (UTF-8): charged before.
                "upper" | "lower" | "title" | "capitalize"
                    if minijinja::limits::reserve((s.len() as u64).saturating_mul(3)).is_err() =>
                {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "template memory limit exceeded",
                    ))
                }
                "upper" => Value::from(s.to_uppercase()),
                "lower" => Value::from(s.to_lowercase()),
                "title" => Value::from(title_case(s)),
                "capitalize" => {
                    let mut c = s.chars();
                    Value::from(match c.next() {
                        Some(f) => f
                            .to_uppercase()
                            .chain(c.flat_map(char::to_lowercase))
                            .collect::<String>(),
                        None => String::new(),
                    })
                }
                "startswith" | "endswith" => {
                    let test = |p: &str| {
                        if method == "startswith" {
                            s.starts_with(p)
                        } else {
                            s.ends_with(p)
                        }
                    };
                    let arg = args.first().ok_or_else(|| {
                        Error::new(ErrorKind::MissingArgument, method.to_string())
                    })?;
                    Value::from(match arg.as_str() {
                        Some(p) => test(p),
                        None => arg.try_iter()?.any(|p| p.as_str().is_some_and(test)),
                    })
                }
                "split" | "rsplit" => {
                    let max = args
                        .get(1)
                        .and_then(Value::as_i64)
                        .filter(|&m| m >= 0)
                        .map(|m| m as usize);
                    let parts: Vec<String> = match (arg_str(0), max) {
                        (Some(sep), Some(m)) if method == "split" => {
                            s.splitn(m + 1, sep).map(str::to_string).collect()
                        }
                        (Some(sep), Some(m)) => {
                            let mut v: Vec<String> =
                                s.rsplitn(m + 1, sep).map(str::to_string).collect();
                            v.reverse();
                            v
                        }
                        (Some(sep), None) => s.split(sep).map(str::to_string).collect(),
                        (None, _) => s.split_whitespace().map(str::to_string).collect(),
                    };
                    Value::from(parts)
                }
                "replace" => {
                    let (Some(from), Some(to)) = (arg_str(0), arg_str(1)) else {
                        return Err(unknown());
                    };
                    // The result's size, charged before it is built (an empty `from` matches at
                    // every character boundary).
                    let hits = if from.is_empty() {
                        s.chars().count() + 1
                    } else {
                        s.matches(from).count()
                    };
                    minijinja::limits::reserve(
                        (hits as u64)
                            .saturating_mul(to.len() as u64)
                            .saturating_add(s.len() as u64),
                    )?;
                    match args.get(2).and_then(Value::as_i64).filter(|&n| n >= 0) {
                        Some(n) => Value::from(s.replacen(from, to, n as usize)),
                        None => Value::from(s.replace(from, to)),
                    }
                }
                "find" => Value::from(
                    arg_str(0)
                        .and_then(|p| s.find(p))
                        .map(|b| s.get(..b).unwrap_or_default().chars().count() as i64)
                        .unwrap_or(-1),
                ),
                "count" => Value::from(
                    arg_str(0)
                        .filter(|p| !p.is_empty())
                        .map(|p| s.matches(p).count())
                        .unwrap_or(0),
                ),
                "join" => {
                    let mut out = String::new();
                    for (i, v) in args.first().ok_or_else(unknown)?.try_iter()?.enumerate() {
                        let item = v.to_string();
                        minijinja::limits::reserve((item.len() + s.len()) as u64)?;
                        if i > 0 {
                            out.push_str(s);
                        }
                        out.push_str(&item);
                    }
                    Value::from(out)
                }
                "isdigit" => Value::from(!s.is_empty() && s.chars().all(|c| c.is_ascii_digit())),
                "isalpha" => Value::from(!s.is_empty() && s.chars().all(char::is_alphabetic)),
                "isspace" => Value::from(!s.is_empty() && s.chars().all(char::is_whitespace)),
                "islower" => Value::from(
                    s.chars().any(char::is_lowercase) && !s.chars().any(char::is_uppercase),
                ),
                "isupper" => Value::from(
                    s.chars().any(char::is_uppercase) && !s.chars().any(char::is_lowercase),
                ),
                _ => return Err(unknown()),
            })
        }
        ValueKind::Map => match method {
            "items" => {
                let mut v = Vec::new();
                for k in value.try_iter()? {
                    let item = value.get_item(&k)?;
                    v.push(Value::from(vec![k, item]));
                }
                Ok(Value::from(v))
            }
            "keys" => Ok(Value::from(value.try_iter()?.collect::<Vec<_>>())),
            "values" => {
                let mut v = Vec::new();
                for k in value.try_iter()? {
                    v.push(value.get_item(&k)?);
                }
                Ok(Value::from(v))
            }
            "get" => {
                let key = args.first().ok_or_else(unknown)?;
                let v = value.get_item(key)?;
                Ok(if v.is_undefined() {
                    args.get(1).cloned().unwrap_or(Value::from(()))
                } else {
                    v
                })
            }
            _ => Err(unknown()),
        },
        ValueKind::Seq => match method {
            "count" => {
                let needle = args.first().ok_or_else(unknown)?;
                Ok(Value::from(
                    value.try_iter()?.filter(|v| v == needle).count(),
                ))
            }
            "index" => {
                let needle = args.first().ok_or_else(unknown)?;
                value
                    .try_iter()?
                    .position(|v| &v == needle)
                    .map(Value::from)
                    .ok_or_else(|| Error::new(ErrorKind::InvalidOperation, "value not in list"))
            }
            _ => Err(unknown()),
        },
        _ => Err(unknown()),
    }
}

fn title_case(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev_cased = false;
    for c in s.chars() {
        if prev_cased {
            out.extend(c.to_lowercase());
        } else {
            out.extend(c.to_uppercase());
        }
        prev_cased = c.is_alphabetic();
    }
    out
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// C `strftime` for the common directives, UTC. Unknown directives are kept as written.
pub fn strftime(fmt: &str, unix_secs: i64) -> String {
    let days = unix_secs.div_euclid(86_400);
    let sod = unix_secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let (hh, mm, ss) = (sod / 3600, sod % 3600 / 60, sod % 60);
    let wd = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday (Monday = 0)
    let yday = days - days_from_civil(y, 1, 1) + 1;
    let month = MONTHS.get((m - 1) as usize).copied().unwrap_or("?");
    let day = DAYS.get(wd).copied().unwrap_or("?");
    let mut out = String::new();
    let mut it = fmt.chars();
    while let Some(c) = it.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('e') => out.push_str(&format!("{d:2}")),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y.rem_euclid(100))),
            Some('b') | Some('h') => out.push_str(month.get(..3).unwrap_or(month)),
            Some('B') => out.push_str(month),
            Some('a') => out.push_str(day.get(..3).unwrap_or(day)),
            Some('A') => out.push_str(day),
            Some('H') => out.push_str(&format!("{hh:02}")),
            Some('I') => out.push_str(&format!("{:02}", (hh + 11) % 12 + 1)),
            Some('p') => out.push_str(if hh < 12 { "AM" } else { "PM" }),
            Some('M') => out.push_str(&format!("{mm:02}")),
            Some('S') => out.push_str(&format!("{ss:02}")),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('F') => out.push_str(&format!("{y}-{m:02}-{d:02}")),
            Some('T') => out.push_str(&format!("{hh:02}:{mm:02}:{ss:02}")),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Days since 1970-01-01 → (year, month 1-12, day 1-31) (H. Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn strftime_fixed_dates() {
        assert_eq!(strftime("%d %b %Y", 1_721_995_200), "26 Jul 2024");
        assert_eq!(
            strftime("%Y-%m-%d %H:%M:%S %A %j", 0),
            "1970-01-01 00:00:00 Thursday 001"
        );
        assert_eq!(
            strftime("%F %T %B %a %%", 951_825_600),
            "2000-02-29 12:00:00 February Tue %"
        );
    }

    #[test]
    fn raise_exception_is_typed() {
        let t = "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}";
        let err = render_chat(t, &[ChatMessage::new("system", "x")], false, "", "").unwrap_err();
        assert!(
            matches!(err, ChatError::Raised(ref m) if m == "System role not supported"),
            "{err:?}"
        );
        assert!(matches!(
            render_chat("{% if %}", &[], false, "", ""),
            Err(ChatError::Syntax(_))
        ));
    }

    #[test]
    fn python_methods_and_tojson() {
        let t = "{{ messages[0].content.strip() }}|{{ messages[0].content.split(',') | length }}|{{ messages[0]['role'].title() }}|{% for k, v in messages[0].items() %}{{ k }}{% endfor %}|{{ {'a': [1, 'x<y']} | tojson }}|{{ [1] | tojson(indent=2) }}";
        let out = render_chat(t, &[ChatMessage::new("user", "  a,b  ")], false, "", "").unwrap();
        assert_eq!(
            out,
            "a,b|2|User|contentrole|{\"a\": [1, \"x<y\"]}|[\n  1\n]"
        );
    }

    #[test]
    fn trim_and_lstrip_blocks() {
        let t = "{% for m in messages %}\n  {% if true %}\n{{ m.content }}\n  {% endif %}\n{% endfor %}\n";
        let out = render_chat(
            t,
            &[
                ChatMessage::new("user", "hi"),
                ChatMessage::new("user", "yo"),
            ],
            false,
            "",
            "",
        )
        .unwrap();
        assert_eq!(out, "hi\nyo\n");
    }

    #[test]
    fn endless_and_runaway_templates_hit_limits() {
        let msgs = [ChatMessage::new("user", "hi")];
        let start = std::time::Instant::now();
        // 10^10 iterations: only the fuel limit ends it.
        let endless = "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}";
        let err = render_chat(endless, &msgs, false, "", "").unwrap_err();
        assert!(
            matches!(err, ChatError::Limit(ref m) if m.contains("instructions")),
            "{err}"
        );
        assert!(
            start.elapsed().as_secs() < 20,
            "fuel limit took {:?}",
            start.elapsed()
        );
        // Few instructions, huge output: the output limit ends it.
        let wide = "{% for i in range(1000) %}{{ 'x' * 100000 }}{% endfor %}";
        let err = render_chat(wide, &msgs, false, "", "").unwrap_err();
        assert!(
            matches!(err, ChatError::Limit(ref m) if m.contains("output")),
            "{err}"
        );
        // A template file larger than any real one.
        let big = " ".repeat(TEMPLATE_MAX_BYTES + 1);
        let err = render_chat(&big, &msgs, false, "", "").unwrap_err();
        assert!(matches!(err, ChatError::Limit(_)), "{err}");
        // A long real conversation stays far inside the fuel.
        let t = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";
        let many: Vec<_> = (0..2000)
            .map(|i| ChatMessage::new("user", format!("m{i}")))
            .collect();
        assert!(render_chat(t, &many, true, "", "").is_ok());
    }

    /// Issue 29, class 1: one filter call or operation that sizes its output from an argument,
    /// or grows memory within the fuel, aborted the process ("memory allocation of … bytes
    /// failed"), ran for minutes or was OOM-killed. Each is now `ChatError::Limit`, quickly.
    #[test]
    fn hostile_templates_hit_limits() {
        let msgs = [ChatMessage::new("user", "hi")];
        let cases = [
            ("indent", "{{ 'a\nb' | indent(1000000000000) }}"),
            ("indent kw", "{{ 'a\nb' | indent(width=1000000000000, first=true) }}"),
            ("batch", "{{ [1, 2] | batch(1000000000000) | list }}"),
            ("slice", "{{ [1, 2] | slice(1000000000000) | list }}"),
            ("format width", "{{ '%1000000000000d' | format(1) }}"),
            ("format precision", "{{ '%.1000000000000f' | format(1.5) }}"),
            ("tojson indent", "{{ {'a': [1, 2]} | tojson(indent=1000000000000) }}"),
            ("tojson indent pos", "{{ [[[[1]]]] | tojson(1000000000) }}"),
            ("list repetition", "{{ ([1] * 1000000000000) | list | length }}"),
            ("repetition join", "{{ (range(100000) * 100000) | join(',') }}"),
            ("repetition in", "{{ 7 in (range(100000) * 100000) }}"),
            (
                "string doubling",
                "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
            ),
            (
                "string doubling +",
                "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}",
            ),
            (
                "list doubling",
                "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | join }}",
            ),
            (
                "quadratic list",
                "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}{% endfor %}{{ ns.l | length }}",
            ),
            (
                "repeated big string joined",
                "{% set s = 'x' * 10000000 %}{{ ([s] * 1000) | join }}",
            ),
            ("replace empty", "{{ ('x' * 10000000) | replace('', 'yyyyyyyy') }}"),
            ("method replace empty", "{{ ('x' * 10000000).replace('', 'yyyyyyyy') }}"),
            (
                "method join",
                "{% set s = 'x' * 10000000 %}{{ ','.join([s, s, s, s, s]) }}",
            ),
            ("strftime", "{{ strftime_now('%B' * 10000000) }}"),
            ("pprint", "{% set s = 'x' * 10000000 %}{{ ([s] * 1000) | pprint }}"),
            ("string filter", "{% set s = 'x' * 10000000 %}{{ ([s] * 1000) | string | length }}"),
            ("tojson repeated", "{% set s = 'x' * 10000000 %}{{ ([s] * 1000) | tojson | length }}"),
        ];
        for (name, t) in cases {
            let start = std::time::Instant::now();
            let err = render_chat(t, &msgs, false, "", "").unwrap_err();
            assert!(
                matches!(err, ChatError::Limit(_)),
                "{name}: expected a limit, got {err}"
            );
            assert!(
                start.elapsed().as_secs() < 10,
                "{name}: took {:?}",
                start.elapsed()
            );
        }
        // The limits are per rendering: a normal template renders right after.
        let t = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";
        assert_eq!(
            render_chat(t, &msgs, false, "", "").unwrap(),
            "<|im_start|>user\nhi<|im_end|>\n"
        );
    }
}
