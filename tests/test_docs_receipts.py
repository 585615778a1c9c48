"""docs/receipts/README.md lists exactly the receipts present, and every receipt a docs page links exists."""

from __future__ import annotations

import json
import re
from pathlib import Path

from dspine_lab.receipts_index import RECEIPTS, receipt_files, render

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)#\s]+)\)")


def test_index_lists_exactly_the_files_present():
    index = (RECEIPTS / "README.md").read_text()
    listed = sorted(set(re.findall(r"^\| \[([^\]]+)\]", index, flags=re.MULTILINE)))
    assert listed == receipt_files(), "run `python -m dspine_lab.receipts_index > docs/receipts/README.md`"


def test_index_is_the_generated_page():
    assert (RECEIPTS / "README.md").read_text() == render()


def test_links_in_docs_resolve():
    # Every relative link in README.md and docs/**.md names a file or folder that exists.
    pages = [REPO / "README.md", REPO / "autoscaling" / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    missing = []
    for page in pages:
        for target in LINK.findall(page.read_text()):
            if re.match(r"^[a-z]+:", target):
                continue  # http:, https:, mailto:
            if not (page.parent / target).exists():
                missing.append(f"{page.relative_to(REPO)} -> {target}")
    assert missing == []


def test_index_rules_on_a_toy_folder(tmp_path):
    # Worked out by hand: two topics, sorted; the PNG takes its JSON sibling's verdict (the
    # "-paired" suffix dropped); records.jsonl points at the receipt.json beside it; the executable's path
    # shortens to ray-dspine; README.md is left out.
    (tmp_path / "b").mkdir()
    (tmp_path / "a").mkdir()
    (tmp_path / "b" / "run.json").write_text(
        json.dumps({"simulated": True, "command_line": ["/x/.venv/bin/ray-dspine", "bench", "routing"]})
    )
    (tmp_path / "b" / "run-paired.png").write_bytes(b"png")
    (tmp_path / "a" / "gpu.json").write_text(json.dumps({"device_name": "NVIDIA H200", "command": "ray-dspine x"}))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "receipt.json").write_text(json.dumps({"command_line": "ray-dspine bench replay"}))
    (tmp_path / "c" / "records.jsonl").write_text("{}\n")
    (tmp_path / "README.md").write_text("old")
    assert receipt_files(tmp_path) == [
        "a/gpu.json", "b/run-paired.png", "b/run.json", "c/receipt.json", "c/records.jsonl"
    ]
    rows = [line for line in render(tmp_path).splitlines() if line.startswith("| [")]
    assert rows == [
        "| [a/gpu.json](a/gpu.json) | MEASURED (NVIDIA H200) | `ray-dspine x` |",
        "| [b/run-paired.png](b/run-paired.png) | SIMULATED | plot drawn by the run of `run.json` |",
        "| [b/run.json](b/run.json) | SIMULATED | `ray-dspine bench routing` |",
        "| [c/receipt.json](c/receipt.json) |  | `ray-dspine bench replay` |",
        "| [c/records.jsonl](c/records.jsonl) |  | per-request records of the run of `receipt.json` |",
    ]
