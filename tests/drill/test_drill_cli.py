"""`ray-dspine drill` usage errors: exit status 2 and a message naming the flag; an unreachable stack: 1."""

import pytest

from ray_dspine.cli import main

BASE = ["drill", "--endpoint", "http://127.0.0.1:9"]


def _fails(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize(("extra", "flag", "words"), [
    (["--only", "corpus,bogus"], "--only", "'bogus'"),
    (["--only", ""], "--only", "(none given)"),
    (["--concurrency", "0"], "--concurrency", "greater than or equal to 1"),
    (["--burst", "many"], "--burst", "invalid int value"),
    (["--client-timeout-s", "-1"], "--client-timeout-s", "greater than 0"),
    (["--soak-load", "0"], "--soak-load", "greater than 0"),
    (["--kill-pool", "a b"], "--kill-pool", "should match pattern"),
    (["--only", "kill"], "--ray-address", "kill scenario needs it"),
    (["--only", "corpus,soak"], "--only", "add concurrency"),
    (["--api-key-env", "DRILL_TEST_UNSET_KEY"], "--api-key-env", "DRILL_TEST_UNSET_KEY is not set"),
    (["--json", "/"], "--json", "cannot write"),
    (["--seed", "-1"], "--seed", "greater than or equal to 0"),
])
def test_bad_usage_exits_2_naming_the_flag(extra, flag, words, capsys, monkeypatch):
    monkeypatch.delenv("DRILL_TEST_UNSET_KEY", raising=False)
    code, err = _fails(BASE + extra, capsys)
    assert code == 2
    assert f"argument {flag}:" in err and words in err
    assert "Traceback" not in err


def test_bad_endpoint_is_a_usage_error(capsys):
    code, err = _fails(["drill", "--endpoint", "127.0.0.1:8000"], capsys)
    assert code == 2 and "argument --endpoint:" in err


def test_unreachable_stack_exits_1(capsys, tmp_path):
    # Port 9 (discard) on loopback has no listener here: the model list cannot be read.
    code, err = _fails(BASE + ["--only", "corpus", "--json", str(tmp_path / "r.json")], capsys)
    assert code == 1 and "cannot read the model list" in err
    assert (tmp_path / "r.json").exists()
