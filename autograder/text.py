"""Text from outside the grader, made safe to write anywhere.

Strings reach the grader from the worker (messages, exception types, parameter names), from
submissions (file and folder names, notebook text) and from export metadata (names, emails).
JSON and Linux file names can carry lone surrogates, which no UTF-8 file or SQLite row accepts,
and control characters, which garble terminals and pages. Every such string is passed through
clean() where it enters the trusted side, and results.json is cleaned once more as it is written.
"""
import re
import unicodedata

# C0 and C1 control characters except tab and newline, and DEL.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Invisible characters that reorder or hide what is shown ("Trojan Source"): every format
# character (Unicode category Cf: bidirectional marks, embeddings, overrides and isolates,
# zero-width space, word joiner, invisible operators, BOM, interlinear annotations, the tag
# characters that carry hidden ASCII...) but the zero-width joiner and non-joiner, which scripts
# and emoji need and which hide nothing. Also the marks and blanks that show nothing yet are not
# spaces: combining grapheme joiner, Hangul fillers, Khmer inherent vowels, braille blank.
# Variation selectors stay: emoji need them. tests/test_feedback_render.py checks the Cf part
# against Python's Unicode database.
_INVISIBLE = re.compile("[\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160"
                        "\u17b4\u17b5\u180e\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f"
                        "\u2800\u3164\ufeff\uffa0\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
                        "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e007f]")
_SEPARATOR = re.compile("[\u2028\u2029]")  # line and paragraph separators: a newline, shown as one
_SURROGATE = re.compile(r"[\ud800-\udfff]")  # a str's code points: any surrogate here is a lone one


def clean(text):
    """`text` as valid Unicode without control or invisible reordering characters: a lone
    surrogate becomes U+FFFD, a carriage return or a line separator a newline, any other control
    character (tab and newline kept) or bidirectional or zero-width mark is removed."""
    if not isinstance(text, str):
        text = str(text)
    if text.isascii() and text.isprintable():
        return text
    text = _INVISIBLE.sub("", _SURROGATE.sub("\ufffd", text))
    text = _SEPARATOR.sub("\n", text.replace("\r\n", "\n").replace("\r", "\n"))
    return _CONTROL.sub("", text)


def composed(text):
    """`text` in Unicode's composed form (NFC): macOS writes `josé` decomposed (e + U+0301),
    Linux, Windows and keyboards composed, and both must be one name."""
    return unicodedata.normalize("NFC", text)


def clean_line(text):
    """clean(text) on one line: newlines and tabs become spaces (a key or a name that must fit a
    row, a cell or a file name)."""
    return re.sub(r"[\n\t]", " ", clean(text))


def json_needs_cleaning(raw):
    """Whether JSON text (bytes) can decode to a string that clean() would change. A string in
    JSON holds a control character or a surrogate only through an escape (a backslash) or bytes
    outside printable ASCII, so text with neither decodes to clean strings: clean_tree can be
    skipped, as it is for almost every reply of the worker."""
    return b"\\" in raw or not raw.isascii() or b"\x7f" in raw


def clean_tree(value):
    """clean() applied to every string of a JSON-like value; a key clean() would change is escaped
    instead (`\\u200b`, _clean_key): two keys that differ only by what clean() takes away (a name
    with a zero-width space beside the same name without it) stay two keys, neither hiding the other."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {_clean_key(k): clean_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_tree(v) for v in value]
    return value


def _clean_key(key):
    """The key, or, where clean() would change it or it holds a backslash, its escaped form: an
    escaped form always holds a backslash and comes from one key alone, so no two keys meet."""
    if not isinstance(key, str) or ("\\" not in key and clean(key) == key):
        return key
    return key.encode("unicode_escape", "backslashreplace").decode("ascii")
