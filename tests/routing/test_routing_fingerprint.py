import hashlib
import subprocess
import sys

import pytest

from ray_dspine.routing.fingerprint import conversation_text, prefix_hashes, session_fingerprint


def test_rule_chained_block_hashes():
    text = "abcdefghij"  # block_chars 4 -> full blocks "abcd", "efgh"; "ij" is partial and not hashed
    h0 = hashlib.blake2b(b"abcd", digest_size=16).digest()
    h1 = hashlib.blake2b(h0 + b"efgh", digest_size=16).digest()
    assert prefix_hashes(text, block_chars=4) == [h0.hex(), h1.hex()]


def test_rule_hash_covers_all_text_before_it():
    # same second block, different first block -> different second hash
    a = prefix_hashes("AAAAbbbb", block_chars=4)
    b = prefix_hashes("CCCCbbbb", block_chars=4)
    assert a[1] != b[1]
    # a longer prompt with the same start keeps the same leading hashes
    assert prefix_hashes("AAAAbbbbcccc", block_chars=4)[:2] == a


def test_short_text_has_no_hashes_and_bad_block_size_refused():
    assert prefix_hashes("abc", block_chars=4) == []
    with pytest.raises(ValueError):
        prefix_hashes("abc", block_chars=0)


def test_conversation_text_appending_a_turn_keeps_earlier_hashes():
    turn1 = [{"role": "system", "content": "s" * 300}, {"role": "user", "content": "u" * 300}]
    turn2 = turn1 + [{"role": "assistant", "content": "a" * 100}, {"role": "user", "content": "next"}]
    h1 = prefix_hashes(conversation_text(turn1), block_chars=128)
    h2 = prefix_hashes(conversation_text(turn2), block_chars=128)
    assert len(h1) == 4  # each message is role + 3 separators + newline: (6+300+4) + (4+300+4) = 618 -> 4 blocks
    assert h2[: len(h1)] == h1


def test_rule_session_fingerprint_uses_first_system_and_user_message():
    opening = [{"role": "system", "content": "be terse"}, {"role": "user", "content": "fix bug 12"}]
    later = opening + [{"role": "assistant", "content": "done"}, {"role": "user", "content": "thanks"}]
    assert session_fingerprint(opening) == session_fingerprint(later)
    other = [{"role": "system", "content": "be terse"}, {"role": "user", "content": "fix bug 13"}]
    assert session_fingerprint(other) != session_fingerprint(opening)
    assert len(session_fingerprint(opening)) == 32


def test_fingerprints_are_stable_across_processes():
    code = (
        "from ray_dspine.routing.fingerprint import prefix_hashes, session_fingerprint;"
        "print(prefix_hashes('x'*10, 4)[1], session_fingerprint([{'role':'user','content':'hi'}]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [prefix_hashes("x" * 10, 4)[1], session_fingerprint([{"role": "user", "content": "hi"}])]
