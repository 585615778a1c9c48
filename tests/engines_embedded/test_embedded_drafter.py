import pytest

from ray_dspine.engines.embedded.drafter import NgramDrafter


def drafter_with(tokens, k=3, lo=1, hi=3, occurrence="first"):
    d = NgramDrafter(num_draft_tokens=k, ngram_min=lo, ngram_max=hi, occurrence=occurrence)
    d.extend(tokens)
    return d


def test_rule_proposes_what_followed_the_suffix():
    # context 5 6 7 8 | 5 6 : suffix "5 6" occurred at 0..2, followed by 7 8 5
    assert drafter_with([5, 6, 7, 8, 5, 6]).propose() == [7, 8, 5]


def test_rule_longer_ngram_wins():
    # suffix "1 2": the 2-gram occurred at 3..5 (followed by 9); the 1-gram "2" latest at 5 too,
    # but 1 alone also occurred at 0..1 followed by 7. The 3-gram "x 1 2" never occurred.
    tokens = [2, 7, 0, 1, 2, 9, 4, 1, 2]
    assert drafter_with(tokens, k=2).propose() == [9, 4]


def test_rule_most_recent_occurrence_when_asked():
    # "3" is followed by 4 at index 1 and by 5 at index 3; with occurrence "latest" 5 is proposed.
    assert drafter_with([3, 4, 3, 5, 3], k=1, hi=1, occurrence="latest").propose() == [5]


def test_rule_no_match_proposes_nothing():
    assert drafter_with([1, 2, 3, 4]).propose() == []


def test_rule_proposal_is_cut_at_context_end():
    # suffix "8" occurred at index 1, followed only by 9 8 before the context ends.
    assert drafter_with([7, 8, 9, 8], k=5, hi=1).propose() == [9, 8]


def test_extend_is_incremental():
    d = drafter_with([1, 2, 3], k=2, hi=2)
    d.extend([1, 2])
    assert d.propose() == [3, 1]


def test_lookup_gives_the_matched_length():
    # 1 2 3 9 2 3: the suffix 3-gram "9 2 3" never occurred before; "2 3" did, followed by 9 2 3 -> n = 2
    assert drafter_with([1, 2, 3, 9, 2, 3]).lookup() == (2, [9, 2, 3])
    assert drafter_with([1, 2, 3, 1, 2, 3]).lookup() == (3, [1, 2, 3])
    assert drafter_with([1, 2, 3, 4]).lookup() == (0, [])


def test_rule_earliest_occurrence_by_default():
    # the same context as above: "3" was first followed by 4 (index 1), so 4 is proposed.
    d = NgramDrafter(num_draft_tokens=1, ngram_min=1, ngram_max=1)
    d.extend([3, 4, 3, 5, 3])
    assert d.propose() == [4]
    # the longer match is still looked up first: the 2-gram "5 3" first ended at index 2, followed by 7 3
    d = NgramDrafter(num_draft_tokens=2, ngram_min=1, ngram_max=2, occurrence="first")
    d.extend([5, 3, 7, 3, 8, 5, 3])
    assert d.lookup() == (2, [7, 3])


def test_unknown_occurrence_is_refused():
    with pytest.raises(ValueError, match="'latest' or 'first'"):
        NgramDrafter(num_draft_tokens=1, ngram_min=1, ngram_max=1, occurrence="middle")
