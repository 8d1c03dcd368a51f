// The body of fuzz target `chat_template`, shared by fuzz/fuzz_targets/chat_template.rs (via
// include!) and the stable corpus replay in tests/tests/fuzz_regressions.rs.
//
// Structure-aware: the input picks a template built from pieces that size outputs — values
// (strings, lists, ranges, messages, repetitions), filters and operations with huge or ordinary
// arguments, loops that grow a value — so the fuzzer spends its time on the operations the
// template limits must bound, not on syntax errors. A first byte ≥ 0xF0 takes the rest as raw
// template text instead. The rendering must end (libFuzzer's -timeout) within the RSS limit
// (-rss_limit_mb) with a result or a typed error; a panic, an abort, an OOM or a hang is a finding.

const VALUES: [&str; 12] = [
    "'ab\\ncd'",
    "messages",
    "[1, 2, 3]",
    "range(100000)",
    "'x' * 1000000",
    "messages[0].content",
    "(range(1000) * 1000)",
    "{'a': [1, {'b': 'c'}]}",
    "([1] * 100000)",
    "namespace(a=1)",
    "'%s-%d'",
    "bos_token",
];

const ARGS: [&str; 8] = [
    "1000000000000",
    "4294967296",
    "1000000",
    "3",
    "0",
    "-1",
    "'x'",
    "true",
];

/// Filters; `#` is replaced by an argument.
const FILTERS: [&str; 24] = [
    "indent(#)",
    "indent(width=#, first=true, blank=true)",
    "batch(#)",
    "batch(#, 'f')",
    "slice(#)",
    "tojson(indent=#)",
    "tojson(#)",
    "tojson",
    "join(',')",
    "join",
    "list",
    "string",
    "pprint",
    "replace('', 'yyyy')",
    "replace('x', 'yyyyyyyy')",
    "format(#, #)",
    "sort",
    "unique",
    "reverse",
    "length",
    "upper",
    "title",
    "items",
    "urlencode",
];

/// Whole statements; `V` a value, `F` a filter, `A` an argument.
const SHAPES: [&str; 12] = [
    "{{ V | F }}",
    "{{ V | F | F }}",
    "{{ (V * A) | F }}",
    "{{ V ~ V }}",
    "{{ V + V }}",
    "{{ '%Ad' | format(1) }}{{ '%.Af' | format(1.5) }}",
    "{% set ns = namespace(s=V) %}{% for i in range(A) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | F }}",
    "{% set ns = namespace(l=[]) %}{% for i in range(A) %}{% set ns.l = ns.l + [i] %}{% endfor %}{{ ns.l | F }}",
    "{% set ns = namespace(l=[V]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | F }}",
    "{{ A in (V * A) }}",
    "{{ messages[0].content.replace('', V | string) }}{{ ','.join(V) }}",
    "{{ strftime_now('%B' * A) }}{{ V.strip().upper() }}",
];

fn pick<'a>(table: &[&'a str], b: Option<&u8>) -> &'a str {
    table[usize::from(b.copied().unwrap_or(0)) % table.len()]
}

/// The template `data` describes.
pub fn template(data: &[u8]) -> String {
    if data.first().is_some_and(|&b| b >= 0xF0) {
        return String::from_utf8_lossy(&data[1..]).into_owned();
    }
    let mut out = String::new();
    let mut it = data.iter();
    for _ in 0..4 {
        let Some(&shape) = it.next() else { break };
        let mut s = String::new();
        for c in pick(&SHAPES, Some(&shape)).chars() {
            match c {
                'V' => s.push_str(pick(&VALUES, it.next())),
                'F' => {
                    let f = pick(&FILTERS, it.next());
                    let arg = pick(&ARGS, it.next());
                    s.push_str(&f.replace('#', arg));
                }
                'A' => s.push_str(pick(&ARGS, it.next())),
                c => s.push(c),
            }
        }
        out.push_str(&s);
    }
    out
}

/// Render the template `data` describes for a short conversation; errors are fine.
pub fn run(data: &[u8]) {
    use tern_engine::chat::{render_chat, ChatMessage};
    let t = template(data);
    let msgs = [
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", "Hello  "),
        ChatMessage::new("assistant", "Hi"),
    ];
    let _ = render_chat(&t, &msgs, true, "<s>", "</s>");
}
