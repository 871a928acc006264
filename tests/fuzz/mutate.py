"""Seeded mutations of the inputs moplace reads: text, JSON trees, TOML and argv lists.

Every mutation is a pure function of (its input, a `random.Random`): the same seed text and the
same rng state give the same output, so a failing input can be made again from its seed and id.
Text mutations work on bytes (some of them insert bytes that are not UTF-8).
"""

from __future__ import annotations

import json
import re

#: an integer past Python's 4,300-digit limit on decimal conversion: int() of its text raises,
#: and so does str() of the number (an error message that shows it must not)
LONG_INT = "1" + "0" * 4999
#: TOML reads hexadecimal of any length: a 4,817-digit number that parses, then cannot be shown
LONG_HEX = "0x" + "f" * 4000

# number tokens that break parsers: huge, overflowing, not numbers, non-ASCII digits, Python-only
# spellings ("" is an empty string token)
NUMBER_JUNK = ["1e308", "-1e308", "1e999", "1" + "0" * 40, "nan", "inf", "-1", "0", "", "\u00b2",
               "\u0661\u0662", "0x10", "1_000", LONG_INT]

# raw JSON texts a leaf may become (written verbatim into the dumped document)
JSON_RAW = ["1e308", "-1e308", "1e999", "1" + "0" * 40, "-" + "1" + "0" * 40, "NaN", "Infinity",
            "-Infinity", "-1", "0", "-0", "0.5", '""', '"\u00b2"', '"\u0661\u0662"', '"0x10"',
            '"1_000"', '"nan"', '"inf"', '"-1"', "[]", "{}", "null", "true", "false", '"x"',
            "[1, 2]", '{"a": 1}', '"' + "x" * 3000 + '"', '"\\u0000"', '"\\ud800"', LONG_INT,
            "-" + LONG_INT, "[" + LONG_INT + "]", "[" * 900 + "]" * 900]

_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_RAW = "\u0000RAW{}\u0000"  # placeholder strings replaced by raw JSON text after dumping


# -- text (bytes) -------------------------------------------------------------------------------
def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def flip_bytes(data: bytes, rng) -> bytes:
    if not data:
        return bytes([rng.randrange(256)])
    buf = bytearray(data)
    for _ in range(rng.choice([1, 1, 2, 4, 16])):
        k = rng.randrange(len(buf))
        buf[k] = buf[k] ^ (1 << rng.randrange(8)) if rng.random() < 0.7 else rng.randrange(256)
    return bytes(buf)


def insert_non_utf8(data: bytes, rng) -> bytes:
    k = rng.randrange(len(data) + 1)
    junk = rng.choice([b"\xff\xfe", "\u00e9".encode("latin-1"), b"\x80", b"\xc3", b"\x00"])
    return data[:k] + junk + data[k:]


def drop_line(data: bytes, rng) -> bytes:
    lines = _lines(data)
    del lines[rng.randrange(len(lines))]
    return b"\n".join(lines)


def repeat_line(data: bytes, rng) -> bytes:
    lines = _lines(data)
    k = rng.randrange(len(lines))
    lines[k:k + 1] = [lines[k]] * 2
    return b"\n".join(lines)


def repeat_line_many(data: bytes, rng) -> bytes:
    lines = _lines(data)
    k = rng.randrange(len(lines))
    lines[k:k + 1] = [lines[k]] * rng.choice([50, 500, 5000])
    return b"\n".join(lines)


def swap_lines(data: bytes, rng) -> bytes:
    lines = _lines(data)
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    lines[i], lines[j] = lines[j], lines[i]
    return b"\n".join(lines)


def truncate(data: bytes, rng) -> bytes:
    return data[:rng.randrange(len(data) + 1)]


def replace_number(data: bytes, rng) -> bytes:
    return _replace_one_number(data, rng, NUMBER_JUNK, insert_non_utf8)


def _replace_one_number(data: bytes, rng, junk, otherwise) -> bytes:
    """One number token of ``data`` becomes one of ``junk`` (``otherwise`` without numbers)."""
    found = list(_NUMBER.finditer(data))
    if not found:
        return otherwise(data, rng)
    m = rng.choice(found)
    return data[:m.start()] + rng.choice(junk).encode() + data[m.end():]


def replace_all_numbers(data: bytes, rng) -> bytes:
    """Every number token becomes the same junk value (a whole column goes bad at once)."""
    junk = rng.choice(NUMBER_JUNK).encode()
    return _NUMBER.sub(lambda m: junk, data)


