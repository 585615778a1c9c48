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


def test_rule_stop_at_searches_a_push_of_several_tokens_token_by_token():
    d = IncrementalDetokenizer(CharTokenizer(), stop=[], stop_regex=["END$"])
    # the whole push "xEND yz" does not end with END; its 4-token prefix does: 4 of the 7 tokens are kept
    assert d.push(ids("xEND yz")) == "xEND"
    assert d.stopped and d.kept == 4


def test_rule_stop_at_the_earliest_stop_of_a_push_wins():
    d = IncrementalDetokenizer(CharTokenizer(), stop=["yy", "x"])
    assert d.push(ids("axbyy")) == "a" and d.kept == 2


def test_rule_cut_keep_stop_keeps_the_stop_string_and_holds_nothing_back():
    d = IncrementalDetokenizer(CharTokenizer(), stop=["END"], keep_stop=True)
    assert d.push(ids("hello E")) == "hello E"  # nothing held: the cut never removes text before the stop
    assert d.push(ids("ND more")) == "ND" and d.kept == 2


def test_rule_cut_a_pattern_keeps_its_match_unless_its_own_text_is_there():
    d = IncrementalDetokenizer(CharTokenizer(), stop=[], stop_regex=[r"\d{3}"])
    # hold back len(r"\d{3}") - 1 = 4 characters: the pattern's own text would be cut
    assert d.push(ids("abc 12 3")) == "abc "  # 8 characters, 4 held
    assert d.push(ids("45 tail")) == "12 345" and d.kept == 2
    d = IncrementalDetokenizer(CharTokenizer(), stop=[], stop_regex=["END"])
    assert d.push(ids("say END now")) == "say " and d.kept == 7
    d = IncrementalDetokenizer(CharTokenizer(), stop=["B"], stop_regex=["AB"])
    assert d.push(ids("xAByy")) == "xA" and d.kept == 3  # the stop string beats the pattern at the same token


class PairTokenizer(CharTokenizer):
    """As CharTokenizer, but id 1000 decodes to the two characters "ab"."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join("ab" if i == 1000 else super(PairTokenizer, self).decode([i]) for i in ids)


def test_rule_cut_two_stop_strings_at_the_same_place_go_by_the_requests_order():
    # one token completes both "ab" and "a", each starting at 0: the request's first listed wins
    for stop in (["ab", "a"], ["a", "ab"]):
        d = IncrementalDetokenizer(PairTokenizer(), stop=stop, keep_stop=True)
        assert d.push([1000, ord("c")]) == stop[0] and d.kept == 1 and d.matched == stop[0]


def test_rule_matched_names_the_stop_string_or_the_pattern():
    d = IncrementalDetokenizer(CharTokenizer(), stop=["yy", "x"])
    d.push(ids("axbyy"))
    assert d.matched == "x"  # the stop it is cut at, not the first listed
    d = IncrementalDetokenizer(CharTokenizer(), stop=["B"], stop_regex=["AB", r"\d"])
    d.push(ids("xA9"))
    assert d.matched == r"\d"  # no stop string in the text: the pattern as given
    d = IncrementalDetokenizer(CharTokenizer(), stop=["B"], stop_regex=["AB"])
    d.push(ids("xAByy"))
    assert d.matched == "B"  # the stop string beats the pattern at the same token
    d = IncrementalDetokenizer(CharTokenizer(), stop=["Q"])
    d.push(ids("abc"), final=True)
    assert d.matched is None and not d.stopped


def test_rule_budget_a_pattern_that_backtracks_without_end_ends_with_an_error_naming_it():
    d = IncrementalDetokenizer(CharTokenizer(), stop=[], stop_regex=["x", r"(a|aa)+\d"])
    # Python's re took 0.85 s on 32 a's and a "b" (MEASURED), 2.6 times longer with every 2 more a's
    assert d.push(ids("a" * 60 + "b")) == ""
    assert d.stopped and d.kept == 0
    assert d.error == (r"stop_regex `(a|aa)+\d` took over 100 ms to search the output (it backtracks too much); "
                       "use a pattern without nested repeats")
    fine = IncrementalDetokenizer(CharTokenizer(), stop=[], stop_regex=[r"a{3}b"])
    assert fine.push(ids("a" * 60 + "b")) == "a" * 60 + "b" and fine.error is None and fine.stopped
