#!/usr/bin/python3
"""Writes tests/tokenizer/data/unicode_stress.txt and invalid_utf8.bin: text that exercises
every branch of the pre-tokenizers (scripts, marks, digits, whitespace kinds, contractions,
long runs, special-token spellings, code). Deterministic; rerun to regenerate."""
import os
import random

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "tokenizer", "data")

SCRIPTS = [
    "Grüße aus Köln, façade, naïve, Ærøskøbing, Łódź, Şişli, Ğ ğ İ ı, ß ẞ, ǅ ǈ ǋ (titlecase)",
    "Ελληνικά: Καλημέρα κόσμε, ΆΈΉ ά έ ή ΐ ς σ Σ",
    "Русский: Съешь же ещё этих мягких французских булок, да выпей чаю. Українська: ґ є ї",
    "Հայերեն՝ Բարեւ աշխարհ։ ქართული: გამარჯობა მსოფლიო",
    "עברית: שָׁלוֹם עוֹלָם, בְּרֵאשִׁית (niqqud marks)",
    "العربية: مَرْحَبًا بِالْعَالَمِ، كيف الحال؟ ٠١٢٣٤٥٦٧٨٩ ۰۱۲۳ (Arabic-Indic digits)",
    "हिन्दी: नमस्ते दुनिया, क्षत्रिय, ०१२३४५६७८९ । বাংলা: আমার সোনার বাংলা ০১২৩",
    "தமிழ்: வணக்கம் உலகம் ௧௨௩ తెలుగు: నమస్కారం ಕನ್ನಡ: ನಮಸ್ಕಾರ മലയാളം: നമസ്കാരം",
    "ไทย: สวัสดีชาวโลก ๑๒๓๔ ລາວ: ສະບາຍດີ ໑໒໓ ខ្មែរ: សួស្តី ពិភពលោក ១២៣ မြန်မာ: မင်္ဂလာပါ ၁၂၃",
    "བོད་ཡིག་: བཀྲ་ཤིས་བདེ་ལེགས། ༡༢༣ ᠮᠣᠩᠭᠣᠯ ᠪᠢᠴᠢᠭ Mongolian ᠑᠒᠓",
    "አማርኛ: ሰላም ለዓለም ፩፪፫ ᏣᎳᎩ Cherokee ᎠᎡᎢ ᐃᓄᒃᑎᑐᑦ Inuktitut",
    "한국어: 안녕하세요 세계, 한글 자모 ᄒᆞᆫ ㄱㄴㄷ, 가나다라마바사 〈괄호〉",
    "日本語: こんにちは世界、カタカナ、ｶﾀｶﾅ（半角）、漢字「引用」。ー〜・",
    "中文: 你好，世界！我们在测试分词器。繁體字：龍龜鬱。Ext-B: 𠀀𠀁𪚥 𩸽",
    "Math: 𝐀𝐁𝐂 𝑎𝑏𝑐 𝔸𝔹ℂ ∀x∈ℝ: x²≥0, ∑ᵢ₌₁ⁿ i = n(n+1)/2, √2 ≈ 1.414, π≈3.14159, ∞ ≠ ∅",
    "Symbols: © ® ™ § ¶ † ‡ • … ‰ ′ ″ ‹ › « » „ “ ” ‘ ’ ‚ ¿ ¡ € £ ¥ ₹ ₿ ¢ ° ± × ÷",
    "Arrows and boxes: ← ↑ → ↓ ↔ ⇒ ⇔ ─│┌┐└┘├┤┬┴┼ ░▒▓█ ■□▪▫ ★☆ ♠♣♥♦ ♪♫ ☀☁☂ ✓✗",
]
EMOJI = [
    "😀😃😄😁 👍🏽👍🏿 👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 🏴‍☠️ ❤️ ❤️‍🔥 🇺🇸🇯🇵🇩🇪 1️⃣ #️⃣ *️⃣ 🧑🏻‍🤝‍🧑🏾",
    "🦙.cpp 🤗 transformers 🚀🚀🚀 emoji-in-identifiers: café_☕ = 1",
]
MARKS = [
    "e\u0301 vs é, A\u030a vs Å, n\u0303 vs ñ, o\u0308\u0304 vs ȫ, \u1112\u1161\u11ab vs 한",
    "Z\u0351\u0346\u036ba\u0352\u0350l\u0313g\u0357o\u0300\u0301\u0302 t\u0336e\u0336x\u0336t\u0336",
    "combining at start: \u0301abc, \u0308 alone, a\u20dd enclosed, ↑\u20e3",
    "Vietnamese: Tiếng Việt có dấu: ạ ả ấ ầ ẩ ẫ ậ ắ ằ ẳ ẵ ặ ẹ ẻ ẽ ế ề ể ễ ệ",
    "Devanagari marks: कि की कु कू कृ के कै को कौ कं कः क्",
    "NFD Hangul: \u1100\u1161\u1102\u1161\u1103\u1161 NFD Latin: Cafe\u0301 re\u0301sume\u0301",
    "compatibility: ﬁ ﬂ ﬀ ㎏ ㍻ Ⅻ ⅻ ① ⑳ ½ ¾ ⅓ ² ³ ¹ ₀₁₂",
]
DIGITS = [
    "0123456789 12 123 1234 12345 123456 1234567 3.14159 1,000,000 1e-10 0xFF 0b1010 1_000",
    "fullwidth １２３４５ arabic ٤٥٦ persian ۴۵۶ devanagari ४५६ bengali ৪৫৬ thai ๔๕๖",
    "math digits 𝟎𝟏𝟐𝟑 𝟘𝟙𝟚 roman ⅠⅡⅢⅣ Ⅿ circled ⓵⓶ ❶❷ superscripts ⁰¹²³⁴ fractions ⅛⅜",
    "v1.2.3-rc4+build.5 2024-01-15T12:34:56Z 192.168.0.1:8080 $1,234.56 -42 +7 100%",
]
SPACES = [
    "nbsp:\u00a0x\u00a0\u00a0y  ogham:\u1680z en:\u2002quad:\u2000thin:\u2009hair:\u200a.",
    "line sep:\u2028para sep:\u2029narrow:\u202fmath:\u205fideo:\u3000\u3000end",
    "nel:\u0085vt:\u000bff:\u000cafter  zwsp:\u200bzwj:\u200dzwnj:\u200cbom:\ufeffword",
    "tabs\tand\t\ttabs\t \t mixed \t\n\ttabbed line\n",
    "crlf line 1\r\ncrlf line 2\r\n\r\nlone cr\rafter cr\r\r\n \r\n  \n \n",
    "trailing spaces   \nspaces before newline  \n\n\n   \n\t\n   indented\n",
    "a \u00a0b\u00a0 c  \u3000 d\u2028\u2028e \u2029 f",
]
CONTRACTIONS = [
    "I'm you'll it's we've they're he'd don't can't won't ISN'T I'M YOU'LL IT'S WE'VE THEY'RE",
    "HE'D DON'T 'S 'T 'RE 'VE 'M 'LL 'D 'Ll 'lL 'Re 'rE 'vE 'Ve 'x 'ſ 'ſs it'ſ",
    "curly: it’s I’m ‘quoted’ “double” ''s '''ll ' s 'l l 'd'd's 'ss 'll's",
    "x's y'S 1's 2'D _'ll\n'M\t'VE 'é 'ü 'Ø",
]
SPECIAL_LIKE = [
    "<|endoftext|> <fim_prefix>x<fim_suffix>y<fim_middle> <fim_pad> <|fim_prefix|>a<|fim_suffix|>",
    "b<|fim_middle|> <|fim_pad|> <|repo_name|> <|file_sep|> <｜fim▁begin｜>c<｜fim▁hole｜>d<｜fim▁end｜>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|> hi<|eot_id|> <|im_start|>x<|im_end|>",
    "<think>reasoning</think> <tool_call>{}</tool_call> [PAD32022] õ÷Á <pad> <|EOT|> <PRE> <SUF> <MID>",
    "<|endoftext|><|endoftext|>  <|endoftext|>\n<|endoftext|>x <<|endoftext|>> <|endoftext|",
    "<｜begin▁of▁sentence｜> <｜end▁of▁sentence｜> <issue_start> <jupyter_code> <reponame> <filename>",
]
CODE = [
    '''def fibonacci(n: int) -> list[int]:
    """Return the first n Fibonacci numbers."""
    a, b = 0, 1
    out = []
    for _ in range(n):
        out.append(a)
        a, b = b, a + b
    return out


class Café:  # unicode identifier
    def __init__(self, größe=3):
        self.größe = größe
        self.π = 3.14159
''',
    '''#include <vector>
template <typename T> T sum(const std::vector<T>& v) {
  T s{}; for (auto& x : v) s += x;  // accumulate
  return s;
}
int main() { std::printf("%d\\n", sum<int>({1, 2, 3})); return 0; }
''',
    '''const re = /(?:'s|'t)|\\p{L}+/gu; let x = a?.b ?? c; x >>>= 2; y **= 3; `${tpl}`;
fn main() { let v: Vec<u8> = vec![0; 1024]; println!("{:?}", &v[..4]); }
<div class="x" data-id='7'>&amp; &lt;tag&gt; &#x1F600;</div>
{"key": [1, 2.5, null, true], "nested": {"a": "b\\u00e9"}}
SELECT * FROM t WHERE a <> 'x' AND b >= 10; -- comment
for f in *.py; do echo "$f" | sed -e 's/\\.py$//' ; done 2>&1 >/dev/null
''',
]