_WORD = re.compile(rb"[A-Za-z_][A-Za-z0-9_/.]*")


def copy_token(data: bytes, rng) -> bytes:
    """A word becomes another word of the file (an edge's end another node: cycles, self-loops,
    duplicate names)."""
    found = list(_WORD.finditer(data))
    if len(found) < 2:
        return flip_bytes(data, rng)
    m, other = rng.choice(found), rng.choice(found)
    return data[:m.start()] + other.group(0) + data[m.end():]


# weighted: a function listed twice is drawn twice as often
TEXT_MUTATIONS = [flip_bytes, insert_non_utf8, drop_line, repeat_line, repeat_line_many,
                  swap_lines, truncate, replace_number, replace_number, replace_number,
                  replace_all_numbers, copy_token, copy_token]

#: numbers as Python source: a model file that still parses, with sizes that do not make sense
PY_NUMBERS = ["0", "-1", "-64", "3.5", "10**9", "2**40", "1e308", "float('nan')", "True",
              "None", "'x'", "7", "1" + "0" * 30]


def replace_number_python(data: bytes, rng) -> bytes:
    """One number of a Python file becomes another valid Python expression."""
    return _replace_one_number(data, rng, PY_NUMBERS, copy_token)


# a model file mostly stays Python (most text mutations are syntax errors, a line each)
PYTHON_MUTATIONS = [replace_number_python, replace_number_python, replace_number_python,
                    replace_number_python, copy_token, copy_token, drop_line, swap_lines,
                    repeat_line, flip_bytes, truncate]


# -- JSON trees ---------------------------------------------------------------------------------
def _paths(tree, prefix=()):
    """Every path (tuple of keys / indices) into ``tree``, the root included."""
    out = [prefix]
    if isinstance(tree, dict):
        for k, v in tree.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(tree, list):
        for k, v in enumerate(tree):
            out += _paths(v, prefix + (k,))
    return out


def _get(tree, path):
    for k in path:
        tree = tree[k]
    return tree


def _set(tree, path, value):
    if not path:
        return value
    _get(tree, path[:-1])[path[-1]] = value
    return tree


def _pick(rng, paths, pred):
    chosen = [p for p in paths if pred(p)]
    return rng.choice(chosen) if chosen else None


class _Tree:
    """A parsed document being mutated, with the raw texts its placeholders stand for."""

    def __init__(self, tree):
        self.tree, self.raw = tree, []

    def placeholder(self, text: str) -> str:
        self.raw.append(text)
        return _RAW.format(len(self.raw) - 1)

    def dump(self, rng) -> bytes:
        text = json.dumps(self.tree, allow_nan=True, indent=rng.choice([None, 1]),
                          ensure_ascii=rng.random() < 0.5)
        for k, raw in enumerate(self.raw):  # placeholders were dumped as JSON strings
            marker = json.dumps(_RAW.format(k), ensure_ascii=False)
            plain = json.dumps(_RAW.format(k))
            if raw.startswith("[" * 100):
                # deep nesting once: a duplicated element shares its placeholder, and 2,000
                # copies of a list 900 deep would be 2 million lists (a slow parse, no bug)
                once = marker if marker in text else plain
                text = text.replace(once, raw, 1).replace(marker, "[]").replace(plain, "[]")
                continue
            text = text.replace(marker, raw).replace(plain, raw)
        return text.encode("utf-8", "surrogatepass")


def _leaf_value(doc: _Tree, rng):
    kind = rng.random()
    if kind < 0.6:
        return doc.placeholder(rng.choice(JSON_RAW))
    return rng.choice([[], {}, None, True, False, "x", 10**40, float("nan"), float("inf"),
                       -float("inf"), [0], {"x": 0}, 3.5, -7])


def replace_leaf(doc: _Tree, rng) -> None:
    paths = _paths(doc.tree)
    path = _pick(rng, paths, lambda p: p and not isinstance(_get(doc.tree, p), (dict, list)))
    path = path if path is not None else rng.choice(paths)
    doc.tree = _set(doc.tree, path, _leaf_value(doc, rng))


def replace_node(doc: _Tree, rng) -> None:
    """Any node, containers and the root included, becomes a value of another kind."""
    doc.tree = _set(doc.tree, rng.choice(_paths(doc.tree)), _leaf_value(doc, rng))


def delete_key(doc: _Tree, rng) -> None:
    path = _pick(rng, _paths(doc.tree), lambda p: p and isinstance(p[-1], str))
    if path is None:
        return replace_node(doc, rng)
    del _get(doc.tree, path[:-1])[path[-1]]


