from ray_dspine.engines.embedded.detokenizer import IncrementalDetokenizer


class CharTokenizer:
    """One token per character: id = ord(char); 0 decodes to an incomplete-UTF-8 marker."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join("\ufffd" if i == 0 else chr(i) for i in ids)


def ids(text):
    return [ord(c) for c in text]


def test_rule_sends_only_new_text():
    d = IncrementalDetokenizer(CharTokenizer(), stop=[])
    assert d.push(ids("ab")) == "ab"
    assert d.push(ids("c")) == "c"


def test_rule_incomplete_utf8_is_held_back():
    d = IncrementalDetokenizer(CharTokenizer(), stop=[])
    assert d.push(ids("a") + [0]) == "a"


def test_rule_stop_string_cuts_output_and_finishes():
    d = IncrementalDetokenizer(CharTokenizer(), stop=["END"])
    # hold back len("END") - 1 = 2 characters until they cannot start a stop string
    assert d.push(ids("hello E")) == "hello"  # 7 chars, 2 held
    assert d.push(ids("N")) == " "  # 8 chars, 2 held: "EN" could still begin "END"
    assert d.push(ids("D more")) == ""  # "END" found at 6: the output is "hello " and ends
    assert d.stopped


def test_rule_stop_string_split_across_steps_is_never_sent():
    d = IncrementalDetokenizer(CharTokenizer(), stop=["##"])
    sent = d.push(ids("ab#"))
    sent += d.push(ids("#cd"))
    assert sent == "ab" and d.stopped


def test_final_push_flushes_held_text():
    d = IncrementalDetokenizer(CharTokenizer(), stop=["XYZ"])
    assert d.push(ids("abcd")) == "ab"
    assert d.push([], final=True) == "cd"