def long_runs(rng):
    parts = [
        " " * 200 + "x", "\t" * 50, "\n" * 30, "1234567890" * 20, "!" * 120, "=" * 80,
        "-" * 64 + ">", "." * 33, "_" * 40 + "name", "  " * 17 + "\n" * 3 + "  " * 5,
        "\u00a0" * 40, "\u3000" * 10 + "全角", "a" * 300, "ab" * 150, "😀" * 50, "é" * 64,
        "e\u0301" * 30, "٣" * 20, " 1 2 3 4 5 6 7 8 9 10 11 12 13", "''''''''''''",
        "\r\n" * 20, " \n" * 20, "\t \n" * 10, "ℕ" * 9,
    ]
    # Random mixtures of the classes the regexes distinguish.
    alphabet = ["a", "Z", " ", "  ", "\n", "\r\n", "\t", "1", "٣", "'", "'s", "'LL", "!", ".",
                "(", "é", "e\u0301", "中", "한", "😀", "\u00a0", "\u3000", "_", "-", "$"]
    for _ in range(40):
        parts.append("".join(rng.choice(alphabet) for _ in range(rng.randint(5, 60))))
    return parts


def main():
    rng = random.Random(1234)
    sections = SCRIPTS + EMOJI + MARKS + DIGITS + SPACES + CONTRACTIONS + SPECIAL_LIKE + CODE
    sections += long_runs(rng)
    text = "\n".join(sections) + "\n"
    with open(os.path.join(OUT, "unicode_stress.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(text)
    invalid = (b"valid \xc3\xa9 then lone continuation \x80 and \xbf\xbf, overlong \xc0\xaf "
               b"\xe0\x80\xaf, surrogate \xed\xa0\x80, too big \xf4\x90\x80\x80 \xf5\xff, "
               b"truncated \xe2\x82 x \xf0\x9f\x98 y \xc3, end\n"
               b"mixed \xe4\xb8\xad\xe6\x96 \xe6\x96\x87 latin-1 caf\xe9 na\xefve\n\xe2")
    with open(os.path.join(OUT, "invalid_utf8.bin"), "wb") as f:
        f.write(invalid)


if __name__ == "__main__":
    main()