def duplicate_element(doc: _Tree, rng) -> None:
    path = _pick(rng, _paths(doc.tree), lambda p: isinstance(_get(doc.tree, p), list)
                 and _get(doc.tree, p))
    if path is None:
        return replace_node(doc, rng)
    items = _get(doc.tree, path)
    k = rng.randrange(len(items))
    size = len(json.dumps(items[k], default=str))  # keep the document under ~1 MB
    items[k:k + 1] = [items[k]] * min(rng.choice([2, 100, 2000]), max(2, 1_000_000 // size))


def wrap_in_list(doc: _Tree, rng) -> None:
    path = _pick(rng, _paths(doc.tree), bool)
    if path is None:
        return replace_node(doc, rng)
    doc.tree = _set(doc.tree, path, [_get(doc.tree, path)])


_EDGE_ENDS = ("src", "dst", "sourceId", "destId", "devices", "from", "to")


def edge_end_list(doc: _Tree, rng) -> None:
    """An edge end (src/dst/sourceId/destId, a split's device) becomes a list or another type."""
    path = _pick(rng, _paths(doc.tree), lambda p: p and p[-1] in _EDGE_ENDS)
    if path is None:
        return replace_leaf(doc, rng)
    value = _get(doc.tree, path)
    doc.tree = _set(doc.tree, path, rng.choice([[value], [value, value], [], {"id": value},
                                                 None, str(value) + "x", 10**40, -1]))


def deep_nesting(doc: _Tree, rng) -> None:
    # 900: json reads it (under the recursion limit: 1,000, or 3,000 once TensorFlow is
    # loaded), then what reads the document must not recurse or show it whole
    depth = rng.choice([900, 10_000, 100_000])
    doc.tree = _set(doc.tree, rng.choice(_paths(doc.tree)),
                    doc.placeholder("[" * depth + "]" * depth))


def rename_key(doc: _Tree, rng) -> None:
    path = _pick(rng, _paths(doc.tree), lambda p: p and isinstance(p[-1], str))
    if path is None:
        return replace_node(doc, rng)
    parent = _get(doc.tree, path[:-1])
    parent[rng.choice(["", "x", path[-1].upper(), path[-1] + " ", "\u00e9", LONG_INT, "x" * 5000])] \
        = parent.pop(path[-1])


def add_key(doc: _Tree, rng) -> None:
    path = _pick(rng, _paths(doc.tree), lambda p: isinstance(_get(doc.tree, p), dict))
    if path is None:
        return replace_node(doc, rng)
    _get(doc.tree, path)[rng.choice(["nosuch", "", "__proto__", "format"])] = _leaf_value(doc, rng)


def copy_value(doc: _Tree, rng) -> None:
    """A leaf takes the value of another leaf (names collide, an edge ends where it starts)."""
    paths = [p for p in _paths(doc.tree) if p and not isinstance(_get(doc.tree, p), (dict, list))]
    if len(paths) < 2:
        return replace_node(doc, rng)
    src = rng.choice(paths)
    same_key = [p for p in paths if p[-1] == src[-1] and p != src]  # e.g. one "dst" to another
    dst = rng.choice(same_key if same_key and rng.random() < 0.7 else paths)
    doc.tree = _set(doc.tree, dst, _get(doc.tree, src))


JSON_MUTATIONS = [replace_leaf, replace_leaf, replace_leaf, replace_node, delete_key, delete_key,
                  duplicate_element, wrap_in_list, edge_end_list, edge_end_list, deep_nesting,
                  rename_key, add_key, copy_value, copy_value, copy_value]


def mutate_json(seed: bytes, rng, steps: int | None = None) -> tuple[bytes, list[str]]:
    """Parse ``seed``, apply 1-3 tree mutations, dump it back (NaN/Infinity allowed)."""
    doc = _Tree(json.loads(seed))
    names = []
    for _ in range(steps or rng.choice([1, 1, 1, 2, 3])):
        fn = rng.choice(JSON_MUTATIONS)
        fn(doc, rng)
        names.append(fn.__name__)
    return doc.dump(rng), names


# -- TOML ---------------------------------------------------------------------------------------
_TOML_KEYS = re.compile(rb"(?m)^(\s*(count|repeat|memory|bandwidth|latency|speed)\s*=\s*)(.*)$")
TOML_JUNK = ["1000000000", "1" + "0" * 40, "-1", "0", "nan", "inf", "-inf", "1e400", "0.5",
             '"1e40GB/s"', '"-1GiB"', '"nanGB/s"', '"0GB/s"', '"infGiB"', '"1e999us"', '""',
             '"16 GiB"', '"\u0661\u0662GB/s"', "true", "[]", "{}", '"1000000000GiB"', LONG_INT,
             LONG_HEX, f"[1, {LONG_HEX}]", f"{{x = {LONG_HEX}}}"]


def replace_toml_value(data: bytes, rng) -> bytes:
    found = list(_TOML_KEYS.finditer(data))
    if not found:
        return replace_number(data, rng)
    m = rng.choice(found)
    if m.group(2) in (b"count", b"repeat") and rng.random() < 0.5:
        junk = rng.choice(["1000000000", "1" + "0" * 40, "-1", "0", "100000"])
    else:
        junk = rng.choice(TOML_JUNK)
    return data[:m.start(3)] + junk.encode() + data[m.end(3):]


_TOML_VALUE = re.compile(rb"(?m)^(\s*[A-Za-z_][A-Za-z0-9_-]*\s*=\s*)(.*)$")


def _toml_value_at(data: bytes, rng, value: bytes) -> bytes:
    """Any ``key = value`` line of ``data`` (name, label, sharing too) gets ``value``."""
    found = list(_TOML_VALUE.finditer(data))
    if not found:
        return data + b"\nx = " + value + b"\n"
    m = rng.choice(found)
    return data[:m.start(2)] + value + data[m.end(2):]


def deep_toml_nesting(data: bytes, rng) -> bytes:
    """A value becomes arrays or inline tables nested deep (tomllib recurses once a level)."""
    depth = rng.choice([100, 1000, 5000])
    if rng.random() < 0.5:
        value = "[" * depth + "1" + "]" * depth
    else:
        value = "{a = " * depth + "1" + "}" * depth
    return _toml_value_at(data, rng, value.encode())


def huge_toml_integer(data: bytes, rng) -> bytes:
    """A value becomes an integer over 4,300 digits: decimal (tomllib's int() raises), or
    hexadecimal (it parses; showing it in a message must not raise), alone or in an array."""
    value = rng.choice([LONG_INT, "-" + LONG_INT, LONG_HEX, f"[{LONG_HEX}]", f"[1, {LONG_HEX}]",
                        f"{{x = {LONG_HEX}}}", "1_" + "0" * 4999])
    return _toml_value_at(data, rng, value.encode())


TOML_MUTATIONS = TEXT_MUTATIONS + [replace_toml_value] * 6 + [deep_toml_nesting, huge_toml_integer]


def mutate_text(seed: bytes, rng, table=None, steps: int | None = None) -> tuple[bytes, list[str]]:
    """Apply 1-3 text mutations of ``table`` (default: `TEXT_MUTATIONS`) to ``seed``."""
    table = table or TEXT_MUTATIONS
    names = []
    for _ in range(steps or rng.choice([1, 1, 1, 2, 3])):
        fn = rng.choice(table)
        seed = fn(seed, rng)
        names.append(fn.__name__)
    return seed, names


# -- argv ---------------------------------------------------------------------------------------
def argv_junk(existing_file: str) -> list[str]:
    """Values a command-line token may be swapped for."""
    return NUMBER_JUNK + ["nosuch", "pipedream:nosuch", "dnn:nosuch", "dnn:", "pipedream:",
                          "/proc/nope", "/dev/null", existing_file, "-", "--", "=", "a=b", "x=",
                          "=1", "x" * 5000, "nul\x00byte", "\u00e9", "--json", "--point",
                          "-5", "99", "0s", "-1s", "1e-9s", "1.5.5s", "pop_size=1e400"]


def mutate_argv(argv: list[str], rng, junk: list[str]) -> tuple[list[str], list[str]]:
    """1-2 of: drop a token, duplicate a token, swap a token for junk, swap two tokens."""
    argv, names = list(argv), []
    for _ in range(rng.choice([1, 1, 2])):
        k = rng.randrange(1, len(argv)) if len(argv) > 1 else 0  # keep the subcommand mostly
        op = rng.choice(["drop", "duplicate", "junk", "junk", "junk", "swap"])
        if op == "drop":
            del argv[k]
        elif op == "duplicate":
            argv.insert(k, argv[k])
        elif op == "junk":
            argv[k] = rng.choice(junk)
        else:
            j = rng.randrange(len(argv))
            argv[k], argv[j] = argv[j], argv[k]
        names.append(op)
        if not argv:
            break
    return argv, names
