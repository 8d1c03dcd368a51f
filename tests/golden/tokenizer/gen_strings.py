#!/usr/bin/env python3
"""Writes strings.json: the tokenizer test strings (run once; strings.json is the committed source)."""
import json

S = []
add = S.append

# ASCII prose
for s in [
    "Hello world! 123", "Hello, we can use", "The quick brown fox jumps over the lazy dog.",
    "Once upon a time, there was a little girl who lived in a village near the forest.",
    "SmolLM2 is a family of compact language models available in three sizes.",
    "What is the capital of France? Paris.", "HELLO WORLD", "hello world", "Hello World",
    "This is a test. This is only a test.", "e.g., i.e., etc., vs.", "Mr. Smith went to Washington D.C. in 1999.",
]: add(s)
# contractions
for s in [
    "it's", "don't", "we're", "I've", "I'm", "you'll", "he'd", "IT'S", "DON'T", "She'S", "WE'RE", "I'VE",
    "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "rock'n'roll", "O'Neil's book", "the dog's bone's",
    "''quoted''", "it''s", "'S 'T 'RE",
]: add(s)
# numbers
for n in range(1, 21):
    add("".join(str((i * 7 + 3) % 10) for i in range(n)))
for s in [
    "3.14159", "1,000,000", "-42", "0x1F", "1e-10", "2024-11-22", "12:30:45", "+1 (555) 123-4567",
    "v1.2.3", "100%", "$19.99", "€5,00", "½ cup", "x² + y²", "٣٤٥", "४२", "Ⅻ", "１２３", "1st 2nd 3rd 4th",
    "a1b2c3", "abc123def", " 123", "  456", "99 bottles", "1234567890 0987654321",
]: add(s)
# whitespace
for s in [
    " ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "a  b", "a   b",
    "a\tb", "a \t b", "trailing  ", "trailing\n", " leading", "  multiple   spaces", "line1\nline2",
    "\n\n\nx", "x\n\n\n", " \n ", "\t\t\tindent", "\u00a0nbsp", "\u3000ideographic space",
    "thin\u2009space", "a \n\n b", "end with tab\t", "   \t\n  mixed  \r\n\t ", "word \n",
]: add(s)
# code
for s in [
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "fn main() {\n    println!(\"Hello, {}!\", name);\n}\n",
    "const x = (a, b) => { return a ?? b; };",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }",
    "<div class=\"container\"><p>Hello &amp; welcome</p></div>",
    "{\"key\": [1, 2.5, true, null], \"nested\": {\"a\": \"b\"}}",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "for f in *.txt; do echo \"$f\"; done && ls -la | grep -v '^d'",
    "\\frac{a}{b} + \\sum_{i=0}^{n} x_i",
    "^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}$",
    "# Title\n\n- item 1\n- item 2\n\n```python\nprint('hi')\n```",
    "if (x != y && z == w) { a += b; } else { a -= b; }",
    "    indented_code = True\n        deeper = [i for i in range(10)]",
    "let v: Vec<u32> = vec![1, 2, 3];",
    "std::vector<std::string> v{\"a\", \"b\"};",
    "x=1;y=2;z=x<<2|y>>1",
    "/* comment */ // another\n-- sql comment",
    "public static void main(String[] args) throws IOException {}",
    "import numpy as np\narr = np.zeros((3, 4), dtype=np.float32)",
    "a_b_c __init__ __main__ snake_case CamelCase kebab-case",
]: add(s)
# emoji
for s in [
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸🇯🇵", "❤️", "I ❤️ NY", "1️⃣", "🧑🏿‍💻", "😀😃😄😁",
    "Hello 👋 world 🌍!", "🤖 robots", "👩🏻‍🔬 scientist", "✅ done ❌ failed", "🎉🎉🎉",
]: add(s)
# CJK and other scripts
for s in [
    "你好，世界！", "我喜欢学习中文。", "日本語のテキストです。", "カタカナとひらがな", "東京は日本の首都です",
    "안녕하세요 세계", "한국어 텍스트입니다.", "中文English混合text", "繁體中文字", "ｶﾀｶﾅ",
    "مرحبا بالعالم", "اللغة العربية جميلة", "שלום עולם", "בְּרֵאשִׁית", "नमस्ते दुनिया", "हिन्दी भाषा",
    "สวัสดีชาวโลก", "ภาษาไทย", "Привет, мир!", "Русский язык", "Γειά σου Κόσμε", "ελληνικά",
    "გამარჯობა", "Բարեւ", "வணக்கம்", "নমস্কার", "Tiếng Việt có dấu", "Zürich Straße Ångström façade",
    "Ñoño año", "İstanbul ıi", "Ελλάδα και Κύπρος 2024",
]: add(s)
# combining marks and unusual code points
for s in [
    "e\u0301", "n\u0303o", "a\u0308\u0304", "Z\u0351\u0308\u036b\u0303a\u0352l\u0300g\u0311o\u035b",
    "cafe\u0301", "\u0915\u094d\u0937", "\u200b", "a\u200bb", "\ufeffBOM", "\u200d", "\ufffd",
    "\ue000", "a\x00b", "\x07bell", "\x1b[31mred\x1b[0m", "\x7f", "\U0001d400\U0001d401",
]: add(s)
# math
for s in [
    "∑∫∂√∞≠≤≥", "x² + y² = z²", "α → β", "∀x∈ℝ: x² ≥ 0", "E = mc²", "π ≈ 3.14", "f(x) = ∫₀^∞ e^{-x} dx",
    "½ + ¼ = ¾", "°C ± 0.5", "™ © ®",
]: add(s)
# special tokens embedded (tested with and without special parsing)
for s in [
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>user\nHi there<|im_end|>\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n", "a<|endoftext|>b",
    "<|im_start|><|im_end|>", "text <|im_end|> text", " <|im_start|> spaced ", "<repo_name>tern<file_sep>src/lib.rs",
    "<jupyter_code>print(1)<jupyter_output>1", "<reponame><repo_name>", "<|endoftext|><|endoftext|>",
    "<issue_start>bug<issue_comment>fix<issue_closed>", "\n<|im_end|>\n", "<empty_output><filename><gh_stars>10",
]: add(s)
# almost special
for s in [
    "<|im_start|", "<|im_star|>", "|im_start|>", "< |im_end|>", "<|IM_END|>", "<|endoftext|", "<<|im_end|>>",
    "<|im_end|>>", "<reponame", "<|im_start|>>", "<| im_start |>", "<|im_start|><|im_start", "<|>", "<||>",
    "< | >", "<s>", "</s>", "[INST]",
]: add(s)
# edge cases
for s in [
    "", "a", ".", "'", "''", "'''", "\"", "?", "!!!!", "....", "----", "====", "____", "....!!!???",
    "a" * 64, "ab" * 40, "supercalifragilisticexpialidocious", "Pneumonoultramicroscopicsilicovolcanoconiosis",
]: add(s)
# mixed
for s in [
    "https://example.com/path?query=1&x=y#frag", "user.name+tag@example.co.uk", "#hashtag @mention",
    "/usr/local/bin/python3", "C:\\Users\\name\\file.txt", "key=value; other=thing",
    "Price: $1,234.56 (incl. 20% VAT)", "(parenthetical) [bracketed] {braced}", "« guillemets » „quotes“ ‘single’",
    "em—dash en–dash", "ellipsis… here", "tab\tseparated\tvalues", "comma,separated,values",
]: add(s)

assert len(S) == len(set(S)), [s for s in S if S.count(s) > 1]
json.dump(S, open("strings.json", "w"), ensure_ascii=False, indent=0)
print(len(S), "strings")
