#!/usr/bin/env python3
"""The environment switches the code reads and the ones the documentation names agree.

- Every environment variable the library, the tools or the perf suite read (a quoted "ATTNBWD_..." literal in
  src/, backends/, include/ or perf/) is documented in README.md, backends/cuda/README.md or perf/README.md.
- Every ATTNBWD_... name those documents mention exists somewhere in the code, the build or the tests (no
  documentation of a removed switch).
Run from anywhere: python3 tests/docs/test_switch_docs.py (CI runs it).
"""
import pathlib
import re
import sys
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "backends" / "cuda" / "README.md", ROOT / "perf" / "README.md"]
READ_BY = ["src", "backends", "include", "perf"]
CODE = ["src", "backends", "include", "perf", "tests", "cmake", "spack", ".ci"]
SOURCE_SUFFIXES = {".cpp", ".hpp", ".cu", ".cuh", ".h"}
CODE_SUFFIXES = SOURCE_SUFFIXES | {".py", ".sh", ".cmake", ".in", ".txt", ".patch", ""}
# A whole name; a pattern such as ATTNBWD_CUDA_* or ATTNBWD_CUDA_GQA_{PAD,DO} is not one (the lookahead drops it).
NAME = re.compile(r"ATTNBWD_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_]*[*{])")


def files(dirs, suffixes):
    for d in dirs:
        for p in sorted((ROOT / d).rglob("*")):
            if p.is_file() and p.suffix in suffixes and "device-records" not in p.parts:
                yield p


def read_switches():
    """Quoted ATTNBWD_ names in the sources: each is an environment variable read through env_switch/getenv."""
    found = {}
    for p in files(READ_BY, SOURCE_SUFFIXES):
        for m in re.finditer(r'"(ATTNBWD_[A-Z0-9_]+)"', p.read_text(errors="replace")):
            found.setdefault(m.group(1), p.relative_to(ROOT))
    return found


def documented_names():
    names = {}
    for doc in DOCS:
        if doc.exists():
            for m in NAME.finditer(doc.read_text()):
                names.setdefault(m.group(0), doc.name)
    return names


def code_text():
    """The code, the build and the tests, without perf/probes (patches of removed experiments) and perf/results."""
    parts = [(ROOT / "CMakeLists.txt").read_text()]
    for p in files(CODE, CODE_SUFFIXES):
        rel = p.relative_to(ROOT).parts
        if rel[:2] in (("perf", "probes"), ("perf", "results")):
            continue
        if p.name != "test_switch_docs.py":
            parts.append(p.read_text(errors="replace"))
    return "\n".join(parts)


class SwitchDocs(unittest.TestCase):
    def test_every_switch_read_is_documented(self):
        docs = documented_names()
        switches = read_switches()
        self.assertGreater(len(switches), 20, "the scan found too few switches: a broken pattern?")
        missing = {s: str(where) for s, where in switches.items() if s not in docs}
        self.assertEqual(missing, {}, "read by the code but in no document: " + ", ".join(sorted(missing)))

    def test_every_documented_name_exists(self):
        code = code_text()
        stale = {}
        for name, doc in documented_names().items():
            # the name as a whole word of the code
            if not re.search(re.escape(name) + r"(?![A-Z0-9_])", code):
                stale[name] = str(doc)
        self.assertEqual(stale, {}, "named in a document but not in the code: " + ", ".join(sorted(stale)))


if __name__ == "__main__":
    sys.exit(0 if unittest.main(exit=False, verbosity=1).result.wasSuccessful() else 1)
