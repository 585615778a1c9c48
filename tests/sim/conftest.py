"""Small hand-written traces (the real ones stay in ../shared/data/traces and are never copied)."""

import pytest

AZURE_CSV = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:00:00.0000000,1000,20
2023-11-16 18:00:05.0000000,2000,5
2023-11-16 18:00:10.5000000,600,40
2023-11-16 18:00:20.0000000,1500,1
"""

MOONCAKE_JSONL = """{"timestamp": 0, "input_length": 1100, "output_length": 30, "hash_ids": [0, 1, 2]}
{"timestamp": 3000, "input_length": 1600, "output_length": 10, "hash_ids": [0, 1, 3, 4]}
{"timestamp": 9000, "input_length": 300, "output_length": 50, "hash_ids": [5]}
"""


@pytest.fixture
def azure_path(tmp_path):
    path = tmp_path / "tiny_code.csv"
    path.write_text(AZURE_CSV, encoding="utf-8")
    return path


@pytest.fixture
def mooncake_path(tmp_path):
    path = tmp_path / "tiny_mooncake.jsonl"
    path.write_text(MOONCAKE_JSONL, encoding="utf-8")
    return path
